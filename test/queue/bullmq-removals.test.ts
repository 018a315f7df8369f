import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { EmlApiQueueTransport, purgeOutbox, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { eventually, pastContentDeadlines } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * BullMQ's own removals on outbox queues (`job.remove()`, `Queue.clean()`,
 * `Queue.drain()`, `Queue.obliterate()`, what dashboards call): BullMQ knows
 * nothing of the content the outbox keeps beside each job, so it stays; the
 * workers' next sweep frees it once its producer's store deadline
 * (`timeouts.store`) has passed, and keeps the content of every job still to
 * be sent, which the workers then deliver. Real redis-server, the emulator,
 * workers in this process.
 */

const STORE_MS = 500;
const outbox = useOutbox({ transport: { timeouts: { store: STORE_MS } } });
const location = resolveQueueLocation(undefined, undefined);

/** A message whose content is stored beside its job (over the 64 KiB kept in the job). */
const message = (key: string) => ({
  from: 'shop@example.test',
  to: `${key}@example.test`,
  subject: key,
  text: key,
  attachments: [{ filename: 'pad.bin', content: Buffer.alloc(80_000, 7) }],
  idempotencyKey: key,
});

/** Queues one message per key through `transport` (the fixture's producer by default). */
async function queue(keys: string[], transport: EmlApiQueueTransport = outbox.transport): Promise<void> {
  const mailer = nodemailer.createTransport(transport);
  for (const key of keys) {
    const info = (await mailer.sendMail(message(key))) as unknown as OutboxQueuedMessageInfo;
    expect(info.duplicate).toBe(false);
  }
}

/** Queues messages whose jobs wait an hour (delayed). */
async function queueDelayed(keys: string[]): Promise<void> {
  const later = new EmlApiQueueTransport({
    connection: outbox.connection,
    timeouts: { store: STORE_MS },
    jobOptions: { delay: 3_600_000 },
  });
  try {
    await queue(keys, later);
  } finally {
    await later.close();
  }
}

/** Fails the jobs queued (a worker whose key the service refuses: failed at once, content kept). */
async function failAll(count: number): Promise<void> {
  await outbox.workers.start({ apiKey: 'not-a-key' });
  await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === count, {
    what: `${count} failed jobs`,
  });
  await outbox.workers.closeAll();
}

/** The job ids whose content is stored (strings under the queue's content keys). */
async function storedFor(): Promise<string[]> {
  const ids: string[] = [];
  for (const key of await outbox.redis.client.keys('bull:eml-api:content:*')) {
    if ((await outbox.redis.client.type(key)) !== 'string') continue;
    ids.push(key.slice('bull:eml-api:content:'.length, key.lastIndexOf(':')));
  }
  return ids.sort();
}

/** A sweep once every stored message's producer deadline has passed, by Redis's clock; what it freed. */
async function sweepPastDeadlines(): Promise<number> {
  await pastContentDeadlines(outbox.redis.client);
  return sweepStoredContent(outbox.redis.client, location);
}

/** Delivers what is left with a worker; the subjects delivered. */
async function deliverRest(count: number): Promise<string[]> {
  await outbox.workers.start();
  await eventually(() => outbox.emu.messages().length === count, { what: `${count} delivered` });
  await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === count);
  return outbox.emu
    .messages()
    .map((m) => m.subject)
    .sort();
}

describe('BullMQ removals on an outbox queue', () => {
  it('job.remove(): the content stays until the next sweep past its store deadline, which frees it alone', async () => {
    await queue(['a', 'b', 'c']);
    await (await outbox.transport.queue.getJob('b'))!.remove();
    expect(await storedFor()).toEqual(['a', 'b', 'c']);
    expect(await sweepPastDeadlines()).toBe(1);
    expect(await storedFor()).toEqual(['a', 'c']);
    expect(await deliverRest(2)).toEqual(['a', 'c']);
    expect(await storedFor()).toEqual([]);
  });

  it('Queue.clean() of each state frees the content of the jobs it removed at the next sweep, and only theirs', async () => {
    await queue(['f1', 'f2']);
    await failAll(2);
    await queue(['p1', 'p2', 'w1', 'w2']);
    for (const id of ['w1', 'w2']) await (await outbox.transport.queue.getJob(id))!.changePriority({ priority: 0 });
    await queueDelayed(['d1', 'd2']);
    const q = outbox.transport.queue;
    expect(await q.getJobCounts('failed', 'prioritized', 'wait', 'delayed')).toEqual({
      failed: 2,
      prioritized: 2,
      wait: 2,
      delayed: 2,
    });
    expect(await q.clean(0, 1, 'failed')).toHaveLength(1);
    expect(await q.clean(0, 1, 'prioritized')).toHaveLength(1);
    expect(await q.clean(0, 1, 'wait')).toHaveLength(1);
    expect(await q.clean(0, 1, 'delayed')).toHaveLength(1);
    expect(await q.clean(0, 10, 'completed')).toEqual([]);
    expect(await storedFor()).toHaveLength(8);
    expect(await sweepPastDeadlines()).toBe(4);
    const kept = await storedFor();
    expect(kept).toHaveLength(4);
    for (const id of kept) expect(await q.getJob(id)).toBeDefined();
    // What is still queued goes (the failed and delayed ones once put back), with its content.
    const failed = kept.filter((id) => id.startsWith('f'));
    const delayed = kept.filter((id) => id.startsWith('d'));
    await (await q.getJob(failed[0]!))!.retry('failed');
    await (await q.getJob(delayed[0]!))!.promote();
    expect(await deliverRest(4)).toEqual(kept);
  });

  it('Queue.drain(true) frees the content of the waiting, prioritized and delayed jobs at the next sweep; failed jobs keep theirs', async () => {
    await queue(['f1']);
    await failAll(1);
    await queue(['p1', 'w1']);
    await (await outbox.transport.queue.getJob('w1'))!.changePriority({ priority: 0 });
    await queueDelayed(['d1']);
    await outbox.transport.queue.drain(true);
    expect(await storedFor()).toEqual(['d1', 'f1', 'p1', 'w1']);
    expect(await sweepPastDeadlines()).toBe(3);
    expect(await storedFor()).toEqual(['f1']);
    await (await outbox.transport.queue.getJob('f1'))!.retry('failed');
    expect(await deliverRest(1)).toEqual(['f1']);
  });

  it('Queue.obliterate() leaves content and the outbox keys; the next sweep frees the content, purgeOutbox the rest', async () => {
    await queue(['f1']);
    await failAll(1);
    await queue(['p1']);
    await queueDelayed(['d1']);
    await outbox.transport.queue.obliterate({ force: true });
    expect(await storedFor()).toEqual(['d1', 'f1', 'p1']);
    expect(await sweepPastDeadlines()).toBe(3);
    expect(await storedFor()).toEqual([]);
    const left = await outbox.redis.client.keys('bull:eml-api:*');
    expect(left).toContain('bull:eml-api:outbox:owner');
    await purgeOutbox(outbox.transport.queue);
    expect(await outbox.redis.client.keys('bull:eml-api:*')).toEqual([]);
  });

  it("Queue.retryJobs() of a job the service refused fails it again without a request, keeping the service's reason", async () => {
    // 400 invalid_address: its content was removed as it failed (those bytes can never be sent).
    const info = (await nodemailer.createTransport(outbox.transport).sendMail({
      ...message('refused'),
      to: 'ann@',
    })) as unknown as OutboxQueuedMessageInfo;
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    // Counts the requests the service gets from now on (faults set, none drawn).
    outbox.emu.setFaults({});
    await outbox.transport.queue.retryJobs({ state: 'failed' });
    await eventually(
      async () => {
        const job = (await outbox.transport.queue.getJob(info.queueId))!;
        return (await job.isFailed()) && job.attemptsMade === 2;
      },
      { what: 'the job failed again' },
    );
    const job = (await outbox.transport.queue.getJob(info.queueId))!;
    expect(job.data.lastError).toMatchObject({ responseCode: 400, apiCode: 'invalid_address' });
    expect(job.data.lastError!.message).not.toMatch(/evicted|missing/);
    expect(job.failedReason).toMatch(/refused/);
    expect(outbox.emu.faultStats()).toMatchObject({ none: 0 });
  });
});
