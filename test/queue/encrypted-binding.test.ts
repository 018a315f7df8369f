import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient } from '../../src/index.js';
import { resolveEncryption, recordAad } from '../../src/queue/content-cipher.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue, type OutboxJobRecord } from '../../src/queue/outbox-job.js';

/**
 * Encrypted records were bound to their content key, position and size, but
 * not to where the mail goes: whoever can write to Redis (without the key)
 * could point an encrypted group send at another group, or give a job
 * another idempotency key (a second delivery), and the worker posted it
 * (review F13 d, found by reading). The sealed envelope now carries the kind
 * and group of the send, the content key names its job, and a worker posts
 * nothing whose data disagrees, nor a job whose sealed envelope names no
 * destination. Real redis-server, the emulator.
 */

const K1 = randomBytes(32);
let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({
  connection: redis.url,
  apiKey: emu.apiKey,
  baseUrl: emu.url,
  encryption: { keys: { k1: K1 } },
}));

beforeAll(async () => {
  [redis, emu] = await Promise.all([
    startRedisServer({ appendonly: true }),
    startEmulator({ groups: ['news', 'vip'] }),
  ]);
});

beforeEach(async () => {
  emu.reset();
  const client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
  await client.addToGroup('news', ['reader@example.test']);
  await client.addToGroup('vip', ['ceo@example.test']);
  await client.close();
  await redis.client.flushall();
  transport = new EmlApiQueueTransport({ connection: redis.url, encryption: { keyId: 'k1', keys: { k1: K1 } } });
});

afterEach(async () => {
  await workers.closeAll();
  await transport.close();
});

afterAll(async () => {
  await emu?.close();
  await redis?.stop();
});

async function queue(mail: object): Promise<OutboxQueuedMessageInfo> {
  return (await nodemailer
    .createTransport(transport)
    .sendMail({ from: 'shop@example.test', subject: 'Hi', text: 'x', ...mail })) as unknown as OutboxQueuedMessageInfo;
}

/** Changes a queued job's data in Redis, as someone with write access (and no key) could. */
async function forge(queueId: string, change: Partial<OutboxJobRecord>): Promise<void> {
  const job = await recordQueue(transport.queue).getJob(queueId);
  await job!.updateData({ ...job!.data, ...change });
}

async function failedWith(queueId: string): Promise<string> {
  await eventually(async () => (await recordQueue(transport.queue).getJob(queueId))!.finishedOn !== undefined, {
    what: 'settled',
  });
  const job = await recordQueue(transport.queue).getJob(queueId);
  expect(await job!.getState()).toBe('failed');
  return job!.data.lastError!.message;
}

describe('an encrypted job whose data was changed in Redis', () => {
  it('is not posted to another group', async () => {
    const info = await queue({ group: 'news' });
    await forge(info.queueId, { group: 'vip' });
    await workers.start();
    expect(await failedWith(info.queueId)).toMatch(/changed in Redis/);
    expect(emu.mailbox('ceo@example.test')).toEqual([]);
    expect(emu.messages()).toEqual([]);
  });

  it('is not posted under another idempotency key', async () => {
    const info = await queue({ to: 'ann@example.test', idempotencyKey: 'order-1' });
    await forge(info.queueId, { idempotencyKey: 'order-1-again' });
    await workers.start();
    expect(await failedWith(info.queueId)).toMatch(/changed in Redis/);
    expect(emu.messages()).toEqual([]);
  });

  it('is not posted to another endpoint', async () => {
    const info = await queue({ group: 'news' });
    await forge(info.queueId, { kind: 'email' });
    await workers.start();
    expect(await failedWith(info.queueId)).toMatch(/changed in Redis/);
    expect(emu.messages()).toEqual([]);
  });
});

describe('an encrypted job whose sealed envelope names no destination', () => {
  it('is not posted', async () => {
    const info = await queue({ group: 'news' });
    const job = await recordQueue(transport.queue).getJob(info.queueId);
    const keyring = resolveEncryption({ keyId: 'k1', keys: { k1: K1 } }, 'producer')!;
    const meta = keyring.seal(
      Buffer.from(JSON.stringify({ envelope: { from: 'shop@example.test', to: [] }, messageId: '' })),
      recordAad(job!.data.contentKey, 'meta', job!.data.size),
    );
    await forge(info.queueId, { encryption: { keyId: 'k1', meta: meta.toString('base64') } });
    await workers.start();
    expect(await failedWith(info.queueId)).toMatch(/changed in Redis/);
    expect(emu.messages()).toEqual([]);
  });
});
