import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { rejectionOf } from '../helpers/async.js';
import { dumpRedis, eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { recordQueue } from '../../src/queue/outbox-job.js';
import type { OutboxQueuedMessageInfo } from '../../src/queue/index.js';

/**
 * A full Redis (maxmemory reached, `noeviction`: what the outbox requires)
 * refuses new mail, as it should; but once the service is back and the
 * backlog drains, the memory must come back (review F4). Every step that
 * freed memory (the deletion of a sent message's content) came after a write
 * that needed memory (the record of the send), which Redis refused: the
 * backlog was sent, its content stayed, and producers were refused for good.
 * The frees now come first, and the sweeper frees the content of sent jobs
 * without waiting its hour of grace, also while Redis is full.
 * Real redis-server with a small maxmemory, workers in this process, the emulator.
 */

const location = resolveQueueLocation(undefined, undefined);
const outbox = useOutbox({
  redis: { args: ['--maxmemory', '16mb', '--maxmemory-policy', 'noeviction'] },
  clean: 'nothing',
});

afterEach(async () => {
  await outbox.workers.closeAll();
  await outbox.redis.client.config('SET', 'maxmemory', '16mb');
  await outbox.redis.client.flushall();
  outbox.emu.reset();
});

/** A message stored beside its job (over 64 KiB). */
const big = (i: number) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: `Backlog ${i}`,
  text: `Message ${i} ${'x'.repeat(200_000)}`,
  idempotencyKey: `backlog-${i}`,
});

/** Content keys holding content (a discarded key is a small hash for an hour). */
async function contentKeys(): Promise<string[]> {
  const keys: string[] = [];
  for (const key of await outbox.redis.client.keys('bull:eml-api:content:*')) {
    if ((await outbox.redis.client.type(key)) === 'string') keys.push(key);
  }
  return keys;
}

/** Queues messages until Redis refuses one (full); resolves with how many were queued. */
async function fillRedis(): Promise<number> {
  const mailer = nodemailer.createTransport(outbox.transport);
  for (let i = 0; ; i++) {
    const refused = await mailer.sendMail(big(i)).then(
      () => false,
      (err: Error) => /OOM/.test(err.message),
    );
    if (refused) return i;
    if (i > 500) throw new Error('Redis never filled up');
  }
}

describe('a full Redis', () => {
  it('frees the content of every message the backlog sends, so producers can queue again', async () => {
    const queued = await fillRedis();
    expect(queued).toBeGreaterThan(5);
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === queued, {
      what: 'the backlog sent',
    });
    expect(outbox.emu.messages()).toHaveLength(queued);
    expect(await contentKeys()).toEqual([]);
    const job = await recordQueue(outbox.transport.queue).getJob('backlog-0');
    expect(job!.data.sent?.id).toBeDefined();
    await nodemailer.createTransport(outbox.transport).sendMail(big(1000));
  });

  it('has its sweeper free the content of sent jobs at once, without its grace, while Redis is full', async () => {
    const mailer = nodemailer.createTransport(outbox.transport);
    for (let i = 0; i < 20; i++) await mailer.sendMail(big(i));
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 20, {
      what: 'sent',
    });
    await outbox.workers.closeAll();
    // The records of the sends failed (a Redis error, a worker killed between its send and its record): the
    // content of the sent jobs is still there, and Redis is full.
    for (const job of await recordQueue(outbox.transport.queue).getJobs(['completed'])) {
      await outbox.redis.client.set(job.data.contentKey, Buffer.alloc(200_000, 7));
      await outbox.redis.client.zadd('bull:eml-api:outbox:content-index', Date.now(), job.data.contentKey);
    }
    const used = Number(/used_memory:(\d+)/.exec(await outbox.redis.client.info('memory'))![1]);
    await outbox.redis.client.config('SET', 'maxmemory', String(used - 1_000_000));
    const refused = await mailer.sendMail(big(100)).catch((err: Error) => err);
    expect(refused).toBeInstanceOf(Error);
    expect(await sweepStoredContent(outbox.redis.client, location)).toBe(20);
    expect(await contentKeys()).toEqual([]);
    await mailer.sendMail(big(101));
  });

  it('answers a send under the key of a queued message as a duplicate, and refuses a new one, writing nothing', async () => {
    const mailer = nodemailer.createTransport(outbox.transport);
    // Small: kept in the job, so the add is the send's first write.
    const receipt = (idempotencyKey: string) => ({
      from: 'shop@example.test',
      to: 'ann@example.test',
      subject: 'Receipt',
      text: 'Thank you',
      idempotencyKey,
    });
    const first = (await mailer.sendMail(receipt('full-1'))) as unknown as OutboxQueuedMessageInfo;
    const used = Number(/used_memory:(\d+)/.exec(await outbox.redis.client.info('memory'))![1]);
    await outbox.redis.client.config('SET', 'maxmemory', String(used - 1_000_000));
    const before = await dumpRedis(outbox.redis.client);
    // Its first try's answer was lost, say: the message is queued, and will be sent.
    const again = (await mailer.sendMail(receipt('full-1'))) as unknown as OutboxQueuedMessageInfo;
    expect(again).toMatchObject({ duplicate: true, queueId: first.queueId, response: first.response });
    const refused = await rejectionOf(mailer.sendMail(receipt('full-2')));
    expect(refused).toMatchObject({ mayHaveBeenAccepted: false, message: expect.stringMatching(/OOM/) });
    expect(await dumpRedis(outbox.redis.client)).toBe(before);
  });
});
