import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { rejectionOf } from '../helpers/async.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { startRedisProxy, type RedisProxy } from '../helpers/redis-proxy.js';

/**
 * `sendMail` with the idempotency key of a failed job puts the job back
 * (replaced with the new message, or retried with its own bytes). When
 * Redis could not be reached as the job was put back, `sendMail` resolved
 * `250 Queued` all the same: the job stayed failed, holding the corrected
 * message, and was never sent. It now rejects, saying the job may or may not
 * be back, and queueing again with the same key finishes the put-back. Real
 * redis-server behind a TCP proxy that goes down when the put-back is sent.
 */

const outbox = useOutbox({ transport: { retry: { attempts: 1, delay: 50, jitter: 0 } }, clean: 'redis' });
let proxy: RedisProxy;

beforeAll(async () => {
  proxy = await startRedisProxy(outbox.redis.port);
});

afterAll(async () => {
  await proxy?.close();
});

const order = (to: string) => ({
  from: 'shop@example.test',
  to,
  subject: 'Your order',
  text: 'Thanks',
  idempotencyKey: 'order-77',
});

describe('putting back a failed job while Redis cannot be reached', () => {
  it('rejects instead of answering 250; sendMail again finishes the put-back and the corrected message is sent', async () => {
    // 400 invalid_address: nothing accepted, so the next sendMail with the key replaces the job.
    const first = await outbox.transporter.sendMail(order('ann@'));
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    await outbox.workers.closeAll();

    const producer = new EmlApiQueueTransport({ connection: proxy.url });
    try {
      const transporter = nodemailer.createTransport(producer);
      // BullMQ's reprocessJob names the failed job's reason field: the put-back itself.
      const putBack = proxy.holdWhen(({ text }) => text.includes('failedReason'));
      const sending = transporter.sendMail(order('ann@example.test'));
      await putBack;
      await proxy.down();
      const err = await rejectionOf(sending);
      await proxy.up();
      expect(err).toMatchObject({
        code: 'ECONNECTION',
        mayHaveBeenAccepted: true,
        idempotencyKey: 'order-77',
        queueId: first.queueId,
      });
      expect(err.message).toContain('put back');
      expect(err.message).not.toContain('maxRetriesPerRequest');
      expect(await (await outbox.transport.queue.getJob(first.queueId))!.getState()).toBe('failed');

      const again = await transporter.sendMail(order('ann@example.test'));
      expect(again).toMatchObject({ queueId: first.queueId });
      await outbox.workers.start();
      await eventually(() => outbox.emu.mailbox('ann@example.test').length === 1, { what: 'the corrected message' });
    } finally {
      await producer.close();
    }
  });
});
