import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo, type OutboxJob } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { recordQueue } from '../../src/queue/outbox-job.js';
// The bounds on waiting for a Redis that does not answer, shortened (the forced close waits them out).
import { useShortWaits } from '../helpers/short-waits.js';

/**
 * `close({ abort: true })` (the CLI's second SIGTERM) aborts the sends in
 * flight and hands their jobs back. A send whose upload had reached the
 * service (delivered, its answer not heard yet) was handed back without
 * `possiblyAcceptedAt`, at the priority of new messages (behind the whole
 * backlog): the outbox forgot that it may have been delivered, nothing
 * parked it once the service's idempotency window passed, and a later retry
 * delivered it twice (review F6). The hand-back now records when the attempt
 * may have been accepted (Redis's clock) and puts the job back with the
 * retries, which go first. Real redis-server, workers in this process, a proxy
 * that holds the service's answers, the emulator.
 */

let redis: RedisServer;
let emu: Emulator;
let answerHeld: SlowAnswerProxy;
let transport: EmlApiQueueTransport;
useShortWaits();
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  answerHeld = await startSlowAnswerProxy(emu.url, 600_000);
  transport = new EmlApiQueueTransport({ connection: redis.url });
});

afterAll(async () => {
  await workers.closeAll();
  await transport?.close();
  await answerHeld?.close();
  await emu?.close();
  await redis?.stop();
});

const mail = (subject: string, idempotencyKey: string) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject,
  text: subject,
  idempotencyKey,
});

describe('a forced close with a send the service may have accepted', () => {
  it('hands the job back marked possibly accepted, ahead of the backlog: parked, not sent again, once the window has passed', async () => {
    const mailer = nodemailer.createTransport(transport);
    const redisNow = async () => Number((await redis.client.time())[0]) * 1000;
    const queuedAt = await redisNow();
    const reset = (await mailer.sendMail(mail('Password reset', 'reset-ann-1'))) as unknown as OutboxQueuedMessageInfo;
    // Workers that know the service keeps keys 0 ms: once a send may have been accepted, it is never sent again.
    const worker = await workers.start({ baseUrl: answerHeld.url, concurrency: 1, idempotencyWindow: 0 });
    await eventually(() => emu.messages().length === 1, { what: 'the reset delivered, its answer held' });
    // New mail queued meanwhile: the backlog.
    for (let i = 0; i < 3; i++) await mailer.sendMail(mail(`News ${i}`, `news-${i}`));
    const closedAt = (await redisNow()) + 1000;
    await worker.close({ abort: true });
    expect(worker.handedBack).toBe(1);

    const job = await recordQueue(transport.queue).getJob(reset.queueId);
    // With the retries (BullMQ's wait list, priority 0), which workers take before every new message.
    expect(await job!.getState()).toBe('waiting');
    // When the attempt started, by Redis's clock: after the message was queued, before the close.
    expect(job!.data.possiblyAcceptedAt).toBeGreaterThanOrEqual(queuedAt);
    expect(job!.data.possiblyAcceptedAt).toBeLessThanOrEqual(closedAt);
    expect(job!.data.resendUntil).toBe(job!.data.possiblyAcceptedAt);
    expect((await transport.queue.getJobCounts('prioritized')).prioritized).toBe(3);

    // The service's idempotency window has passed: the job is parked for a person, first, and the backlog sent.
    const next = await workers.start({ concurrency: 1, idempotencyWindow: 0 });
    const order: string[] = [];
    next.on('failed', (failed: OutboxJob) => order.push(String(failed.id)));
    next.on('sent', (sent: OutboxJob) => order.push(String(sent.id)));
    await eventually(() => order.length === 4, { what: 'every job settled' });
    expect(order[0]).toBe(reset.queueId);
    const parked = await recordQueue(transport.queue).getJob(reset.queueId);
    expect(parked!.data.lastError?.parked).toBe('idempotency-window');
    expect(emu.messages().filter((m) => m.subject === 'Password reset')).toHaveLength(1);
  });
});

describe('a forced close while Redis does not answer', () => {
  it('counts the send it ended as handed back, though Redis did not answer to record it', async () => {
    await workers.closeAll();
    const mailer = nodemailer.createTransport(transport);
    await mailer.sendMail(mail('Invoice', 'invoice-ann-1'));
    const worker = await workers.start({ baseUrl: answerHeld.url, concurrency: 1 });
    worker.on('error', () => undefined);
    await eventually(() => emu.messages().some((m) => m.subject === 'Invoice'), {
      what: 'the invoice delivered, its answer held',
    });
    redis.pause();
    try {
      await worker.close({ abort: true });
    } finally {
      redis.resume();
    }
    // `eml-api worker` exits 4 on it: the operator learns that a send was cut short.
    expect(worker.handedBack).toBe(1);
  }, 30_000);
});
