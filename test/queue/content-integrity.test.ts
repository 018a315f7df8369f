import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisProxy, type RedisProxy } from '../helpers/redis-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';
import { contentCommands } from '../../src/queue/content-store.js';

/**
 * What sendMail acknowledges is what a worker will post, whole (issue 20,
 * item 1). Redis loses data while a message is written in 1 MiB chunks (a
 * restart without AOF, a failover to a lagging replica); ioredis re-sends the
 * command in flight, which used to re-create the key with only what came
 * after: the job was added over truncated content, or over none, and
 * sendMail resolved. Here a proxy holds the producer's commands at an exact
 * point, Redis crashes (SIGKILL, no AOF) and the connection is cut, so the
 * producer reconnects to the restarted Redis and re-sends. And a worker
 * refuses content that does not match the SHA-256 the producer stored.
 * Real redis-server, the emulator over HTTP.
 */

const MiB = 1024 * 1024;
let redis: RedisServer;
let emu: Emulator;
let proxy: RedisProxy;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  proxy = await startRedisProxy(redis.port);
});

afterEach(async () => {
  await workers.closeAll();
  await redis.client.flushall();
});

afterAll(async () => {
  await proxy?.close();
  await emu?.close();
  await redis?.stop();
});

const big = (seed: number, mib: number) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: 'Invoice',
  text: 'Attached',
  attachments: [{ filename: 'invoice.bin', content: Buffer.alloc(mib * MiB, seed) }],
});

/** Keys of the queue's content that hold content (strings), and every job of the queue. */
async function leftInRedis(transport: EmlApiQueueTransport): Promise<{ content: number; jobs: number }> {
  let content = 0;
  for (const key of await redis.client.keys('bull:eml-api:content:*')) {
    if ((await redis.client.type(key)) === 'string') content++;
  }
  const counts = await transport.queue.getJobCounts('waiting', 'delayed', 'prioritized', 'active', 'failed');
  return { content, jobs: Object.values(counts).reduce((a, b) => a + b, 0) };
}

describe('Redis losing data while a message is stored', () => {
  it('in the middle of the chunks: sendMail rejects, no job is queued over truncated content', async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url });
    try {
      await transport.verify();
      // Hold the producer's commands once 1.5 MiB went through: the second chunk's APPEND is in flight.
      const held = proxy.holdWhen(({ bytes }) => bytes > 1.5 * MiB);
      const sending = nodemailer
        .createTransport(transport)
        .sendMail(big(1, 3))
        .catch((e: unknown) => e);
      await held;
      await redis.restart('crash');
      proxy.cut();
      const result = await sending;
      expect(result).toMatchObject({ code: 'ECONNECTION', mayHaveBeenAccepted: false });
      expect((result as Error).message).toMatch(/lost part of the message/);
      expect(await leftInRedis(transport)).toEqual({ content: 0, jobs: 0 });
    } finally {
      await transport.close();
    }
  });

  it('between the last chunk and the job: sendMail rejects, no job is left over missing content', async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url });
    try {
      await transport.verify();
      // BullMQ's add carries the job data, the only command that names "contentKey".
      const held = proxy.holdWhen(({ text }) => text.includes('"contentKey"'));
      const sending = nodemailer
        .createTransport(transport)
        .sendMail(big(2, 2))
        .catch((e: unknown) => e);
      await held;
      await redis.restart('crash');
      proxy.cut();
      const result = await sending;
      expect(result).toMatchObject({ code: 'ECONNECTION', mayHaveBeenAccepted: false });
      expect((result as Error).message).toMatch(/lost the message/);
      expect(await leftInRedis(transport)).toEqual({ content: 0, jobs: 0 });
    } finally {
      await transport.close();
    }
  });
});

describe('Redis refusing the add', () => {
  it('is no "may have been accepted": the add never ran, the content is withdrawn, the send is not queued', async () => {
    // A user whose ACL lets it write content but not the queue's id counter, which BullMQ's add script names
    // among its keys: Redis refuses the script (NOPERM) before running it, after the content was written.
    await redis.client.acl(
      'SETUSER',
      'producer',
      'on',
      '>pw',
      '+@all',
      '~bull:eml-api:content:*',
      '~bull:eml-api:outbox:*',
      '~bull:eml-api:order-*',
      '~bull:eml-api:failed',
    );
    const transport = new EmlApiQueueTransport({ connection: `redis://producer:pw@127.0.0.1:${redis.port}` });
    const admin = new EmlApiQueueTransport({ connection: redis.url });
    try {
      const err = (await nodemailer
        .createTransport(transport)
        .sendMail({ ...big(4, 1), idempotencyKey: 'order-1' })
        .catch((e: unknown) => e)) as EmlApiError;
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err).toMatchObject({ code: 'ECONNECTION', mayHaveBeenAccepted: false, idempotencyKey: 'order-1' });
      expect(err.message).toContain('NOPERM');
      expect(err.message).toContain('not queued, nothing will be sent');
      expect(err.message).not.toContain('pw@');
      // Nothing left: the content is a tombstone (no string), no job.
      expect(await leftInRedis(admin)).toEqual({ content: 0, jobs: 0 });
    } finally {
      await transport.close();
      await admin.close();
      await redis.client.acl('DELUSER', 'producer');
    }
  });
});

describe('content that does not match its SHA-256', () => {
  it.each([
    ['kept in the job', 0.01],
    ['read at once', 0.05],
    ['streamed in chunks', 3],
  ])('is never posted (%s): the job fails, the service gets nothing', async (_label, mib) => {
    emu.reset();
    const transport = new EmlApiQueueTransport({ connection: redis.url });
    try {
      const info = (await nodemailer
        .createTransport(transport)
        .sendMail(big(3, mib))) as unknown as OutboxQueuedMessageInfo;
      const job = await recordQueue(transport.queue).getJob(info.queueId);
      const { contentKey, size, inline } = job!.data;
      expect(inline !== undefined).toBe(_label === 'kept in the job');
      // One byte changed near the end, the length kept: only the hash can tell.
      const at = size - 100;
      if (inline !== undefined) {
        const bytes = Buffer.from(inline, 'base64');
        bytes[at] = bytes[at]! ^ 1;
        await job!.updateData({ ...job!.data, inline: bytes.toString('base64') });
      } else {
        const byte = (await redis.client.getrangeBuffer(contentKey, at, at))[0]!;
        await redis.client.setrange(contentKey, at, String.fromCharCode(byte ^ 1));
      }
      const w = await workers.start();
      const outcome = new Promise<unknown>((resolve) => {
        w.once('failed', (_job, err) => resolve(err));
        w.once('sent', () => resolve('sent'));
      });
      const err = (await outcome) as Error;
      expect(err).toMatchObject({ code: 'EMESSAGE', permanent: true });
      expect(err.message).toMatch(/SHA-256/);
      expect(emu.messages()).toEqual([]);
      await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1);
    } finally {
      await transport.close();
    }
  });
});

describe("a chunk's write", () => {
  // Each chunk names where it goes; Redis writes it only there, so a write re-sent after a lost answer or after
  // Redis lost data never re-creates or extends content out of order.
  it('goes only where the stored length says: the first at 0, a repeat is taken as done, anything else refused', async () => {
    const commands = contentCommands(redis.client);
    const key = 'bull:eml-api:content:chunks:1';
    const index = 'bull:eml-api:content-index';
    const hold = 60_000;
    // A later chunk on a key Redis does not hold (it lost the first ones): refused, nothing created.
    expect(await commands.emlApiWriteAt(key, index, 3, Buffer.from('def'), hold)).toBe(-1);
    expect(await redis.client.exists(key)).toBe(0);
    expect(await commands.emlApiWriteAt(key, index, 0, Buffer.from('abc'), hold)).toBe(3);
    expect(await commands.emlApiWriteAt(key, index, 3, Buffer.from('def'), hold)).toBe(6);
    // The same chunk again (its answer lost): the length it made, nothing appended.
    expect(await commands.emlApiWriteAt(key, index, 3, Buffer.from('def'), hold)).toBe(6);
    // A chunk for a place already written, or past the end: refused, the content unchanged.
    expect(await commands.emlApiWriteAt(key, index, 0, Buffer.from('xyz'), hold)).toBe(-1);
    expect(await commands.emlApiWriteAt(key, index, 9, Buffer.from('ghi'), hold)).toBe(-1);
    expect(await redis.client.get(key)).toBe('abcdef');
  });
});
