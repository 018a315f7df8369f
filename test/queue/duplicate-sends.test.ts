import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { startReplyLossProxy } from '../helpers/reply-loss-proxy.js';
import { recordQueue } from '../../src/queue/outbox-job.js';
import { ContentStore } from '../../src/queue/content-store.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';

/**
 * `sendMail` again with the `idempotencyKey` of a job that failed. It used
 * to answer `250 ... duplicate` and send nothing, for the 7 days failed jobs
 * are kept. Now it looks at why the job failed: a job the service never
 * accepted is replaced by the new message (it may differ: a corrected
 * address); a job an attempt of which the service may have accepted is put
 * back with its own bytes (the service answers the same key with a new body
 * by 422 idempotency_key_reused, the old one it replays); a job parked for a
 * person is not touched, and sendMail rejects saying why. Two producers
 * racing to replace a job replace it once, and a producer whose reply to its
 * replacement was lost (ioredis re-sends the command) still knows the job is
 * its own. Real redis-server, a TCP proxy that loses a reply, the emulator,
 * workers in this process.
 */

const outbox = useOutbox({ transport: { retry: { attempts: 2, delay: 50, jitter: 0 } }, clean: 'redis' });

const order = (to: string) => ({
  from: 'shop@example.test',
  to,
  subject: 'Your order',
  text: 'Thanks',
  idempotencyKey: 'order-1042',
});

/** Queues `order(to)`, runs a worker until the job has failed, and closes the worker. */
async function failedJob(to: string): Promise<OutboxQueuedMessageInfo> {
  const info = await outbox.transporter.sendMail(order(to));
  await outbox.workers.start();
  await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1, { what: 'failed' });
  await outbox.workers.closeAll();
  return info;
}

/** The content stored: under keys, or in jobs (small content), by key. */
async function contentKeys(): Promise<string[]> {
  const jobs = await recordQueue(outbox.transport.queue).getJobs([
    'waiting',
    'prioritized',
    'delayed',
    'active',
    'failed',
    'completed',
  ]);
  const inJobs = jobs.filter((job) => job.data.inline !== undefined).map((job) => job.data.contentKey);
  return [...(await outbox.redis.client.keys('bull:eml-api:content:*')), ...inJobs].sort();
}

describe('sendMail with the idempotency key of a failed job', () => {
  it('replaces a job the service refused with the new message, which is sent', async () => {
    const first = await failedJob('ann@'); // 400 invalid_address: the service accepted nothing
    const again = await outbox.transporter.sendMail(order('ann@example.test'));
    expect(again).toMatchObject({ duplicate: false, requeued: 'replaced', queueId: first.queueId });
    expect(again.messageId).not.toBe(first.messageId);
    expect(await contentKeys()).toHaveLength(1);
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'the replacement sent',
    });
    expect(outbox.emu.mailbox('ann@example.test').map((m) => m.messageId)).toEqual([again.messageId]);
  });

  it('puts back, with its own bytes, a job an attempt of which the service may have accepted: delivered once', async () => {
    // Processed, then the connection reset, on every attempt: delivered once, the worker never knows.
    outbox.emu.setFaults({ resetAfterProcessing: 1 });
    const first = await failedJob('bob@example.test');
    outbox.emu.setFaults(undefined);
    expect(outbox.emu.mailbox('bob@example.test')).toHaveLength(1);
    // Built again, the message has other bytes (Date, Message-ID): under this key the service would refuse them.
    const again = await outbox.transporter.sendMail(order('bob@example.test'));
    expect(again).toMatchObject({ duplicate: true, requeued: 'retried', messageId: first.messageId });
    expect(await contentKeys()).toHaveLength(1);
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'sent again, answered from the first',
    });
    expect(outbox.emu.mailbox('bob@example.test')).toHaveLength(1);
  });

  it('rejects, saying why, for a job parked for a person; nothing is stored', async () => {
    outbox.emu.setFaults({ resetAfterProcessing: 1 });
    const info = await outbox.transporter.sendMail(order('cy@example.test'));
    // A service that keeps keys 0 ms: the first unknown outcome parks the job.
    await outbox.workers.start({ idempotencyWindow: 0 });
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1, {
      what: 'parked',
    });
    await outbox.workers.closeAll();
    const before = await contentKeys();
    const err = (await outbox.transporter.sendMail(order('cy@example.test')).catch((e: unknown) => e)) as EmlApiError;
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({
      code: 'EMESSAGE',
      permanent: true,
      idempotencyKey: 'order-1042',
      queueId: info.queueId,
    });
    expect(err.message).toContain('parked');
    expect(err.message).toContain('may have been delivered');
    expect(err.message).toContain(`eml-api queue retry ${info.queueId}`);
    expect(await contentKeys()).toEqual(before);
    expect(await outbox.transport.queue.getJobCounts('failed')).toEqual({ failed: 1 });
  });

  it('is replaced once when producers race to replace it', async () => {
    // Four producers at once, three rounds: one replaces the job, the others find it replaced (also those
    // that look at it between the winner's replacing and its putting the job back).
    const others = Array.from({ length: 3 }, () => new EmlApiQueueTransport({ connection: outbox.redis.url }));
    try {
      for (let round = 0; round < 3; round++) {
        outbox.emu.reset();
        await outbox.transport.queue.obliterate({ force: true });
        await outbox.redis.client.flushall();
        await failedJob(`dee${round}@`);
        const racers = [outbox.transporter, ...others.map((o) => nodemailer.createTransport(o))];
        const all = await Promise.all(racers.map((t) => t.sendMail(order(`dee${round}@example.test`))));
        const outcomes = all.map((info) => info.requeued ?? (info.duplicate ? 'duplicate' : 'new')).sort();
        expect(outcomes).toEqual(['duplicate', 'duplicate', 'duplicate', 'replaced']);
        const winner = all.find((info) => info.requeued === 'replaced')!;
        for (const info of all.filter((i) => i.duplicate)) expect(info.messageId).toBe(winner.messageId);
        expect(await contentKeys()).toHaveLength(1);
        await outbox.workers.start();
        await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
          what: 'sent',
        });
        await outbox.workers.closeAll();
        expect(outbox.emu.mailbox(`dee${round}@example.test`).map((m) => m.messageId)).toEqual([winner.messageId]);
      }
    } finally {
      await Promise.all(others.map((o) => o.close()));
    }
  });

  it('replaces it once when the reply to the replacement is lost and the command re-sent: the new message is sent', async () => {
    // Content stored beside the job (over 64 KiB), which a producer removes when it takes its send for a duplicate.
    const big = (text: string) => ({ ...order('eve@example.test'), text: `${text} ${'y'.repeat(100_000)}` });
    const first = await outbox.transporter.sendMail({ ...big('first'), to: 'eve@' }); // 400: nothing accepted
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1, {
      what: 'failed',
    });
    await outbox.workers.closeAll();
    const proxy = await startReplyLossProxy(outbox.redis.port);
    const producer = new EmlApiQueueTransport({ connection: proxy.url });
    try {
      await producer.verify();
      // The compare-and-set that puts the new message in the job (its data carries putBackFrom) runs, and its
      // reply is lost: ioredis sends it again after reconnecting, and the second run finds the data changed.
      proxy.arm(/putBackFrom/);
      const again = (await nodemailer
        .createTransport(producer)
        .sendMail(big('corrected'))) as unknown as OutboxQueuedMessageInfo;
      expect(proxy.fired).toBe(1);
      expect(again).toMatchObject({ duplicate: false, requeued: 'replaced', queueId: first.queueId });
      expect(await contentKeys()).toHaveLength(1);
      await outbox.workers.start();
      await eventually(
        async () => (await recordQueue(outbox.transport.queue).getJob(first.queueId))?.finishedOn !== undefined,
        {
          what: 'the replacement settled',
        },
      );
      const job = await recordQueue(outbox.transport.queue).getJob(first.queueId);
      expect(job!.data.lastError?.message).toBeUndefined();
      expect(await job!.getState()).toBe('completed');
      expect(outbox.emu.mailbox('eve@example.test').map((m) => m.messageId)).toEqual([again.messageId]);
    } finally {
      await producer.close();
      await proxy.close();
    }
  });
});

describe('a worker whose completion of a job loses its reply', () => {
  it('takes the completion ioredis sends again for its own: no "Missing lock" error, sent once, counted once', async () => {
    const proxy = await startReplyLossProxy(outbox.redis.port);
    try {
      const info = await outbox.transporter.sendMail({ ...order('finn@example.test'), idempotencyKey: 'order-2001' });
      // The completion carries the record of the send (its data gains "sent"): it runs, and its reply is lost.
      proxy.arm(/"sent":\{/);
      const worker = await outbox.workers.start({ connection: proxy.url });
      const errors: string[] = [];
      const sent: string[] = [];
      worker.on('error', (err: Error) => errors.push(err.message));
      worker.on('sent', (job: { id?: string }) => sent.push(String(job.id)));
      await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
        what: 'the job completed',
      });
      await eventually(() => proxy.fired === 1, { what: 'the reply lost' });
      await eventually(() => sent.length + errors.length > 0, { what: 'the resent completion answered' });
      await outbox.workers.closeAll();
      expect(errors).toEqual([]);
      expect(sent).toEqual([info.queueId]);
      expect(outbox.emu.mailbox('finn@example.test')).toHaveLength(1);
      const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
      expect(await job!.getState()).toBe('completed');
      expect(job!.data.sent).toBeDefined();
    } finally {
      await proxy.close();
    }
  });

  it('gives the worker again the job that completion took next: sent on its first attempt, no stall', async () => {
    const proxy = await startReplyLossProxy(outbox.redis.port);
    try {
      await outbox.transporter.sendMail({ ...order('gus@example.test'), idempotencyKey: 'order-2002' });
      const next = await outbox.transporter.sendMail({ ...order('hal@example.test'), idempotencyKey: 'order-2003' });
      proxy.arm(/"sent":\{/);
      // One at a time: the first job's completion takes the second in the answer that is lost. Locks that expire
      // in 2 s show a job left behind as a stall within the test.
      const worker = await outbox.workers.start({
        connection: proxy.url,
        concurrency: 1,
        workerOptions: { lockDuration: 2000, stalledInterval: 500 },
      });
      const errors: string[] = [];
      worker.on('error', (err: Error) => errors.push(err.message));
      await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 2, {
        what: 'both jobs completed',
      });
      await outbox.workers.closeAll();
      expect(proxy.fired).toBe(1);
      expect(errors).toEqual([]);
      const job = await recordQueue(outbox.transport.queue).getJob(next.queueId);
      expect(job!.attemptsMade).toBe(1);
      expect(job!.data.stalls).toBeUndefined();
      expect(outbox.emu.mailbox('hal@example.test')).toHaveLength(1);
    } finally {
      await proxy.close();
    }
  });
});

describe('sendMail whose add loses its reply', () => {
  it('takes the add ioredis sends again for its own, and keeps the content its job points at: delivered once', async () => {
    const proxy = await startReplyLossProxy(outbox.redis.port);
    const producer = new EmlApiQueueTransport({ connection: proxy.url });
    try {
      await producer.verify();
      // Content stored beside the job (over 64 KiB): the add that ran twice leaves one copy, the one its job points at.
      proxy.arm(/order-lost/);
      const info = (await nodemailer.createTransport(producer).sendMail({
        ...order('ann@example.test'),
        idempotencyKey: 'order-lost',
        text: `Thanks ${'z'.repeat(100_000)}`,
      })) as unknown as OutboxQueuedMessageInfo;
      expect(proxy.fired).toBe(1);
      expect(info).toMatchObject({ duplicate: false });
      expect(await contentKeys()).toHaveLength(1);
      await outbox.workers.start();
      await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
        what: 'sent',
      });
      expect(outbox.emu.mailbox('ann@example.test').map((m) => m.messageId)).toEqual([info.messageId]);
    } finally {
      await producer.close();
      await proxy.close();
    }
  });
});

describe("a producer's clean-up of content it stored", () => {
  it('never removes the content a job points at: it is checked in the same step', async () => {
    const info = await outbox.transporter.sendMail({ ...order('ann@example.test'), text: `x ${'w'.repeat(100_000)}` });
    const [key] = await contentKeys();
    const store = new ContentStore(outbox.redis.client, resolveQueueLocation(undefined, undefined));
    // As after an outcome misjudged (a cluster's re-routed add that ran after all).
    expect(await store.release(info.queueId, key!)).toBe('kept');
    expect(await store.withdraw(info.queueId, key!, true)).toBe('queued');
    expect(await contentKeys()).toEqual([key]);
    // Content no job points at goes.
    const stray = store.newKey(info.queueId);
    await outbox.redis.client.set(stray, 'x');
    expect(await store.release(info.queueId, stray)).toBe('removed');
    expect(await contentKeys()).toEqual([key]);
  });
});
