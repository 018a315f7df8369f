import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisHoldProxy, type RedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * A worker faster than the producer (review F3): it takes a job, sends it and
 * completes it, deleting its content, before the producer has read back what
 * it stored. The producer took the missing content for content Redis lost,
 * removed the completed job and rejected sendMail with "not queued, nothing
 * will be sent" for a message that was delivered; an app queueing it again,
 * as told, delivered it twice. A job a worker has sent counts as stored.
 * Real redis-server, a TCP proxy that holds the producer's commands at an exact
 * point, a worker in this process, the emulator.
 */

let redis: RedisServer;
let emu: Emulator;
let proxy: RedisHoldProxy;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  proxy = await startRedisHoldProxy(redis.port);
  transport = new EmlApiQueueTransport({ connection: proxy.url });
  await transport.verify();
});

afterAll(async () => {
  await transport?.close();
  await proxy?.close();
  await emu?.close();
  await redis?.stop();
});

beforeEach(async () => {
  emu.reset();
  await redis.client.flushall();
});

afterEach(async () => {
  proxy.release();
  await workers.closeAll();
});

/** Content stored beside the job (over 64 KiB), which the worker's record of the send deletes. */
const mail = (key: string, to: string, text = 'Your receipt') => ({
  from: 'shop@example.test',
  to,
  subject: 'Receipt',
  text: `${text} ${'r'.repeat(100_000)}`,
  idempotencyKey: key,
});

/**
 * A Lua script call (EVAL with its text the first time on a connection, EVALSHA after) of `keys` keys
 * and `args` arguments whose first keys are `first`: never across the start of another command.
 */
const scriptCall = (keys: number, args: number, first: string) =>
  new RegExp(
    `\\*${3 + keys + args}\\r\\n\\$\\d\\r\\neval(?:sha)?\\r\\n(?:(?!\\*\\d+\\r\\n\\$)[\\s\\S])*?\\r\\n\\$1\\r\\n${keys}\\r\\n${first}`,
    'i',
  );

/** The producer's add of a new message's job (add-job.ts): BullMQ's 9 keys, then the job, failed set and content read after it. */
const ADD = /\*\d+\r\n\$7\r\nevalsha\r\n\$40\r\n[0-9a-f]{40}\r\n\$2\r\n12\r\n\$\d+\r\nbull:eml-api:marker\r\n/i;

/** A read of one content key's stored length, as the producer made after a replacement. */
const LENGTH_READ = scriptCall(1, 0, '\\$\\d+\\r\\nbull:eml-api:content:');

describe('a job a worker sends before the producer has read it back', () => {
  it('resolves sendMail and keeps the job when the worker sent it before the add was sent again', async () => {
    // The add's script goes by its hash from the second message on.
    await nodemailer.createTransport(transport).sendMail(mail('receipt-0', 'ann@example.test'));
    await workers.start();
    await eventually(async () => (await redis.client.zcard('bull:eml-api:completed')) === 1, {
      what: 'the first sent',
    });
    // The add runs, its answer is lost, the worker sends the job and deletes its content, then the add is sent again.
    proxy.holdNext(ADD, { from: 'match' });
    const sending = nodemailer.createTransport(transport).sendMail(mail('receipt-1', 'ann@example.test'));
    sending.catch(() => undefined);
    await eventually(() => proxy.held > 0, { what: 'the add held' });
    expect(await proxy.runHeld()).toMatch(/^\*2\r\n\$9\r\nreceipt-1\r\n/);
    // Read directly: the producer's connection is held.
    await eventually(async () => (await redis.client.zcard('bull:eml-api:completed')) === 2, {
      what: 'the job sent and completed while the producer waits',
    });
    proxy.release();
    const info = (await sending) as unknown as OutboxQueuedMessageInfo;
    expect(info).toMatchObject({ duplicate: false, queueId: 'receipt-1' });
    expect(await (await transport.queue.getJob(info.queueId))!.getState()).toBe('completed');
    expect(emu.mailbox('ann@example.test').map((m) => m.messageId)).toContain(info.messageId);
    expect(emu.mailbox('ann@example.test')).toHaveLength(2);
  });

  it('resolves sendMail when a failed job it replaced is sent before the producer checks the new content', async () => {
    // A job the service refused (400, nothing accepted): a new sendMail under its key replaces it.
    const first = await nodemailer.createTransport(transport).sendMail(mail('receipt-2', 'bob@'));
    await workers.start();
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1, { what: 'failed' });
    proxy.holdNext(LENGTH_READ);
    const sending = nodemailer.createTransport(transport).sendMail(mail('receipt-2', 'bob@example.test', 'Corrected'));
    sending.catch(() => undefined);
    await eventually(async () => (await redis.client.zcard('bull:eml-api:completed')) === 1, {
      what: 'the replacement sent and completed',
    });
    proxy.release();
    const info = (await sending) as unknown as OutboxQueuedMessageInfo;
    expect(info).toMatchObject({
      requeued: 'replaced',
      queueId: (first as unknown as OutboxQueuedMessageInfo).queueId,
    });
    expect(await (await transport.queue.getJob(info.queueId))!.getState()).toBe('completed');
    expect(emu.mailbox('bob@example.test').map((m) => m.messageId)).toEqual([info.messageId]);
  });
});
