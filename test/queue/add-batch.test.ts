import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { addJob, type AddedJob } from '../../src/queue/add-job.js';
import { queueClient } from '../../src/queue/bullmq-internals.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import type { OutboxRedisClient } from '../../src/queue/redis-connection.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue, type OutboxJobRecord } from '../../src/queue/outbox-job.js';

/**
 * Each add is one command, a script that adds and reads (add-job.ts): no ioredis pipeline (each
 * copies every script BullMQ defines), whatever the relay's many connections store at once. Each
 * add reads only what its own command answered. Real redis-server.
 */

let redis: RedisServer;
let transport: EmlApiQueueTransport;
let client: OutboxRedisClient;

beforeAll(async () => {
  redis = await startRedisServer();
  transport = new EmlApiQueueTransport({ connection: redis.url });
  client = await queueClient(transport.queue);
});

afterAll(async () => {
  await transport?.close();
  await redis?.stop();
});

beforeEach(async () => {
  await redis.client.flushall();
  vi.restoreAllMocks();
});

const job = (jobId: string, subject: string) => ({
  name: 'eml',
  data: { kind: 'eml', contentKey: `bull:eml-api:content:${jobId}:1-00`, subject } as unknown as OutboxJobRecord,
  options: {},
  jobId,
  contentKey: `bull:eml-api:content:${jobId}:1-00`,
});

/** What Redis held after the add (the add and its read both ran). */
function stateOf(added: AddedJob) {
  if (added.kind !== 'added') throw new Error(`the read after the add failed: ${String(added.error)}`);
  return added.state;
}

describe('addJob', () => {
  it('adds each job with one command and no pipeline, each reading its own answers', async () => {
    const pipelines = vi.spyOn(client as unknown as { pipeline(): unknown }, 'pipeline');
    const commands = vi.spyOn(client as unknown as { sendCommand(c: { name: string }): unknown }, 'sendCommand');
    const [a, b, again] = await Promise.all([
      addJob(recordQueue(transport.queue), job('batch-a', 'first')),
      addJob(recordQueue(transport.queue), job('batch-b', 'second')),
      // The same id in the same turn: BullMQ keeps the first, and this add reads it (a duplicate).
      addJob(recordQueue(transport.queue), job('batch-a', 'third')),
    ]);
    expect(pipelines).not.toHaveBeenCalled();
    // The script goes whole (EVAL) the first time on a connection, by its hash (EVALSHA) after.
    expect(commands.mock.calls.map(([c]) => c.name)).toEqual(['eval', 'evalsha', 'evalsha']);
    expect(JSON.parse(stateOf(a).data!)).toMatchObject({ subject: 'first' });
    expect(JSON.parse(stateOf(b).data!)).toMatchObject({ subject: 'second' });
    expect(JSON.parse(stateOf(again).data!)).toMatchObject({ subject: 'first' });
    expect(stateOf(a).storedLength).toBe(-1);
    const later = await addJob(recordQueue(transport.queue), job('batch-c', 'later'));
    expect(pipelines).not.toHaveBeenCalled();
    expect(commands).toHaveBeenCalledTimes(4);
    expect(JSON.parse(stateOf(later).data!)).toMatchObject({ subject: 'later' });
    expect((await recordQueue(transport.queue).getJob('batch-a'))?.data).toMatchObject({ subject: 'first' });
  });
});
