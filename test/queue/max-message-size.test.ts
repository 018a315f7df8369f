import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * `maxMessageSize` was checked once the whole message was built: with a
 * 1 MiB limit a 400 MiB stream was read whole and 547 MiB spooled to disk
 * before the refusal (2 GiB: 23 s and 2.7 GiB of disk). The limit now holds
 * while the message is built and spooled: the build stops within a chunk of
 * it, its spool file is removed, nothing is stored. Real redis-server.
 */

const MiB = 1024 * 1024;
let redis: RedisServer;
let spoolDir: string;

beforeAll(async () => {
  redis = await startRedisServer();
  spoolDir = await mkdtemp(join(tmpdir(), 'eml-api-spool-'));
});

afterAll(async () => {
  await redis?.stop();
  await rm(spoolDir, { recursive: true, force: true });
});

/** A stream of `total` bytes made as they are read; `read()` tells how many were. */
function counted(total: number): { stream: Readable; read: () => number } {
  let produced = 0;
  const stream = new Readable({
    read() {
      if (produced >= total) return void this.push(null);
      const chunk = Buffer.alloc(Math.min(64 * 1024, total - produced), 0x61);
      produced += chunk.length;
      this.push(chunk);
    },
  });
  return { stream, read: () => produced };
}

describe('maxMessageSize', () => {
  it('stops the build of a streamed attachment within a chunk of the limit, spooling nothing more', async () => {
    const transport = new EmlApiQueueTransport({
      connection: redis.url,
      maxMessageSize: MiB,
      spool: { threshold: 256 * 1024, directory: spoolDir },
    });
    try {
      const source = counted(64 * MiB);
      const err = await nodemailer
        .createTransport(transport)
        .sendMail({
          from: 'a@example.test',
          to: 'b@example.test',
          text: 'x',
          attachments: [{ filename: 'huge.bin', content: source.stream }],
        })
        .catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: 'EMESSAGE',
        permanent: true,
        message: expect.stringContaining('maxMessageSize'),
      });
      // Base64 makes 1 MiB of message from 0.75 MiB of source; the pipes between hold a few chunks more.
      expect(source.read()).toBeLessThan(4 * MiB);
      expect(await readdir(spoolDir)).toEqual([]);
      expect(await redis.client.keys('*content*')).toEqual([]);
    } finally {
      await transport.close();
    }
  });

  it.each([
    // Kept on the sending thread (in memory, over 2 MiB does not move).
    ['kept on the sending thread', MiB, 3 * MiB],
    // Returned whole by the thread (up to 256 KiB).
    ['returned whole by the thread', 64 * 1024, 150_000],
    // Streamed from the thread.
    ['streamed from the thread', 512 * 1024, 1.5 * MiB],
  ])('holds for a message built with build threads: %s', async (_how, maxMessageSize, bytes) => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, maxMessageSize, buildThreads: 1 });
    try {
      const err = await nodemailer
        .createTransport(transport)
        .sendMail({
          from: 'a@example.test',
          to: 'b@example.test',
          attachments: [{ filename: 'big.bin', content: Buffer.alloc(bytes, 1) }],
        })
        .catch((e: unknown) => e);
      // Stopped as the build passed the limit, not after (the producer's own check is the last line).
      expect(err).toMatchObject({ code: 'EMESSAGE', message: expect.stringContaining('its build stopped there') });
      expect(await redis.client.keys('*content*')).toEqual([]);
    } finally {
      await transport.close();
    }
  });
});
