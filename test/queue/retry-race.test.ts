import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport, openOutboxQueue, retryFailedSends } from '../../src/queue/index.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisHoldProxy, type RedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Two operators putting failed messages back at once (`eml-api queue retry`
 * in two terminals, a dashboard's "Retry" meanwhile): retryFailedSends threw
 * at the first job the other had put back a moment before, and left the rest
 * failed (review F13 c, found by reading). It now carries on and says which it
 * left. Real redis-server; a proxy holds the admin's put-back until the other
 * operator's has landed.
 */

let redis: RedisServer;
let service: FakeService;
let proxy: RedisHoldProxy;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: 'k'.repeat(24), baseUrl: service.url }));

beforeAll(async () => {
  [redis, service] = await Promise.all([startRedisServer({ appendonly: true }), startFakeService()]);
  proxy = await startRedisHoldProxy(redis.port);
  transport = new EmlApiQueueTransport({ connection: redis.url });
});

afterAll(async () => {
  await workers.closeAll();
  await transport?.close();
  await proxy?.close();
  await service?.close();
  await redis?.stop();
});

describe('retryFailedSends while someone else puts the same jobs back', () => {
  it('carries on past a job put back meanwhile, puts the others back, and reports it', async () => {
    // Two failed jobs, their content kept (a refused key: fixed elsewhere, then put back).
    service.answer({ status: 401, body: { error: { code: 'invalid_api_key', message: 'no' } } });
    const mailer = nodemailer.createTransport(transport);
    for (const id of ['a', 'b']) {
      await mailer.sendMail({ from: 'x@example.test', to: 'y@example.test', text: id, idempotencyKey: id });
    }
    await workers.start();
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 2, { what: 'failed' });
    await workers.closeAll();

    const admin = await openOutboxQueue({ connection: proxy.url });
    try {
      // The admin's put-back of "a" (BullMQ's script) is held on its way to Redis...
      proxy.holdNext(/\beval/i); // EVAL or EVALSHA
      const retrying = retryFailedSends(admin.queue, { ids: ['a', 'b'] });
      await eventually(() => proxy.held > 0, { what: 'the put-back held' });
      // ...while another operator puts "a" back first.
      await (await transport.queue.getJob('a'))!.retry('failed');
      proxy.release();
      const result = await retrying;
      expect(result.retried).toEqual(['b']);
      expect(result.skipped).toEqual([{ queueId: 'a', reason: expect.stringContaining('no longer failed') }]);
      expect(await transport.queue.getJobCounts('failed')).toEqual({ failed: 0 });
    } finally {
      await admin.close();
    }
  });
});
