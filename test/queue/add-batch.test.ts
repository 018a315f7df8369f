import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { addJob, type AddedJob } from '../../src/queue/add-job.js';
import { queueClient } from '../../src/queue/bullmq-internals.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import type { OutboxRedisClient } from '../../src/queue/redis-connection.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue, type OutboxJobRecord } from '../../src/queue/outbox-job.js';

/**
 * The adds of one turn of the event loop share one pipeline (add-job.ts): what the relay's many
 * connections store at once costs one pipeline and one write to Redis. Each add still reads only
 * what its own commands answered, in order. Real redis-server.
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
  opts: { jobId },
  contentKey: `bull:eml-api:content:${jobId}:1-00`,
});

/** What Redis held after the add (the add and its read both ran). */
function stateOf(added: AddedJob) {
  if (added.kind !== 'added') throw new Error(`the read after the add failed: ${String(added.error)}`);
  return added.state;
}

describe('addJob', () => {
  it('sends the adds of one turn of the event loop in one pipeline, each reading its own answers', async () => {
    const pipelines = vi.spyOn(client as unknown as { pipeline(): unknown }, 'pipeline');
    const [a, b, again] = await Promise.all([
      addJob(recordQueue(transport.queue), client, job('batch-a', 'first')),
      addJob(recordQueue(transport.queue), client, job('batch-b', 'second')),
      // The same id in the same pipeline: BullMQ keeps the first, and this add reads it (a duplicate).
      addJob(recordQueue(transport.queue), client, job('batch-a', 'third')),
    ]);
    expect(pipelines).toHaveBeenCalledTimes(1);
    expect(JSON.parse(stateOf(a).data!)).toMatchObject({ subject: 'first' });
    expect(JSON.parse(stateOf(b).data!)).toMatchObject({ subject: 'second' });
    expect(JSON.parse(stateOf(again).data!)).toMatchObject({ subject: 'first' });
    expect(stateOf(a).storedLength).toBe(-1);
    // A later turn gets a pipeline of its own.
    const later = await addJob(recordQueue(transport.queue), client, job('batch-c', 'later'));
    expect(pipelines).toHaveBeenCalledTimes(2);
    expect(JSON.parse(stateOf(later).data!)).toMatchObject({ subject: 'later' });
    expect((await recordQueue(transport.queue).getJob('batch-a'))?.data).toMatchObject({ subject: 'first' });
  });
});
