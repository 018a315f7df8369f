import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import {
  EmlApiQueueTransport,
  readOutboxStatus,
  type OutboxWorkerOptions,
  type OutboxJobData,
  type OutboxSendResult,
} from '../../src/queue/index.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { dumpRedis, eventually, hasStoredContent } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * How the outbox fails: permanent errors fail the job at once and keep the
 * error on it (shown by `eml-api queue status`, retried by `eml-api queue
 * retry`), a 429 pauses every worker, close() and close({ force }), and the
 * API key never reaching Redis or the CLI's output.
 */

let service: FakeService;
/** A key the service refuses for sends (403 missing_scope): a permanent failure a fix of the key cures. */
const GROUPS_ONLY_KEY = 'k-groups-only';
const outbox = useOutbox({
  emulator: { apiKeys: [{ key: GROUPS_ONLY_KEY, scopes: ['group:insert'] }] },
  transport: { retry: { delay: 200, maxDelay: 1000, jitter: 0 } },
});

beforeAll(async () => {
  service = await startFakeService();
});

afterAll(() => service?.close());

beforeEach(() => service.clear());

const worker = (options: Partial<OutboxWorkerOptions> = {}) => outbox.workers.start(options);

function cli(argv: string[], env: Record<string, string> = { REDIS_URL: outbox.redis.url }) {
  return runCliCapturing(argv, { env });
}

const message = (to: string) => ({ from: 'shop@example.test', to, subject: 'Order', text: 'Thanks' });

describe('a permanent failure', () => {
  it('fails the job after one attempt, keeps the error on it, drops its content, and queue status shows it', async () => {
    const info = await outbox.transporter.sendMail(message('ann@'));
    const w = await worker();
    const failed = new Promise<[unknown, EmlApiError]>((resolve) =>
      w.once('failed', (job, err) => resolve([job, err])),
    );
    const [, err] = await failed;
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'EAPI', responseCode: 400, apiCode: 'invalid_address', permanent: true });

    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(await job!.getState()).toBe('failed');
    expect(job!.attemptsMade).toBe(1);
    expect((job!.data as OutboxJobData).lastError).toMatchObject({
      code: 'EAPI',
      responseCode: 400,
      apiCode: 'invalid_address',
      permanent: true,
      attempt: 1,
      message: expect.stringContaining('invalid address'),
    });
    expect(job!.failedReason).toContain('400 invalid_address');
    // The service refused these very bytes: they can never be sent, so they leave Redis now (the job stays 7 days).
    expect(job!.failedReason).toContain('not retried: the service refused this request');
    expect(job!.failedReason).toContain('its content was removed from Redis');
    expect(job!.data.contentRemoved).toBe(true);
    expect(await hasStoredContent(outbox.redis.client, job!.data)).toBe(false);

    const status = await cli(['queue', 'status']);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/^Queue "eml-api": waiting 0, .*failed 1, completed 0$/m);
    expect(status.stdout).toContain(`  ${info.queueId}  `);
    expect(status.stdout).toContain('eml to ann@  attempts 1');
    expect(status.stdout).toMatch(/EAPI 400 invalid_address: POST \/v1\/send\/eml failed/);
    const json = JSON.parse((await cli(['queue', 'status', '--json'])).stdout) as { failed: { queueId: string }[] };
    expect(json.failed.map((f) => f.queueId)).toEqual([info.queueId]);
    expect(status.stdout + JSON.stringify(json)).not.toContain(outbox.emu.apiKey);

    // Not put back: there is nothing left to send. Named, it says why and exits 1; in bulk, it is left and said so.
    await w.close();
    expect(await cli(['queue', 'retry', info.queueId])).toMatchObject({
      code: 1,
      stdout: 'Put back 0 failed messages\n',
      stderr: `${info.queueId}: not put back: its content was removed when the service refused it; queue a corrected message with sendMail\n`,
    });
    expect(await cli(['queue', 'retry'])).toMatchObject({ code: 0, stdout: 'Put back 0 failed messages\n' });
    expect(await outbox.transport.queue.getJobCounts('failed')).toEqual({ failed: 1 });
    expect(await cli(['queue', 'retry', 'no-such-job'])).toMatchObject({
      code: 1,
      stderr: 'no-such-job: not a failed job\n',
    });
  });

  it('keeps the content when a fix elsewhere can make the same request succeed (a refused key), so it can be put back', async () => {
    const info = await outbox.transporter.sendMail(message('ann@example.test'));
    const w = await worker({ apiKey: GROUPS_ONLY_KEY });
    const err = await new Promise<EmlApiError>((resolve) => w.once('failed', (_job, e) => resolve(e)));
    expect(err).toMatchObject({ code: 'EAUTH', responseCode: 403, permanent: true });
    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(job!.failedReason).toContain('not retried until it is put back (eml-api queue retry)');
    expect(job!.data.contentRemoved).toBeUndefined();
    expect(await hasStoredContent(outbox.redis.client, job!.data)).toBe(true);
    await w.close();
    // After fixing the key: put back with a fresh schedule, and sent.
    expect(await cli(['queue', 'retry'])).toMatchObject({ code: 0, stdout: 'Put back 1 failed message\n' });
    await worker();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'sent after the key was fixed',
    });
    expect(outbox.emu.mailbox('ann@example.test')).toHaveLength(1);
  });

  it('never lets the service rewrite the terminal: escape sequences in its answers are stripped', async () => {
    service.answer({
      status: 400,
      body: {
        error: { code: 'invalid_eml', message: 'bad\u001b[2J\u001b]0;owned\u0007 message\r\nwith\u009b31m junk' },
      },
    });
    await outbox.transporter.sendMail(message('ann@example.test'));
    const w = await worker({ baseUrl: service.url });
    await new Promise((resolve) => w.once('failed', resolve));
    const { stdout } = await cli(['queue', 'status']);
    expect(stdout).toContain('bad message with junk');
    const controls = [...stdout].filter((ch) => {
      const c = ch.charCodeAt(0);
      return (c < 0x20 && c !== 0x0a) || (c >= 0x7f && c <= 0x9f);
    });
    expect(controls).toEqual([]);
  });

  it('is also what a message out of attempts ends as, after its schedule', async () => {
    const quick = new EmlApiQueueTransport({
      connection: outbox.redis.url,
      retry: { attempts: 3, delay: 50, jitter: 0 },
    });
    await nodemailer.createTransport(quick).sendMail(message('ann@example.test'));
    await quick.close();
    service.answer({ status: 500, body: { error: { code: 'internal_error', message: 'boom' } } });
    const w = await worker({ baseUrl: service.url });
    const events: string[] = [];
    w.on('retrying', () => events.push('retrying'));
    const failed = new Promise<EmlApiError>((resolve) => w.once('failed', (_job, err) => resolve(err)));
    expect(await failed).toMatchObject({ code: 'EAPI', responseCode: 500, permanent: false });
    expect(events).toEqual(['retrying', 'retrying']);
    expect(service.requests).toHaveLength(3);
  });
});

describe('what a failed attempt says', () => {
  it('says it is retried when it is, and that the outbox gave up when it did: never "not retried"', async () => {
    const quick = new EmlApiQueueTransport({
      connection: outbox.redis.url,
      retry: { attempts: 2, delay: 50, jitter: 0 },
    });
    const info = await nodemailer.createTransport(quick).sendMail(message('ann@example.test'));
    await quick.close();
    // Processed, then the connection reset: the outcome of every attempt is unknown to the worker.
    outbox.emu.setFaults({ resetAfterProcessing: 1 });
    const w = await worker();
    const retrying: EmlApiError[] = [];
    w.on('retrying', (_job, err: EmlApiError) => retrying.push(err));
    const failed = await new Promise<EmlApiError>((resolve) => w.once('failed', (_job, err) => resolve(err)));
    outbox.emu.setFaults(undefined);
    expect(retrying).toHaveLength(1);
    expect(retrying[0]).toMatchObject({ code: 'ECONNECTION', mayHaveBeenAccepted: true, permanent: false });
    expect(retrying[0]!.message).toContain('the outbox sends it again with the same Idempotency-Key');
    expect(failed.message).toContain('gave up after 2 attempts');
    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    const { stdout } = await cli(['queue', 'status']);
    for (const text of [
      retrying[0]!.message,
      failed.message,
      job!.failedReason,
      job!.data.lastError!.message,
      stdout,
    ]) {
      expect(text).not.toContain('not retried');
    }
    expect(job!.failedReason).toContain('gave up after 2 attempts');
    expect(stdout).toContain('gave up after 2 attempts');
    // Out of attempts on a passing failure: the content stays, to be put back.
    expect(await hasStoredContent(outbox.redis.client, job!.data)).toBe(true);
    // Delivered by the first attempt; the second was answered from the first (idempotency key).
    expect(outbox.emu.mailbox('ann@example.test')).toHaveLength(1);
  });
});

describe('a sent job run again (Bull Board\'s "Retry" on a completed job)', () => {
  it('completes again with its first result, without posting anything', async () => {
    const info = await outbox.transporter.sendMail(message('ann@example.test'));
    const w = await worker();
    const [, first] = await new Promise<[unknown, OutboxSendResult]>((resolve) =>
      w.once('sent', (job, result) => resolve([job, result])),
    );
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1);
    let job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    // Sent: its content is gone from Redis.
    await eventually(
      async () =>
        !(await hasStoredContent(
          outbox.redis.client,
          (await recordQueue(outbox.transport.queue).getJob(info.queueId))!.data,
        )),
      { what: 'content removed' },
    );
    await job!.retry('completed');
    await eventually(
      async () => {
        const { completed, failed } = await outbox.transport.queue.getJobCounts('completed', 'failed');
        return completed! + failed! === 1;
      },
      { what: 'run again' },
    );
    job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(await job!.getState()).toBe('completed');
    expect(job!.returnvalue).toEqual(first);
    expect(await outbox.transport.queue.getJobCounts('failed')).toEqual({ failed: 0 });
    expect(outbox.emu.mailbox('ann@example.test')).toHaveLength(1);
  });
});

describe('a 429 with Retry-After', () => {
  it('pauses every worker for that long, without using an attempt', async () => {
    service.script([
      { status: 429, headers: { 'retry-after': '2' }, body: { error: { code: 'rate_limited', message: 'slow down' } } },
    ]);
    await Promise.all([worker({ baseUrl: service.url }), worker({ baseUrl: service.url })]);
    const info = await outbox.transporter.sendMail(message('first@example.test'));
    // worker.rateLimit() sets BullMQ's limiter key far above any limit, for the Retry-After.
    await eventually(async () => Number(await outbox.redis.client.get('bull:eml-api:limiter')) > 1e12, {
      what: 'the queue paused',
    });
    const limited = service.requests[0]!.at;
    // Both workers are free and four more messages wait: none may go out during the pause.
    for (let i = 0; i < 4; i++) await outbox.transporter.sendMail(message(`m${i}@example.test`));
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 5, {
      what: 'all sent after the pause',
    });
    const after = service.requests.slice(1).map((r) => r.at - limited);
    expect(after).toHaveLength(5);
    expect(Math.min(...after)).toBeGreaterThanOrEqual(1950);
    expect(Math.min(...after)).toBeLessThan(4000);
    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(job!.attemptsMade).toBe(1); // the 429 did not count
    expect(job!.data.lastError).toMatchObject({ responseCode: 429, apiCode: 'rate_limited' });
    console.log(`429: the next request came ${Math.round(Math.min(...after))} ms after it (Retry-After: 2)`);
  });
});

describe('closing a worker', () => {
  it('close() lets the sends in flight finish; close({ abort: true }) hands them to another worker at once', async () => {
    service.answer('hold');
    for (let i = 0; i < 2; i++) await outbox.transporter.sendMail(message(`g${i}@example.test`));
    const graceful = await worker({ baseUrl: service.url, concurrency: 2 });
    await eventually(() => service.held === 2, { what: 'two sends in flight' });
    let closed = false;
    const closing = graceful.close().then(() => (closed = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(closed).toBe(false);
    service.releaseAll();
    await closing;
    expect(await outbox.transport.queue.getJobCounts('completed', 'active')).toEqual({ completed: 2, active: 0 });

    service.clear();
    service.answer('hold');
    for (let i = 0; i < 2; i++) await outbox.transporter.sendMail(message(`f${i}@example.test`));
    const forced = await worker({ baseUrl: service.url, concurrency: 2 });
    await eventually(() => service.held === 2, { what: 'two sends in flight' });
    const started = Date.now();
    await forced.close({ abort: true });
    expect(Date.now() - started).toBeLessThan(3000);
    // Back in the queue now, not after their locks expire (30 s by default); with the retries, taken before
    // new messages, since their uploads had reached the service (review F6).
    expect(await outbox.transport.queue.getJobCounts('waiting', 'prioritized', 'active', 'failed')).toEqual({
      waiting: 2,
      prioritized: 0,
      active: 0,
      failed: 0,
    });
    service.answer({ status: 202, body: { id: 'ok', messageId: '<x@example.test>', recipients: 1 } });
    await worker({ baseUrl: service.url });
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 4, {
      what: 'the handed-back jobs sent by another worker',
    });
  });
});

describe('the API key', () => {
  it('is never stored in Redis nor shown by the worker or queue status', async () => {
    await outbox.transporter.sendMail(message('ann@example.test'));
    await outbox.transporter.sendMail(message('ann@'));
    const w = await worker();
    await eventually(async () => {
      const counts = await outbox.transport.queue.getJobCounts('completed', 'failed');
      return counts.completed === 1 && counts.failed === 1;
    });
    const everything = await dumpRedis(outbox.redis.client);
    expect(everything).toContain('ann@'); // the dump is real
    expect(everything).not.toContain(outbox.emu.apiKey);
    const status = await readOutboxStatus(outbox.transport.queue);
    expect(JSON.stringify(status)).not.toContain(outbox.emu.apiKey);
    expect((await cli(['queue', 'status'])).stdout).not.toContain(outbox.emu.apiKey);
    expect(inspect(w, { depth: 4 })).not.toContain(outbox.emu.apiKey);
  });
});
