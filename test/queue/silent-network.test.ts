import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { startRedisHoldProxy, type RedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { useShortWaits } from '../helpers/short-waits.js';

/**
 * A network that goes silent (a partition, a host gone without a reset): the
 * socket stays open and nothing comes back. A `sendMail` whose key was queued
 * already used to hang there for good once the job's add had answered: the
 * clean-up after it (removing the content it stored for nothing) had no
 * deadline, nor the producer's connection a command timeout, and `close()`
 * waited for it. Every step is now bounded by `timeouts.store`. Real
 * redis-server behind a proxy that holds what the producer sends.
 */

useShortWaits();
let redis: RedisServer;
let proxy: RedisHoldProxy;

beforeAll(async () => {
  redis = await startRedisServer();
  proxy = await startRedisHoldProxy(redis.port);
});

afterAll(async () => {
  await proxy?.close();
  await redis?.stop();
});

/** How `promise` ended within `ms`: 'resolved', 'rejected', or 'pending' (a hang: the bound is far above the timeout). */
async function within(promise: Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    promise.then(
      () => 'resolved',
      () => 'rejected',
    ),
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('pending'), ms))),
  ]);
  clearTimeout(timer);
  return outcome;
}

const message = {
  from: 'a@example.test',
  to: 'b@example.test',
  subject: 'Receipt',
  text: 'x',
  idempotencyKey: 'silent-1',
  // Stored beside the job (over 64 KiB): a duplicate's content is removed again after the add.
  attachments: [{ filename: 'r.bin', content: Buffer.alloc(200 * 1024, 1) }],
};

describe('a connection that goes silent for good', () => {
  it('is dropped and made again after timeouts.store: sends are taken again', async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 500 } });
    const transporter = nodemailer.createTransport(transport);
    const send = () => transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
    try {
      await send();
      // Everything the producer's connection sends from now on goes nowhere; a new connection gets through.
      proxy.holdNext(/./);
      expect(await send().catch((e: unknown) => e)).toMatchObject({ code: 'ETIMEDOUT' });
      let queued = false;
      for (let i = 0; i < 40 && !queued; i++)
        queued = await send().then(
          () => true,
          () => false,
        );
      expect(queued).toBe(true);
    } finally {
      proxy.release();
      await transport.close();
    }
  });
});

describe('a network that goes silent right after the add', () => {
  it("settles a repeated key's sendMail within timeouts.store, and close() ends", async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 500 } });
    const transporter = nodemailer.createTransport(transport);
    try {
      await transporter.sendMail(message);
      // The next command naming the job's hash then a content key: the removal of the duplicate's content.
      proxy.holdNext(/bull:eml-api:silent-1\r\n\$\d+\r\nbull:eml-api:content:/);
      const again = transporter.sendMail(message);
      expect(await within(again, 10_000)).not.toBe('pending');
      expect(await again.catch((e: unknown) => e)).toMatchObject({ duplicate: true });
      expect(await within(transport.close(), 10_000)).toBe('resolved');
    } finally {
      proxy.release();
      await transport.close();
    }
  });
});
