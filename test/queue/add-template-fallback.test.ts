import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { addCommand, type AddCommand } from '../../src/queue/bullmq-internals.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * The add command reused per queue, options and name (bullmq-internals.ts `addCommand` with `json`) must be BullMQ's
 * own byte for byte, or BullMQ's must be used: for the ids and times its checks (one per size of the id's MessagePack
 * header) do not see. A real redis-server.
 */

let redis: RedisServer;
let queue: Queue;
let connection: Redis;

beforeAll(async () => {
  redis = await startRedisServer();
  connection = new Redis(redis.url, { maxRetriesPerRequest: null });
  queue = new Queue('template', { connection, prefix: 'bull' });
});

afterAll(async () => {
  await queue?.close();
  connection?.disconnect();
  await redis?.stop();
});

afterEach(() => {
  vi.useRealTimers();
});

function outcome(build: () => AddCommand): { args: unknown[] } | { error: string } {
  try {
    return { args: build().args };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

function expectBullmqs(options: object, jobId: string): void {
  const job = { name: 'eml', data: {}, options, jobId };
  const reused = outcome(() => addCommand(queue, job, '{}'));
  const bullmqs = outcome(() => addCommand(queue, job));
  expect(reused).toEqual(bullmqs);
}

describe("the add command reused for a queue's options and job name", () => {
  it("is BullMQ's for an id with a lone surrogate (msgpackr packs it as 3 bytes of its own, not as U+FFFD)", () => {
    vi.useFakeTimers({ toFake: ['Date'], now: Date.UTC(2026, 10, 29, 12) });
    const options = { attempts: 3 };
    // A template made and checked with well-formed ids of each header size first.
    for (const jobId of ['ok', 'o'.repeat(40), 'o'.repeat(300)]) expectBullmqs(options, jobId);
    for (const jobId of ['\ud800', 'a\udc00b', 'x'.repeat(40) + '\udbff', 'y'.repeat(300) + '\ud83d']) {
      expectBullmqs(options, jobId);
    }
  });

  it("is BullMQ's at a time msgpackr packs as an integer, not a float 64 (a clock before 1970-02-19, or faked)", () => {
    const options = { priority: 4 };
    vi.useFakeTimers({ toFake: ['Date'], now: Date.UTC(2026, 10, 29, 12) });
    expectBullmqs(options, 'first');
    for (const at of [0xffffffff, 1000, 1, -5]) {
      vi.setSystemTime(at);
      expectBullmqs(options, `at${at}`);
    }
  });

  it('refuses as BullMQ does the ids BullMQ refuses (an integer, a ":" not in a repeat key)', () => {
    vi.useFakeTimers({ toFake: ['Date'], now: Date.UTC(2026, 10, 29, 12) });
    const options = { attempts: 2 };
    expectBullmqs(options, 'fine');
    for (const jobId of ['42', '-5', 'a:b', 'a:b:c:d']) expectBullmqs(options, jobId);
  });
});

describe('an add the template cannot make', () => {
  it('leaves the template to the adds after it (one odd id or time does not send every later add through BullMQ)', async () => {
    const { loadBullmq } = await import('../../src/queue/redis-connection.js');
    vi.useFakeTimers({ toFake: ['Date'], now: Date.UTC(2026, 10, 29, 12) });
    const options = { attempts: 7 };
    expectBullmqs(options, 'warm');
    addCommand(queue, { name: 'eml', data: {}, options, jobId: 'odd\ud800' }, '{}');
    vi.setSystemTime(1000);
    addCommand(queue, { name: 'eml', data: {}, options, jobId: 'early' }, '{}');
    vi.setSystemTime(Date.UTC(2026, 10, 29, 13));
    const addJob = vi.spyOn(loadBullmq().Job.prototype, 'addJob');
    try {
      for (let i = 0; i < 5; i++) addCommand(queue, { name: 'eml', data: {}, options, jobId: `later${i}` }, '{}');
      expect(addJob).not.toHaveBeenCalled();
    } finally {
      addJob.mockRestore();
    }
  });
});
