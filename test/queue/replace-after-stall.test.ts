import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { eventually, startWorkerProcess, type WorkerProcess } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * A failed job replaced by a new message under its idempotency key keeps its
 * BullMQ job, stall counter (`stc`) included, but took the new message's data,
 * without the `stallsSeen` that said those stalls were counted: the new
 * message's first run found a "stall" it never had, counted it as an attempt
 * whose outcome is unknown, from the old job's creation time, and could park
 * a brand-new message past its window (review F13 a, found by reading).
 * Real redis-server, a real worker process killed mid-send, the fake service
 * (its 400) and the emulator.
 */

let refusing: FakeService;
let holding: SlowAnswerProxy;
const processes: WorkerProcess[] = [];
const outbox = useOutbox({
  redis: { appendonly: true },
  transport: { retry: { delay: 100, maxDelay: 100, jitter: 0 } },
  clean: 'nothing',
});

beforeAll(async () => {
  refusing = await startFakeService();
  refusing.answer({ status: 400, body: { error: { code: 'invalid_eml', message: 'no' } } });
  holding = await startSlowAnswerProxy(outbox.emu.url, 0, { requestDelayMs: 600_000 });
});

afterAll(async () => {
  await Promise.all(processes.map((p) => p.kill()));
  await holding?.close();
  await refusing?.close();
});

const tuning = { workerOptions: { lockDuration: 800, stalledInterval: 300 } };

describe('a failed job that stalled once, replaced under its key', () => {
  it('runs the new message as new: no stall it never had, sent on its first run', async () => {
    const mailer = nodemailer.createTransport(outbox.transport);
    const mail = (text: string) => ({
      from: 'a@example.test',
      to: 'ann@example.test',
      subject: 'Order',
      text,
      idempotencyKey: 'rep-1',
    });
    const first = (await mailer.sendMail(mail('first'))) as unknown as OutboxQueuedMessageInfo;
    // A worker dies with the send in flight: the job stalls (BullMQ's stc becomes 1).
    const doomed = await startWorkerProcess({
      connection: outbox.redis.url,
      apiKey: outbox.emu.apiKey,
      baseUrl: holding.url,
      cleanupInterval: 0,
      ...tuning,
    });
    processes.push(doomed);
    await eventually(() => holding.heldRequests > 0, { what: 'the doomed worker sending' });
    await doomed.kill();
    // The next worker counts the stall, then the service refuses the message: failed, its content removed.
    await outbox.workers.start({ baseUrl: refusing.url, ...tuning });
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1, {
      what: 'refused',
    });
    await outbox.workers.closeAll();
    const failed = await recordQueue(outbox.transport.queue).getJob(first.queueId);
    expect(failed!.data).toMatchObject({ stalls: 1, contentRemoved: true });
    expect(failed!.stalledCounter).toBe(1);

    // Corrected and queued again under the same key: the failed job is replaced by the new message.
    const again = (await mailer.sendMail(mail('corrected'))) as unknown as OutboxQueuedMessageInfo;
    expect(again.requeued).toBe('replaced');
    // A worker whose service ignores idempotency keys (idempotencyWindow 0) parks any send that may have
    // been accepted: a phantom stall of the new message would park it.
    await outbox.workers.start({ idempotencyWindow: 0, ...tuning });
    await eventually(
      async () => (await recordQueue(outbox.transport.queue).getJob(again.queueId))!.finishedOn !== undefined,
      {
        what: 'the new message settled',
      },
    );
    const job = await recordQueue(outbox.transport.queue).getJob(again.queueId);
    expect(job!.data.lastError?.parked).toBeUndefined();
    expect(await job!.getState()).toBe('completed');
    expect(job!.data.stalls).toBeUndefined();
    expect(job!.data.possiblyAcceptedAt).toBeUndefined();
    expect(outbox.emu.mailbox('ann@example.test').map((m) => m.text?.trim())).toEqual(['corrected']);
  });
});
