import { createHash, randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, startOutboxWorker, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * The wrong key bytes under the right key id (a typo in one machine's
 * EML_API_OUTBOX_KEYS, a key regenerated under its old id): such a worker
 * started without complaint and failed every encrypted job for good
 * (`EMESSAGE`), as if Redis had changed them (review F10,
 * attack/07-key-mistakes.ts). Producers now record a check value of each key
 * (an HMAC, never the key) in Redis; a worker whose key does not match it
 * refuses to start (`ECONFIG` naming the key id), and a job that does not
 * decrypt is retried (for a worker holding the right key) unless Redis says
 * this worker's key is the right one, or the content fails its SHA-256: then
 * Redis changed it, and it fails for good. Real redis-server, the emulator.
 */

const K1 = randomBytes(32);
const OTHER_K1 = randomBytes(32);
const KEYS_HASH = 'bull:eml-api:outbox:keys';
let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
});

beforeEach(async () => {
  emu.reset();
  await redis.client.flushall();
  transport = new EmlApiQueueTransport({
    connection: redis.url,
    encryption: { keyId: 'k1', keys: { k1: K1 } },
    retry: { delay: 100, maxDelay: 100, jitter: 0 },
  });
});

afterEach(async () => {
  await workers.closeAll();
  await transport.close();
});

afterAll(async () => {
  await emu?.close();
  await redis?.stop();
});

/** A small message (read whole) and a large one (streamed, records checked one by one). */
async function queueBoth(): Promise<OutboxQueuedMessageInfo[]> {
  const mailer = nodemailer.createTransport(transport);
  const infos = [];
  for (const [name, size] of [
    ['small', 1000],
    ['large', 3 * 1024 * 1024],
  ] as const) {
    infos.push(
      (await mailer.sendMail({
        from: 'a@example.test',
        to: `${name}@example.test`,
        subject: name,
        text: 'y'.repeat(size),
        idempotencyKey: name,
      })) as unknown as OutboxQueuedMessageInfo,
    );
  }
  return infos;
}

const keyTexts = [K1, OTHER_K1].flatMap((k) => [k.toString('hex'), k.toString('base64')]);

describe('a worker holding other bytes under the key id the producers use', () => {
  it('refuses to start, naming the key id, never a key', async () => {
    await queueBoth();
    expect(await redis.client.hkeys(KEYS_HASH)).toEqual(['k1']);
    const err = await startOutboxWorker({
      connection: redis.url,
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      cleanupInterval: 0,
      encryption: { keys: { k1: OTHER_K1 } },
    }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('encryption.keys.k1') });
    const shown = `${inspect(err, { depth: 10 })} ${JSON.stringify(err)} ${await redis.client.hget(KEYS_HASH, 'k1')}`;
    for (const key of keyTexts) expect(shown).not.toContain(key);
    // Nothing was run (a job BullMQ handed over before the check was handed back, untouched): both wait
    // for a worker with the right key.
    const counts = await transport.queue.getJobCounts('prioritized', 'waiting', 'active', 'failed');
    expect(counts.prioritized! + counts.waiting!).toBe(2);
    for (const id of ['small', 'large'])
      expect((await recordQueue(transport.queue).getJob(id))!.data.lastError).toBeUndefined();
    expect(emu.messages()).toEqual([]);
  });

  it('where Redis holds no check (jobs of an older producer): retries each job instead of failing it', async () => {
    const infos = await queueBoth();
    await redis.client.del(KEYS_HASH);
    await workers.start({ encryption: { keys: { k1: OTHER_K1 } } });
    await eventually(
      async () => {
        const jobs = await Promise.all(infos.map((i) => recordQueue(transport.queue).getJob(i.queueId)));
        return jobs.every((j) => (j!.data.lastError?.attempt ?? 0) >= 2);
      },
      { what: 'both tried twice' },
    );
    for (const info of infos) {
      const job = await recordQueue(transport.queue).getJob(info.queueId);
      expect(await job!.getState()).not.toBe('failed');
      expect(job!.data.lastError).toMatchObject({ code: 'ECONFIG', permanent: false });
      expect(job!.data.lastError!.message).toContain('does not decrypt with the key "k1"');
      expect(job!.data.possiblyAcceptedAt).toBeUndefined();
    }
    await workers.closeAll();
    await workers.start({ encryption: { keys: { k1: K1 } } });
    await eventually(() => emu.messages().length === 2, { what: 'both delivered by a worker with the right key' });
  });
});

describe('content changed in Redis', () => {
  /** Flips a bit of the first record of each job's content; with `rehash`, sets the job's SHA-256 to match. */
  async function tamper(infos: OutboxQueuedMessageInfo[], rehash: (id: string) => boolean): Promise<void> {
    for (const info of infos) {
      const job = (await recordQueue(transport.queue).getJob(info.queueId))!;
      // Small content is inline in the job (Base64), larger content under its key.
      const inline = job.data.inline;
      const bytes =
        inline === undefined ? (await redis.client.getBuffer(job.data.contentKey))! : Buffer.from(inline, 'base64');
      bytes[40] = bytes[40]! ^ 1;
      if (inline === undefined) await redis.client.set(job.data.contentKey, bytes);
      const changed = inline === undefined ? {} : { inline: bytes.toString('base64') };
      const sha256 = rehash(info.queueId) ? { sha256: createHash('sha256').update(bytes).digest('hex') } : {};
      await job.updateData({ ...job.data, ...changed, ...sha256 });
    }
  }

  async function expectFailedForGood(infos: OutboxQueuedMessageInfo[]): Promise<void> {
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === infos.length, {
      what: 'failed',
    });
    for (const info of infos) {
      const job = await recordQueue(transport.queue).getJob(info.queueId);
      expect(job!.data.lastError).toMatchObject({ code: 'EMESSAGE', permanent: true, attempt: 1 });
      expect(job!.data.lastError!.message).toMatch(/changed in Redis/);
    }
    expect(emu.messages()).toEqual([]);
  }

  it('fails for good when Redis confirms the worker holds the right key, its SHA-256 recomputed or not', async () => {
    const infos = await queueBoth();
    await tamper(infos, (id) => id === 'small');
    await workers.start({ encryption: { keys: { k1: K1 } } });
    await expectFailedForGood(infos);
  });

  it('fails for good without a check in Redis when the SHA-256 tells, read whole or streamed to its end', async () => {
    const infos = await queueBoth();
    await tamper(infos, () => false);
    await redis.client.del(KEYS_HASH);
    await workers.start({ encryption: { keys: { k1: K1 } } });
    await expectFailedForGood(infos);
  });
});

describe('a producer holding other bytes under a key id already in use', () => {
  it('refuses to queue (ECONFIG naming the key id): the workers could not read what it stores', async () => {
    await queueBoth();
    const other = new EmlApiQueueTransport({
      connection: redis.url,
      encryption: { keyId: 'k1', keys: { k1: OTHER_K1 } },
    });
    try {
      const err = await nodemailer
        .createTransport(other)
        .sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' })
        .then(
          () => undefined,
          (e: Error) => e,
        );
      expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('encryption.keys.k1') });
      await expect(other.verify()).rejects.toMatchObject({ code: 'ECONFIG' });
      for (const key of keyTexts) expect(inspect(err, { depth: 10 })).not.toContain(key);
      expect(await transport.queue.count()).toBe(2);
    } finally {
      await other.close();
    }
  });
});
