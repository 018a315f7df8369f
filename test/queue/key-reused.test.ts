import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { EmlApiTransport } from '../../src/index.js';
import { retryFailedSends } from '../../src/queue/index.js';
import { rejectionOf } from '../helpers/async.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * A 422 `idempotency_key_reused`: the service already accepted another
 * message under the job's key. It was filed as "the service refused this
 * request", with advice to queue a corrected message under the same key,
 * which only gets 422 again; and a `sendMail` with that key replaced the job
 * and did just that. It is now reported as what it is, and a `sendMail` with
 * the key is refused saying the key was used by a message that was accepted.
 * Real redis-server, the emulator, a worker in this process.
 */

const outbox = useOutbox({ clean: 'queue' });

const message = (text: string) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: 'Your order',
  text,
  idempotencyKey: 'order-9',
});

describe('a job answered 422 idempotency_key_reused', () => {
  it('is reported as a key an accepted message used, and the key is not queued again', async () => {
    // The app sent a message under the key directly; the outbox then gets another one under it.
    const direct = new EmlApiTransport({ apiKey: outbox.emu.apiKey, baseUrl: outbox.emu.url });
    await nodemailer.createTransport(direct).sendMail(message('first'));
    await direct.close();
    const info = await outbox.transporter.sendMail(message('second'));
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    await outbox.workers.closeAll();

    const job = await outbox.transport.queue.getJob(info.queueId);
    expect(job!.data.lastError).toMatchObject({ responseCode: 422, apiCode: 'idempotency_key_reused' });
    const reported = job!.data.lastError!.message;
    expect(reported).toContain('already accepted another message under this idempotency key');
    expect(reported).not.toContain('under the same idempotencyKey');

    const again = await rejectionOf(outbox.transporter.sendMail(message('third')));
    expect(again).toMatchObject({ code: 'EMESSAGE', permanent: true, idempotencyKey: 'order-9' });
    expect(again.message).toContain('already accepted another message under this idempotencyKey');
    expect(await outbox.transport.queue.getJobCounts('failed', 'prioritized')).toEqual({ failed: 1, prioritized: 0 });

    const { skipped } = await retryFailedSends(outbox.transport.queue);
    expect(skipped).toEqual([{ queueId: info.queueId, reason: expect.stringContaining('new idempotencyKey') }]);
    expect(outbox.emu.mailbox('ann@example.test')).toHaveLength(1);
  });
});
