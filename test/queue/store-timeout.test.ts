import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * A send that runs out of `storeTimeout` while Redis is slow (here: writes
 * paused with CLIENT PAUSE, as during a long fork or a failover). sendMail
 * rejects with ETIMEDOUT, and nothing of the message may stay in Redis: the
 * writes used to go on after the deadline, past the cleanup, and leave the
 * whole message under a content key no job points at (until a worker's sweep
 * an hour later). Real redis-server.
 */

let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedisServer();
});

afterAll(async () => {
  await redis?.stop();
});

describe('storeTimeout while Redis is slow', () => {
  it('rejects with ETIMEDOUT and leaves no content in Redis once Redis catches up', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, storeTimeout: 300 });
    try {
      await transport.verify();
      await redis.client.call('CLIENT', 'PAUSE', '1500', 'WRITE');
      const err = await nodemailer
        .createTransport(transport)
        .sendMail({
          from: 'a@example.test',
          to: 'b@example.test',
          text: 'big',
          // Several 1 MiB chunks: the writes do not end with the first command.
          attachments: [{ filename: 'big.bin', content: Buffer.alloc(4 * 1024 * 1024, 7) }],
        })
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: false });
      // Redis takes writes again; whatever was under way has run by the time a PING is answered.
      await eventually(async () => (await redis.client.call('CLIENT', 'UNPAUSE')) === 'OK');
      await new Promise((resolve) => setTimeout(resolve, 500));
      await redis.client.ping();
      // At most a tombstone (a small hash, for an hour) where the content was: none of the message.
      for (const key of await redis.client.keys('bull:eml-api:content:*')) {
        expect(await redis.client.type(key)).toBe('hash');
        expect(await redis.client.hgetall(key)).toEqual({ discarded: '1' });
      }
      expect(await transport.queue.getJobCounts('waiting')).toEqual({ waiting: 0 });
    } finally {
      await transport.close();
    }
  });
});
