import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { eventually, inProcessWorkers, hasStoredContent } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * When a retry goes, and when it must not. BullMQ promotes a backed-off job
 * to the back of the wait list, so a retry waited for the whole backlog
 * (transactional retries behind bulk mail, and a send whose answer was lost
 * re-sent after the service's idempotency window, delivered twice): retries
 * now go before new work. A send whose outcome was unknown (processed, answer
 * lost) is not re-sent blindly once the service's idempotency window is near:
 * the job is parked for a person. Real redis-server; the emulator, whose
 * clock the test moves on a day; for the order of requests, the fake service,
 * which holds a request until the test releases it (the emulator cannot hold
 * one, and the order must not depend on timing).
 */

let redis: RedisServer;
let emu: Emulator;
let service: FakeService;
/** How far the emulator's clock is ahead of the real one. */
let emulatorClockAhead = 0;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu, service] = await Promise.all([
    startRedisServer(),
    startEmulator({ now: () => new Date(Date.now() + emulatorClockAhead) }),
    startFakeService(),
  ]);
});

afterAll(async () => {
  await Promise.all([emu?.close(), service?.close()]);
  await redis?.stop();
});

beforeEach(() => {
  emulatorClockAhead = 0;
  emu.reset();
  emu.setFaults(undefined);
  service.clear();
});

afterEach(() => workers.closeAll());

const message = (n: string) => ({ from: 'shop@example.test', to: `${n}@example.test`, text: n, idempotencyKey: n });

describe('a retry', () => {
  it('goes before the backlog of new messages, not behind it', async () => {
    const transport = new EmlApiQueueTransport({
      connection: redis.url,
      queueName: 'precedence',
      retry: { delay: 300, maxDelay: 300, jitter: 0 },
    });
    try {
      const transporter = nodemailer.createTransport(transport);
      // One message, then a backlog of eight, all queued before a worker runs.
      await transporter.sendMail(message('retried'));
      for (let i = 1; i <= 8; i++) await transporter.sendMail(message(`backlog-${i}`));
      // The first attempt fails for a passing reason; the next request is held while the retry comes due.
      service.script([{ status: 503, body: { error: { code: 'unavailable', message: 'busy' } } }, 'hold']);
      await workers.start({ queueName: 'precedence', baseUrl: service.url, concurrency: 1 });
      await eventually(() => service.held === 1, { what: 'the first backlog message in flight' });
      const score = await redis.client.zscore('bull:precedence:delayed', 'retried');
      const due = Math.floor(Number(score) / 0x1000);
      await eventually(() => Date.now() > due + 50, { what: 'the retry due' });
      service.releaseAll();
      await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 9, {
        what: 'all sent',
      });
      const order = service.requests.map((r) => r.headers['idempotency-key']);
      expect(order).toEqual([
        'retried',
        'backlog-1',
        'retried',
        ...Array.from({ length: 7 }, (_, i) => `backlog-${i + 2}`),
      ]);
    } finally {
      await transport.queue.obliterate({ force: true });
      await transport.close();
    }
  });
});

describe('a send whose outcome was unknown', () => {
  it.each([
    [500, true],
    [503, false],
  ])(
    'after a %i, counts as possibly accepted: %s (the contract keeps 503 for "not processed")',
    async (status, may) => {
      const queueName = `answered-${status}`;
      const transport = new EmlApiQueueTransport({ connection: redis.url, queueName, retry: { attempts: 1 } });
      try {
        const info = await nodemailer.createTransport(transport).sendMail(message(`dan-${status}`));
        service.script([{ status, body: { error: { code: 'internal', message: 'failed' } } }]);
        const started = Date.now();
        await workers.start({ queueName, baseUrl: service.url });
        await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1, { what: 'failed' });
        const job = await recordQueue(transport.queue).getJob(info.queueId);
        expect(job!.data.lastError).toMatchObject({ responseCode: status });
        if (may) {
          expect(job!.data.possiblyAcceptedAt).toBeGreaterThanOrEqual(started);
          expect(job!.data.resendUntil).toBeGreaterThan(job!.data.possiblyAcceptedAt!);
        } else {
          expect(job!.data.possiblyAcceptedAt).toBeUndefined();
        }
      } finally {
        await transport.close();
      }
    },
  );

  it('is not sent again once the service may have forgotten its key: the job is parked for a person', async () => {
    const transport = new EmlApiQueueTransport({
      connection: redis.url,
      queueName: 'window',
      retry: { attempts: 5, delay: 1500, maxDelay: 1500, jitter: 0 },
    });
    try {
      const info = await nodemailer.createTransport(transport).sendMail(message('ann'));
      // Processed and delivered, then the connection reset: the worker cannot know.
      emu.setFaults({ resetAfterProcessing: 1 });
      const started = Date.now();
      // The service keeps keys 1 s here (a day on the real one): the retry, 1.5 s later, comes after it.
      await workers.start({ queueName: 'window', idempotencyWindow: 1000, idempotencyMargin: 0 });
      await eventually(() => emu.messages().length === 1, { what: 'the first attempt delivered' });
      // The service's day passes: it has forgotten the key, and a resend would be a new message.
      emulatorClockAhead = 25 * 3_600_000;
      await eventually(
        async () => {
          const { failed, completed } = await transport.queue.getJobCounts('failed', 'completed');
          return failed! + completed! === 1 || emu.messages().length > 1;
        },
        { what: 'the job parked (or sent again)' },
      );
      expect(emu.mailbox('ann@example.test')).toHaveLength(1);
      const job = await recordQueue(transport.queue).getJob(info.queueId);
      expect(await job!.getState()).toBe('failed');
      // When the first attempt that may have been accepted started, and until when a resend was safe.
      expect(job!.data.possiblyAcceptedAt).toBeGreaterThanOrEqual(started);
      expect(job!.data.resendUntil).toBe(job!.data.possiblyAcceptedAt! + 1000);
      expect(job!.data.lastError).toMatchObject({ parked: 'idempotency-window', permanent: true });
      expect(job!.failedReason).toContain('may have been delivered');
      expect(job!.failedReason).toContain("the service's idempotency window has passed");
      expect(job!.failedReason).toContain('check before retrying');
      // Its content stays: a person who checked can send it again, by naming it.
      expect(await hasStoredContent(redis.client, job!.data)).toBe(true);
      // No worker runs while it is put back: one would take it at once and, with the fault still on, mark it again.
      await workers.closeAll();
      const env = { env: { REDIS_URL: redis.url } };
      expect(await runCliCapturing(['queue', 'retry', '--queue', 'window'], env)).toMatchObject({
        code: 0,
        stdout: 'Put back 0 failed messages\n',
        stderr: expect.stringContaining('Left 1 failed message as it is: it may have been delivered'),
      });
      expect(await runCliCapturing(['queue', 'retry', '--queue', 'window', info.queueId], env)).toMatchObject({
        code: 0,
        stdout: 'Put back 1 failed message\n',
      });
      const putBack = await recordQueue(transport.queue).getJob(info.queueId);
      expect(putBack!.data.resendUntil).toBeUndefined();
      expect(await putBack!.getState()).not.toBe('failed');
    } finally {
      emu.setFaults(undefined);
      await workers.closeAll();
      await transport.queue.obliterate({ force: true });
      await transport.close();
    }
  });
});
