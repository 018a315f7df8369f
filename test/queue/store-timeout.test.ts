import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, outboxJobId } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisHoldProxy, type RedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * A send that runs out of `storeTimeout` while Redis is slow. While the
 * content is written (writes paused with CLIENT PAUSE, as during a long fork
 * or a failover), sendMail rejects with ETIMEDOUT and nothing of the message
 * may stay in Redis: the writes used to go on after the deadline, past the
 * cleanup, and leave the whole message under a content key no job points at.
 * While the job is added (the command held back by a proxy, as a slow network
 * would), the job may land after the deadline: the error must carry the
 * idempotency key (the one the outbox made up when sendMail had none) and the
 * job id, so that the caller can queue it again safely and look it up. The
 * error used to say "queue again with the same idempotencyKey" and carry none.
 * Real redis-server.
 */

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

const message = { from: 'a@example.test', to: 'b@example.test', subject: 'Receipt', text: 'Thanks' };

describe('storeTimeout while Redis is slow', () => {
  it('rejects with ETIMEDOUT and leaves no content in Redis once Redis catches up', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, timeouts: { store: 300 } });
    try {
      await transport.verify();
      await redis.client.call('CLIENT', 'PAUSE', '1500', 'WRITE');
      const err = await nodemailer
        .createTransport(transport)
        .sendMail({
          ...message,
          idempotencyKey: 'receipt:7',
          // Several 1 MiB chunks: the writes do not end with the first command.
          attachments: [{ filename: 'big.bin', content: Buffer.alloc(4 * 1024 * 1024, 7) }],
        })
        .catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: 'ETIMEDOUT',
        mayHaveBeenAccepted: false,
        idempotencyKey: 'receipt:7',
        queueId: 'receipt%3A7',
      });
      // Redis takes writes again; whatever was under way has run by the time a PING is answered.
      await eventually(async () => (await redis.client.call('CLIENT', 'UNPAUSE')) === 'OK');
      await new Promise((resolve) => setTimeout(resolve, 500));
      await redis.client.ping();
      // At most a tombstone (a small hash, for an hour) where the content was: none of the message.
      for (const key of await redis.client.keys('bull:eml-api:content:*')) {
        expect(await redis.client.type(key)).toBe('hash');
        expect(await redis.client.hgetall(key)).toEqual({ discarded: '1' });
      }
      expect(await transport.queue.getJobCounts('waiting', 'prioritized')).toEqual({ waiting: 0, prioritized: 0 });
    } finally {
      await transport.close();
    }
  });

  it('carries the idempotency key it made up and the job id, so the job that lands late is queued once', async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 500 } });
    const transporter = nodemailer.createTransport(transport);
    try {
      await transport.verify();
      // The content is written; the job's add (a Lua script) is held past the deadline.
      proxy.holdNext(/"contentKey"/);
      const err = (await transporter.sendMail(message).catch((e: unknown) => e)) as EmlApiError;
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true, permanent: false });
      // sendMail had no key: the one the outbox made up is on the error, with the job id.
      expect(err.idempotencyKey).toMatch(/^[0-9a-f-]{36}$/);
      expect(err.queueId).toBe(outboxJobId(err.idempotencyKey!));
      expect(err.message).toContain(err.idempotencyKey);
      expect(inspect(err)).toContain(`idempotencyKey: '${err.idempotencyKey}'`);
      expect(inspect(err)).toContain(`queueId: '${err.queueId}'`);

      // The held add runs after all: the job lands although sendMail rejected.
      proxy.release();
      await eventually(async () => (await recordQueue(transport.queue).getJob(err.queueId!)) !== undefined, {
        what: 'the late job',
      });
      // Queueing again with the key from the error stores it once.
      const again = await transporter.sendMail({ ...message, idempotencyKey: err.idempotencyKey });
      expect(again).toMatchObject({ duplicate: true, queueId: err.queueId, idempotencyKey: err.idempotencyKey });
      const counts = await transport.queue.getJobCounts('waiting', 'prioritized');
      expect((counts.waiting ?? 0) + (counts.prioritized ?? 0)).toBe(1);
      // One copy of this message's content: in the job (a small message), none beside it.
      expect((await recordQueue(transport.queue).getJob(err.queueId!))!.data.inline).toEqual(expect.any(String));
      expect(await redis.client.keys(`bull:eml-api:content:${err.queueId}:*`)).toHaveLength(0);
    } finally {
      proxy.release();
      await transport.close();
    }
  });

  it('adds no job that lands late over content cut short meanwhile', async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 500 } });
    try {
      await transport.verify();
      // Content stored beside the job (over 64 KiB); the job's add is held past the deadline.
      proxy.holdNext(/"contentKey"/);
      const big = { ...message, text: `Thanks ${'t'.repeat(100_000)}` };
      const err = (await nodemailer
        .createTransport(transport)
        .sendMail(big)
        .catch((e: unknown) => e)) as EmlApiError;
      expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true });
      // Meanwhile its content loses its end (what a restart without AOF or a lagging replica can leave).
      const [key] = await redis.client.keys(`bull:eml-api:content:${err.queueId}:*`);
      await redis.client.set(key!, (await redis.client.getBuffer(key!))!.subarray(0, 50_000));
      proxy.release();
      await eventually(() => proxy.held === 0, { what: 'the held add run' });
      // The add, run in the same step as its check of the content, added nothing.
      await redis.client.ping();
      expect(await recordQueue(transport.queue).getJob(err.queueId!)).toBeUndefined();
    } finally {
      proxy.release();
      await transport.close();
    }
  });
});
