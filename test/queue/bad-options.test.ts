import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, startOutboxWorker } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Options BullMQ refuses are configuration errors (`ECONFIG`, naming the
 * option), found when the producer or worker is made, with no connection
 * left open. A worker's used to be a plain Error from BullMQ with its Redis
 * connection left open (the process could not exit); a producer's priority
 * out of BullMQ's range failed every sendMail with ECONNECTION, "the job may
 * have been stored", leaving its content in Redis. Real redis-server.
 */

let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedisServer();
});

afterAll(async () => {
  await redis?.stop();
});

/** Clients connected to the test's Redis, besides the test's own. */
async function otherClients(): Promise<number> {
  const list = (await redis.client.call('CLIENT', 'LIST')) as string;
  return list.trim().split('\n').length - 1;
}

describe('options BullMQ refuses', () => {
  it('a worker: ECONFIG naming workerOptions, and no connection left open', async () => {
    const err = await startOutboxWorker({
      connection: redis.url,
      apiKey: 'k_0123456789abcdef',
      baseUrl: 'http://127.0.0.1:9',
      workerOptions: { stalledInterval: 0 },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('workerOptions.stalledInterval') });
    await eventually(async () => (await otherClients()) === 0, { what: 'no connection left open' });
  });

  it('a worker: maxStalledCount is refused for maxStalls (the outbox counts stalls itself), which is checked', async () => {
    const base = { connection: redis.url, apiKey: 'k_0123456789abcdef', baseUrl: 'http://127.0.0.1:9' };
    const bullmqLimit = await startOutboxWorker({
      ...base,
      workerOptions: { maxStalledCount: 3 } as Record<string, unknown>,
    }).catch((e: unknown) => e);
    expect(bullmqLimit).toMatchObject({
      code: 'ECONFIG',
      message: expect.stringMatching(/^Invalid option workerOptions\.maxStalledCount: .*set maxStalls/),
    });
    for (const maxStalls of [-1, 1.5, '3']) {
      const err = await startOutboxWorker({ ...base, maxStalls: maxStalls as number }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('maxStalls') });
    }
    expect(await otherClients()).toBe(0);
  });

  it('a producer: ECONFIG naming jobOptions.priority, before anything is stored', () => {
    for (const priority of [3_000_000, 1.5, -1]) {
      let err: unknown;
      try {
        new EmlApiQueueTransport({ connection: redis.url, jobOptions: { priority } });
      } catch (e) {
        err = e;
      }
      expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('jobOptions.priority') });
    }
  });

  it('a producer: ECONFIG for removeOnComplete and removeOnFail that defeat the outbox (review F13 e)', () => {
    const refused = (jobOptions: object): unknown => {
      try {
        void new EmlApiQueueTransport({ connection: redis.url, jobOptions }).close();
      } catch (err) {
        return err;
      }
      return undefined;
    };
    // Sent jobs removed within the service's idempotency window: a repeated idempotencyKey is queued again.
    for (const removeOnComplete of [true, 0, { count: 0 }, { age: 3600 }, { age: 0, count: 10 }]) {
      expect(refused({ removeOnComplete })).toMatchObject({
        code: 'ECONFIG',
        message: expect.stringContaining('jobOptions.removeOnComplete'),
      });
    }
    // Failed jobs removed at once: parked messages (waiting for a person) and errors vanish.
    for (const removeOnFail of [true, 0, { count: 0 }, { age: 0 }]) {
      expect(refused({ removeOnFail })).toMatchObject({
        code: 'ECONFIG',
        message: expect.stringContaining('jobOptions.removeOnFail'),
      });
    }
    // Keeping them longer, for ever, or a number of them, is the app's choice.
    for (const jobOptions of [
      { removeOnComplete: false, removeOnFail: false },
      { removeOnComplete: { age: 2 * 86400 }, removeOnFail: { age: 3600 } },
      { removeOnComplete: { age: 86400, count: 100_000 }, removeOnFail: 1000 },
    ]) {
      expect(refused(jobOptions)).toBeUndefined();
    }
  });
});
