import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

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

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: OLD_KEY, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([
    startRedisServer(),
    startEmulator({
      apiKeys: [
        { key: OLD_KEY, scopes: ['sender'], account: 'shop' },
        { key: NEW_KEY, scopes: ['sender'], account: 'shop' },
        { key: OTHER_ACCOUNT_KEY, scopes: ['sender'], account: 'elsewhere' },
      ],
    }),
  ]);
  // A retry far off: the test promotes it by hand once the worker with the new key runs.
  transport = new EmlApiQueueTransport({ connection: redis.url, retry: { delay: 3_600_000, jitter: 0 } });
});

afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

afterEach(() => workers.closeAll());

/** Sends one message whose first attempt, under OLD_KEY, is delivered and its answer lost; then closes that worker. */
async function firstAttemptUnheard(to: string): Promise<string> {
  const info = await nodemailer.createTransport(transport).sendMail({ from: 'shop@example.test', to, text: 'Receipt' });
  emu.setFaults({ resetAfterProcessing: 1 });
  await workers.start({ apiKey: OLD_KEY });
  await eventually(async () => (await transport.queue.getJobCounts('delayed')).delayed === 1, {
    what: 'the first attempt failed (its answer lost) and the job waits for its retry',
  });
  expect(emu.mailbox(to)).toHaveLength(1);
  await workers.closeAll();
  emu.setFaults(undefined);
  return info.queueId;
}

describe('workers with different API keys of one account', () => {
  it('deliver a send retried under the new key once', async () => {
    const queueId = await firstAttemptUnheard('ann@example.test');
    await workers.start({ apiKey: NEW_KEY });
    await (await transport.queue.getJob(queueId))!.promote();
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'the retry sent',
    });
    expect(emu.mailbox('ann@example.test')).toHaveLength(1);
    expect(emu.messages()).toHaveLength(1);
  });

  it('but a worker of another account sends it again: the idempotency key is not shared across accounts', async () => {
    emu.reset();
    await transport.queue.obliterate({ force: true });
    const queueId = await firstAttemptUnheard('bob@example.test');
    await workers.start({ apiKey: OTHER_ACCOUNT_KEY });
    await (await transport.queue.getJob(queueId))!.promote();
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
      what: 'the retry sent',
    });
    // What docs/outbox.md warns of: all workers of a queue must use keys of one account.
    expect(emu.mailbox('bob@example.test')).toHaveLength(2);
  });
});
