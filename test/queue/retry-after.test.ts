import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { capturingLogger } from '../helpers/logger.js';
import { EmlApiQueueTransport, readOutboxStatus } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * One answer with a huge `Retry-After` (a broken proxy, a quota page, a
 * hostile endpoint) paused every worker of the queue for that long: the
 * worker passed it to BullMQ's rateLimit() uncapped, the pause is a key in
 * Redis (so restarting workers did not help), and `queue status` showed
 * nothing wrong (review F5, attack/02-retry-after-wedge.ts). A 503's did the
 * same to one job. Now the worker honours a `Retry-After` up to
 * `maxRetryAfter`, trims a longer pause it finds as it starts, and status
 * shows the pause. Real redis-server, the fake service over HTTP.
 */

const YEAR_S = 365 * 24 * 3600;
let redis: RedisServer;
let service: FakeService;
let transport: EmlApiQueueTransport;
const logger = capturingLogger();
const warnings = () => logger.messages('warn');
const workers = inProcessWorkers(() => ({
  connection: redis.url,
  apiKey: 'k'.repeat(24),
  baseUrl: service.url,
  logger,
}));
const LIMITER = 'bull:eml-api:limiter';

beforeAll(async () => {
  [redis, service] = await Promise.all([startRedisServer({ appendonly: true }), startFakeService()]);
  transport = new EmlApiQueueTransport({ connection: redis.url, retry: { delay: 100, maxDelay: 100, jitter: 0 } });
});

afterAll(async () => {
  await transport?.close();
  await service?.close();
  await redis?.stop();
});

beforeEach(async () => {
  service.clear();
  logger.clear();
  await transport.queue.obliterate({ force: true });
  await redis.client.del(LIMITER);
});

afterEach(() => workers.closeAll());

const send = (subject: string) =>
  nodemailer.createTransport(transport).sendMail({ from: 'a@example.test', to: 'b@example.test', subject, text: 'x' });

const busy = (status: 429 | 503) => ({
  status,
  headers: { 'retry-after': String(YEAR_S) },
  body: { error: { code: status === 429 ? 'rate_limited' : 'unavailable', message: 'come back next year' } },
});

describe('a Retry-After of a year', () => {
  it('on a 429 pauses the queue for maxRetryAfter at most, which queue status shows, and says so', async () => {
    service.script([busy(429)]);
    await workers.start(); // maxRetryAfter: its default, 15 minutes
    await send('first');
    // worker.rateLimit() sets BullMQ's limiter key far above any count (its own limiter counts in it too).
    await eventually(async () => Number(await redis.client.get(LIMITER)) > 1e12, { what: 'the queue paused' });
    expect(await redis.client.pttl(LIMITER)).toBeLessThanOrEqual(15 * 60_000);
    expect(warnings().some((w) => /Retry-After.*31536000 s.*maxRetryAfter.*900 s/.test(w))).toBe(true);

    const status = await readOutboxStatus(transport.queue);
    expect(status.rateLimitedMs).toBeGreaterThan(0);
    expect(status.rateLimitedMs).toBeLessThanOrEqual(15 * 60_000);
    const { stdout } = await runCliCapturing(['queue', 'status'], { env: { REDIS_URL: redis.url } });
    expect(stdout).toMatch(/rate limited for \d+ s/);
    const json = JSON.parse(
      (await runCliCapturing(['queue', 'status', '--json'], { env: { REDIS_URL: redis.url } })).stdout,
    );
    expect(json.rateLimitedMs).toBeGreaterThan(0);
  });

  it('on a 503 delays that job by maxRetryAfter at most', async () => {
    service.script([busy(503)]);
    await workers.start({ maxRetryAfter: 1000 });
    const info = await send('second');
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'the job sent after the capped wait',
    });
    expect(service.requests).toHaveLength(2);
    expect(warnings().some((w) => /Retry-After.*maxRetryAfter/.test(w))).toBe(true);
    expect((await transport.queue.getJob(info.queueId))!.attemptsMade).toBe(2);
  });

  it('set by an earlier worker (no cap) is cut to maxRetryAfter when a worker starts', async () => {
    // What a worker before this fix left behind: BullMQ's rateLimit() for a year.
    await redis.client.set(LIMITER, String(Number.MAX_SAFE_INTEGER), 'PX', YEAR_S * 1000);
    expect((await readOutboxStatus(transport.queue)).rateLimitedMs).toBeGreaterThan(300 * 24 * 3_600_000);
    // BullMQ re-reads the pause every maximumRateLimitDelay (30 s by default): short here.
    await workers.start({ maxRetryAfter: 1000, workerOptions: { maximumRateLimitDelay: 500 } });
    expect(await redis.client.pttl(LIMITER)).toBeLessThanOrEqual(1000);
    expect(warnings().some((w) => /paused.*cut to 1 s.*maxRetryAfter/.test(w))).toBe(true);
    await send('third');
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'sent once the cut pause ended',
    });
  });

  it('is refused as an option unless a whole number of ms from 1 s to 24 h', async () => {
    await expect(workers.start({ maxRetryAfter: 10 })).rejects.toMatchObject({
      code: 'ECONFIG',
      message: expect.stringContaining('maxRetryAfter'),
    });
  });
});
