import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxWorkerOptions } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually, startWorkerProcess, type WorkerProcess, hasStoredContent } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * A job held by workers that die (OOM-killed pods, a crash loop): worker
 * processes killed with SIGKILL while their send is in flight. BullMQ's own
 * stall limit (maxStalledCount, 1) failed a job held by two such workers,
 * with no delivery, no error on the job, outside its retry schedule. A stall
 * is a failed attempt whose outcome is unknown: retried with backoff, under
 * the same idempotency key; and a job that stalls again and again (a message
 * that crashes every worker) is parked for a person after `maxStalls`.
 * Real redis-server, real worker processes, the emulator behind a proxy that
 * holds the doomed workers' requests (so they die with the send in flight and
 * nothing delivered).
 */

let redis: RedisServer;
let emu: Emulator;
let holding: SlowAnswerProxy;
let transport: EmlApiQueueTransport;
const processes: WorkerProcess[] = [];

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  holding = await startSlowAnswerProxy(emu.url, 0, { requestDelayMs: 600_000 });
  transport = new EmlApiQueueTransport({ connection: redis.url, retry: { delay: 100, maxDelay: 400, jitter: 0 } });
});

afterAll(async () => {
  await Promise.all(processes.map((p) => p.kill()));
  await transport?.close();
  await holding?.close();
  await emu?.close();
  await redis?.stop();
});

afterEach(async () => {
  await Promise.all(processes.splice(0).map((p) => p.kill()));
  emu.reset();
  await transport.queue.obliterate({ force: true });
});

/** Short locks and stall checks, so a killed worker's job comes back within about a second. */
const options = (baseUrl: string, more: Partial<OutboxWorkerOptions> = {}): OutboxWorkerOptions => ({
  connection: redis.url,
  apiKey: emu.apiKey,
  baseUrl,
  cleanupInterval: 0,
  workerOptions: { lockDuration: 800, stalledInterval: 300 },
  ...more,
});

/** Starts a worker process that takes the job, and kills it with SIGKILL while its request is held. */
async function crashWithSendInFlight(more: Partial<OutboxWorkerOptions> = {}): Promise<void> {
  const before = holding.heldRequests;
  const doomed = await startWorkerProcess(options(holding.url, more));
  processes.push(doomed);
  await eventually(() => holding.heldRequests > before, { what: 'the doomed worker sending' });
  await doomed.kill();
}

describe('a job whose workers die while sending it', () => {
  it('is retried with backoff after each crash, and sent once by the next worker: two crashes do not park it', async () => {
    const info = await nodemailer
      .createTransport(transport)
      .sendMail({ from: 'shop@example.test', to: 'ann@example.test', subject: 'Order', text: 'Thanks' });
    await crashWithSendInFlight();
    await crashWithSendInFlight();
    const survivor = await startWorkerProcess(options(emu.url));
    processes.push(survivor);
    await eventually(
      async () => {
        const { completed, failed } = await transport.queue.getJobCounts('completed', 'failed');
        return completed! + failed! === 1;
      },
      { what: 'the job sent or failed' },
    );
    const job = await recordQueue(transport.queue).getJob(info.queueId);
    expect(await job!.getState()).toBe('completed');
    expect(emu.mailbox('ann@example.test')).toHaveLength(1);
    // Each crash was a failed attempt of its schedule, recorded on the job.
    expect(job!.data.stalls).toBe(2);
    expect(job!.attemptsMade).toBe(3);
    expect(job!.data.lastError).toMatchObject({ code: 'ECONNECTION', attempt: 2, permanent: false });
    expect(job!.data.lastError!.message).toContain('The worker sending this message stopped before it finished');
    expect(job!.data.lastError!.message).toContain('the outbox sends it again with the same Idempotency-Key');
    // Its worker left no word of how far it got: the request may never have gone out.
    expect(job!.data.lastError!.message).toContain('its request may have been sent');
    expect(job!.data.lastError!.message).not.toContain('the request was sent');
    // The first crashed attempt may have been accepted: from the earliest it can have started (when Redis
    // took the job, stamped with its add), the service's idempotency window runs, and the job is sent
    // again only within it.
    const queuedAt = Number(await redis.client.hget(`bull:eml-api:${info.queueId}`, 'emlApiQueuedAt'));
    expect(job!.data.possiblyAcceptedAt).toBe(queuedAt);
    expect(job!.data.resendUntil).toBe(queuedAt + 23 * 3_600_000);
  }, 60_000);

  it('is parked for a person once it has stalled more than maxStalls times sent alone, with the reason on it', async () => {
    const info = await nodemailer
      .createTransport(transport)
      .sendMail({ from: 'shop@example.test', to: 'bob@example.test', subject: 'Order', text: 'Thanks' });
    // The first stall may be another job's doing (a crash takes down every send of its worker): from then on
    // the job is sent alone, and only those stalls count toward maxStalls (review F8).
    await crashWithSendInFlight({ maxStalls: 1 });
    await crashWithSendInFlight({ maxStalls: 1 });
    await crashWithSendInFlight({ maxStalls: 1 });
    const next = await startWorkerProcess(options(emu.url, { maxStalls: 1 }));
    processes.push(next);
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1, {
      what: 'the job parked',
    });
    const job = await recordQueue(transport.queue).getJob(info.queueId);
    expect(job!.data.lastError).toMatchObject({ parked: 'stalls', permanent: true });
    expect(job!.data).toMatchObject({ stalls: 3, aloneStalls: 2 });
    expect(job!.failedReason).toContain('Parked after 3 stalls, 2 of them while it was sent alone');
    expect(job!.failedReason).toContain(`eml-api queue retry ${info.queueId}`);
    // Nothing was sent by the worker that parked it; its content stays, to be put back.
    expect(emu.messages()).toHaveLength(0);
    expect(await hasStoredContent(redis.client, job!.data)).toBe(true);
    const { stdout } = await runCliCapturing(['queue', 'status'], { env: { REDIS_URL: redis.url } });
    expect(stdout).toContain('Parked after 3 stalls');
    // Put back by a person, it is sent (its stall count starts again).
    await runCliCapturing(['queue', 'retry', info.queueId], { env: { REDIS_URL: redis.url } });
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'sent after it was put back',
    });
    expect(emu.mailbox('bob@example.test')).toHaveLength(1);
  }, 60_000);

  it('says the message may already have been sent when its content is gone after a stall', async () => {
    // Content beside the job (over 64 KiB), gone after the stall: lost in a failover, removed by hand.
    const info = await nodemailer.createTransport(transport).sendMail({
      from: 'shop@example.test',
      to: 'cy@example.test',
      subject: 'Order',
      text: 'Thanks',
      attachments: [{ filename: 'invoice.bin', content: Buffer.alloc(80_000, 1) }],
    });
    await crashWithSendInFlight();
    const { data } = (await recordQueue(transport.queue).getJob(info.queueId))!;
    await redis.client.del(data.contentKey);
    const next = await startWorkerProcess(options(emu.url));
    processes.push(next);
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1, {
      what: 'the job failed',
    });
    const job = await recordQueue(transport.queue).getJob(info.queueId);
    expect(job!.data.lastError).toMatchObject({ code: 'EMESSAGE', permanent: true });
    for (const text of [job!.data.lastError!.message, job!.failedReason]) {
      expect(text).toContain('may already have delivered the message');
      expect(text).toContain('Check whether it arrived');
      expect(text).not.toContain('nothing to send');
    }
    expect(emu.messages()).toHaveLength(0);
  }, 60_000);
});
