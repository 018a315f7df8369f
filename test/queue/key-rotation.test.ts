import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * Workers of one queue that hold different API keys of one account (a key
 * rotated while a send was being retried): the service's idempotency scope is
 * the account (../shared/CONTRACT.md), so the retry under the new key is
 * answered from the first send and the message is delivered once. The
 * emulator used to scope keys per API key, where the retry was a new send.
 * Real redis-server, real emulator; the first attempt is delivered and its
 * answer lost (the emulator resets the connection after processing).
 */

const OLD_KEY = 'k-rotated-out';
const NEW_KEY = 'k-rotated-in';
const OTHER_ACCOUNT_KEY = 'k-other-account';

const outbox = useOutbox({
  emulator: {
    apiKeys: [
      { key: OLD_KEY, scopes: ['sender'], account: 'shop' },
      { key: NEW_KEY, scopes: ['sender'], account: 'shop' },
      { key: OTHER_ACCOUNT_KEY, scopes: ['sender'], account: 'elsewhere' },
    ],
  },
  // A retry far off: the test promotes it by hand once the worker with the new key runs.
  transport: { retry: { delay: 3_600_000, jitter: 0 } },
  worker: { apiKey: OLD_KEY },
  clean: 'nothing',
});

/** Sends one message whose first attempt, under OLD_KEY, is delivered and its answer lost; then closes that worker. */
async function firstAttemptUnheard(to: string): Promise<string> {
  const info = await nodemailer
    .createTransport(outbox.transport)
    .sendMail({ from: 'shop@example.test', to, text: 'Receipt' });
  outbox.emu.setFaults({ resetAfterProcessing: 1 });
  await outbox.workers.start({ apiKey: OLD_KEY });
  await eventually(async () => (await outbox.transport.queue.getJobCounts('delayed')).delayed === 1, {
    what: 'the first attempt failed (its answer lost) and the job waits for its retry',
  });
  expect(outbox.emu.mailbox(to)).toHaveLength(1);
  await outbox.workers.closeAll();
  outbox.emu.setFaults(undefined);
  return info.queueId;
}

describe('workers with different API keys of one account', () => {
  it('deliver a send retried under the new key once', async () => {
    const queueId = await firstAttemptUnheard('ann@example.test');
    await outbox.workers.start({ apiKey: NEW_KEY });
    await (await outbox.transport.queue.getJob(queueId))!.promote();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'the retry sent',
    });
    expect(outbox.emu.mailbox('ann@example.test')).toHaveLength(1);
    expect(outbox.emu.messages()).toHaveLength(1);
  });

  it('but a worker of another account sends it again: the idempotency key is not shared across accounts', async () => {
    outbox.emu.reset();
    await outbox.transport.queue.obliterate({ force: true });
    const queueId = await firstAttemptUnheard('bob@example.test');
    await outbox.workers.start({ apiKey: OTHER_ACCOUNT_KEY });
    await (await outbox.transport.queue.getJob(queueId))!.promote();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'the retry sent',
    });
    // What docs/outbox.md warns of: all workers of a queue must use keys of one account.
    expect(outbox.emu.mailbox('bob@example.test')).toHaveLength(2);
  });
});
