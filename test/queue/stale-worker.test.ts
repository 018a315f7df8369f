import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * A worker that lost its job's lock (a long GC pause, a frozen VM, a
 * partition from Redis: another worker took the job after it stalled) still
 * wrote to the job once its send returned (review F7): it recorded `sent` and
 * deleted the content under the new owner, whose failed attempt then wrote
 * its own snapshot of the data over `sent`, and whose retry found no content:
 * delivered, the job failed, no record of the send. Every write a worker makes
 * to a job checks, in the same step, that it still holds the job's lock.
 * Real redis-server, workers in this process (the first renews no lock, as a
 * frozen one), proxies that hold an answer or a request, the emulator.
 */

let answerHeld: SlowAnswerProxy;
let requestHeld: SlowAnswerProxy;
let refusing: FakeService;
const outbox = useOutbox({ transport: { retry: { delay: 100, maxDelay: 100, jitter: 0 } }, clean: 'nothing' });

beforeAll(async () => {
  answerHeld = await startSlowAnswerProxy(outbox.emu.url, 600_000);
  requestHeld = await startSlowAnswerProxy(outbox.emu.url, 0, { requestDelayMs: 600_000 });
  refusing = await startFakeService();
});

afterAll(async () => {
  await answerHeld?.close();
  await requestHeld?.close();
  await refusing?.close();
});

/** Short locks and stall checks: a job whose lock is not renewed goes to another worker within about a second. */
const tuning = { lockDuration: 800, stalledInterval: 300 };

describe('a worker that lost its job to another worker', () => {
  it('writes nothing to the job once its send returns: the new owner sends it, answered by the first upload', async () => {
    const info = (await nodemailer.createTransport(outbox.transport).sendMail({
      from: 'shop@example.test',
      to: 'ann@example.test',
      subject: 'Big report',
      // Stored beside the job (over 64 KiB): the record of a send deletes it.
      text: `Report ${'z'.repeat(200_000)}`,
      idempotencyKey: 'report-7',
    })) as unknown as OutboxQueuedMessageInfo;
    // The first worker sends; the service delivers; its answer is held, and the worker renews no lock (frozen).
    const stale = await outbox.workers.start({
      baseUrl: answerHeld.url,
      concurrency: 1,
      workerOptions: { ...tuning, lockRenewTime: 3_600_000 },
    });
    const staleErrors: Error[] = [];
    stale.on('error', (err: Error) => staleErrors.push(err));
    await eventually(() => outbox.emu.messages().length === 1, { what: 'the first upload delivered' });
    // Its lock expires: the job stalls and another worker takes it, its request held before the service sees it.
    await outbox.workers.start({ baseUrl: requestHeld.url, workerOptions: tuning });
    await eventually(() => requestHeld.heldRequests > 0, { what: 'the new owner sending' });
    // The first worker hears its answer now, and records the send (BullMQ refuses its completion: an error).
    answerHeld.releaseAnswers();
    await eventually(() => staleErrors.length > 0 && stale.activeJobs === 0, { what: 'the stale worker done' });
    expect(
      await outbox.redis.client.exists(
        (await recordQueue(outbox.transport.queue).getJob(info.queueId))!.data.contentKey,
      ),
    ).toBe(1);
    // The new owner's attempt fails (its connection cut after sending: an unknown outcome), retried.
    await requestHeld.close();
    // (Attempt 1 was the stall.)
    await eventually(
      async () => ((await recordQueue(outbox.transport.queue).getJob(info.queueId))!.data.lastError?.attempt ?? 0) >= 2,
      {
        what: "the new owner's failure recorded",
      },
    );
    await outbox.workers.closeAll();
    await outbox.workers.start({ workerOptions: tuning });
    await eventually(
      async () => (await recordQueue(outbox.transport.queue).getJob(info.queueId))!.finishedOn !== undefined,
      {
        what: 'the job settled',
      },
    );
    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(await job!.getState()).toBe('completed');
    expect(job!.data.sent?.id).toBeDefined();
    expect(outbox.emu.mailbox('ann@example.test').map((m) => m.messageId)).toEqual([info.messageId]);
  });

  it("records nothing of a refusal it hears after losing the job: the new owner's content stays, and it is delivered", async () => {
    const info = (await nodemailer.createTransport(outbox.transport).sendMail({
      from: 'shop@example.test',
      to: 'bob@example.test',
      subject: 'Big invoice',
      // Stored beside the job (over 64 KiB): a refusal's record deletes it.
      text: `Invoice ${'z'.repeat(200_000)}`,
      idempotencyKey: 'invoice-9',
    })) as unknown as OutboxQueuedMessageInfo;
    const contentKey = (await recordQueue(outbox.transport.queue).getJob(info.queueId))!.data.contentKey;
    // The first worker's service refuses the message (400), its answer held; the worker renews no lock (frozen).
    refusing.script(['hold']);
    const stale = await outbox.workers.start({
      baseUrl: refusing.url,
      concurrency: 1,
      workerOptions: { ...tuning, lockRenewTime: 3_600_000 },
    });
    stale.on('error', () => undefined);
    await eventually(() => refusing.requests.length === 1, { what: 'the first worker sending' });
    // Its lock expires: another worker takes the job, its request held before the service sees it (a proxy of this
    // test's own: the one the test above closed would refuse the request, and count the one it held).
    const held = await startSlowAnswerProxy(outbox.emu.url, 0, { requestDelayMs: 600_000 });
    await outbox.workers.start({ baseUrl: held.url, workerOptions: tuning });
    await eventually(() => held.heldRequests > 0, { what: 'the new owner sending' });
    // The refusal reaches the first worker now: the job is no longer its own to fail, nor its content to remove.
    refusing.releaseAll({ status: 400, body: { error: { code: 'invalid_message', message: 'refused' } } });
    await eventually(() => stale.activeJobs === 0, { what: 'the stale worker done' });
    expect(await outbox.redis.client.exists(contentKey)).toBe(1);
    expect((await recordQueue(outbox.transport.queue).getJob(info.queueId))!.data.contentRemoved).toBeUndefined();
    // The new owner's attempt fails (its connection cut: an unknown outcome), retried, and then sent.
    await held.close();
    await eventually(
      async () => ((await recordQueue(outbox.transport.queue).getJob(info.queueId))!.data.lastError?.attempt ?? 0) >= 2,
      { what: "the new owner's failure recorded" },
    );
    await outbox.workers.closeAll();
    await outbox.workers.start({ workerOptions: tuning });
    await eventually(
      async () => (await recordQueue(outbox.transport.queue).getJob(info.queueId))!.finishedOn !== undefined,
      { what: 'the job settled' },
    );
    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(await job!.getState()).toBe('completed');
    expect(outbox.emu.mailbox('bob@example.test').map((m) => m.messageId)).toEqual([info.messageId]);
  });
});
