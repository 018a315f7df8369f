import { createHash, randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  EmlApiQueueTransport,
  readOutboxStatus,
  type OutboxQueuedMessageInfo,
  type OutboxEncryption,
} from '../../src/queue/index.js';
import { startEmlApiRelay } from '../../src/relay/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { dumpRedis, eventually, inProcessWorkers, storedContent } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * Mail at rest (issue 20, item 11): anyone who can read Redis used to read
 * every queued message (password-reset links, Bcc recipients). With
 * `encryption`, what the outbox stores of a message is ciphertext (the
 * content, chunk by chunk, AES-256-GCM; the envelope and Message-ID sealed
 * with the same key), the SHA-256 on the job is the ciphertext's, keys have
 * ids so they rotate, and the keys never show in errors, logs or inspect.
 * Real redis-server (its whole content dumped), the emulator over HTTP.
 */

const K1 = randomBytes(32);
const K2 = randomBytes(32);
const SECRET = 'reset-token-7f3a9c2e1b';
let redis: RedisServer;
let emu: Emulator;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));
const open: EmlApiQueueTransport[] = [];

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator({ groups: ['news'] })]);
});

beforeEach(async () => {
  emu.reset();
  await redis.client.flushall();
});

afterEach(async () => {
  await workers.closeAll();
  await Promise.all(open.splice(0).map((t) => t.close()));
});

afterAll(async () => {
  await emu?.close();
  await redis?.stop();
});

function producer(encryption: OutboxEncryption | undefined): EmlApiQueueTransport {
  // A short backoff: a job retried for a worker that holds its key is due at once, not after the default 5 s.
  const transport = new EmlApiQueueTransport({
    connection: redis.url,
    retry: { delay: 100, maxDelay: 100 },
    ...(encryption ? { encryption } : {}),
  });
  open.push(transport);
  return transport;
}

const reset = (to: string, extra: object = {}) => ({
  from: 'Shop <shop@example.test>',
  to,
  bcc: 'hidden-auditor@example.test',
  subject: 'Reset your password',
  text: `Open https://shop.example.test/reset?token=${SECRET} within the hour.`,
  ...extra,
});

/** Every byte in Redis, as text, in the forms a reader would look for. */
async function everything(): Promise<string> {
  return dumpRedis(redis.client);
}

describe('queued mail with encryption', () => {
  it('is ciphertext in Redis: no content, no recipient, no Bcc, no subject; the worker delivers it intact', async () => {
    const transporter = nodemailer.createTransport(producer({ keyId: 'k1', keys: { k1: K1 } }));
    const small = (await transporter.sendMail(
      reset('ann@example.test', { idempotencyKey: 'reset-ann-1' }),
    )) as unknown as OutboxQueuedMessageInfo;
    // Streamed through the worker in chunks: several records.
    const large = (await transporter.sendMail(
      reset('bob@example.test', {
        attachments: [{ filename: 'statement.txt', content: `${SECRET}\n`.repeat(200_000) }],
      }),
    )) as unknown as OutboxQueuedMessageInfo;
    // Tracked and group sends are stored as their JSON request bodies.
    await transporter.sendMail({
      ...reset('cy@example.test'),
      bcc: undefined,
      html: `<p>${SECRET}</p>`,
      tracking: true,
    });
    await transporter.sendMail({ from: 'news@example.test', subject: 'News', html: `<p>${SECRET}</p>`, group: 'news' });
    expect(small).toMatchObject({
      envelope: { to: ['ann@example.test', 'hidden-auditor@example.test'] },
      messageId: expect.stringMatching(/^<.+>$/),
    });

    const stored = await everything();
    expect(stored).toContain('reset-ann-1'); // the dump is real: the idempotency key (the job id) stays in clear
    for (const clear of [
      SECRET,
      'ann@example.test',
      'hidden-auditor@example.test',
      'Reset your password',
      'shop.example.test',
      small.messageId,
    ]) {
      expect(stored).not.toContain(clear);
    }
    for (const key of await redis.client.keys('bull:eml-api:content:*')) {
      const bytes = (await redis.client.getBuffer(key))!;
      expect(bytes.toString('latin1')).not.toContain(SECRET);
      expect(bytes.toString('base64')).not.toContain(Buffer.from(SECRET).toString('base64').slice(0, 12));
    }

    await workers.start({ encryption: { keys: { k1: K1 } } });
    await eventually(() => emu.messages().length === 4, { what: 'four sends delivered' });
    const byId = (id: string) => emu.messages().find((m) => m.messageId === id)!;
    expect(byId(small.messageId).raw.toString()).toContain(SECRET);
    expect(emu.mailbox('hidden-auditor@example.test')).toHaveLength(2);
    expect(byId(large.messageId).raw.length).toBeGreaterThan(2 * 1024 * 1024);
  });

  it.each([
    ['kept in the job', true, {}],
    ['beside the job', false, { attachments: [{ filename: 'a.txt', content: 'x'.repeat(100_000) }] }],
  ])('carries a SHA-256 of the ciphertext, not of the message (%s)', async (_where, inline, extra) => {
    const transport = producer({ keyId: 'k1', keys: { k1: K1 } });
    const info = (await nodemailer
      .createTransport(transport)
      .sendMail(reset('ann@example.test', extra))) as unknown as OutboxQueuedMessageInfo;
    const { data } = (await recordQueue(transport.queue).getJob(info.queueId))!;
    const stored = (await storedContent(redis.client, data))!;
    expect(data).toMatchObject({ encryption: { keyId: 'k1' }, envelope: { to: [] }, messageId: '' });
    expect(data.inline !== undefined).toBe(inline);
    expect(data.sha256).toBe(createHash('sha256').update(stored).digest('hex'));
    expect(stored.length).toBe(data.size + 28 * Math.ceil(data.size / (1024 * 1024)));
  });

  it('answers a repeated idempotency key with the first send’s envelope and Message-ID, decrypted', async () => {
    const transporter = nodemailer.createTransport(producer({ keyId: 'k1', keys: { k1: K1 } }));
    const first = await transporter.sendMail(reset('ann@example.test', { idempotencyKey: 'once' }));
    const again = await transporter.sendMail(reset('someone@example.test', { idempotencyKey: 'once' }));
    expect(again).toEqual({ ...first, duplicate: true });
  });

  it('rotates keys: a worker reads what older keys encrypted; a job whose key it lacks is retried, not failed', async () => {
    const before = nodemailer.createTransport(producer({ keyId: 'k1', keys: { k1: K1 } }));
    const after = nodemailer.createTransport(producer({ keyId: 'k2', keys: { k2: K2, k1: K1 } }));
    await before.sendMail(reset('old@example.test'));
    // A worker given only the new key cannot read the old job: it retries it, for a worker that can.
    const partial = await workers.start({ encryption: { keys: { k2: K2 } } });
    const retried = new Promise<Error & { code?: string }>((resolve) =>
      partial.once('retrying', (_job, err: Error) => resolve(err)),
    );
    const err = await retried;
    expect(err).toMatchObject({ code: 'ECONFIG', permanent: false });
    expect(err.message).toContain('encrypted with the key "k1", which this worker does not hold');
    await workers.closeAll();
    await after.sendMail(reset('new@example.test'));
    await workers.start({ encryption: { keys: { k2: K2, k1: K1 } } });
    await eventually(() => emu.messages().length === 2, { what: 'both delivered' });
    expect(emu.mailbox('old@example.test')).toHaveLength(1);
    expect(emu.mailbox('new@example.test')).toHaveLength(1);
  });

  it.each([
    ['kept in the job', {}],
    ['beside the job', { attachments: [{ filename: 'a.txt', content: 'x'.repeat(100_000) }] }],
  ])(
    'fails a job whose ciphertext was changed, even with its SHA-256 recomputed (%s): the GCM tag catches it',
    async (_where, extra) => {
      emu.reset();
      const transport = producer({ keyId: 'k1', keys: { k1: K1 } });
      const info = (await nodemailer
        .createTransport(transport)
        .sendMail(reset('ann@example.test', extra))) as unknown as OutboxQueuedMessageInfo;
      const job = (await recordQueue(transport.queue).getJob(info.queueId))!;
      const bytes = (await storedContent(redis.client, job.data))!;
      bytes[40] = bytes[40]! ^ 1;
      const sha256 = createHash('sha256').update(bytes).digest('hex');
      if (job.data.inline !== undefined)
        await job.updateData({ ...job.data, inline: bytes.toString('base64'), sha256 });
      else {
        await redis.client.set(job.data.contentKey, bytes);
        await job.updateData({ ...job.data, sha256 });
      }
      const w = await workers.start({ encryption: { keys: { k1: K1 } } });
      const outcome = await new Promise<unknown>((resolve) => {
        w.once('failed', (_job, e) => resolve(e));
        w.once('sent', () => resolve('sent'));
      });
      expect(outcome).toMatchObject({ code: 'EMESSAGE', permanent: true });
      expect((outcome as Error).message).toContain('does not decrypt with the key "k1"');
      expect(emu.messages()).toEqual([]);
    },
  );

  it('never shows a key: not in inspect, errors of bad options, queue status', async () => {
    const shown = [K1.toString('hex'), K1.toString('base64'), K2.toString('hex'), K2.toString('base64')];
    const transport = producer({ keyId: 'k1', keys: { k1: K1.toString('base64'), k2: K2.toString('hex') } });
    await nodemailer.createTransport(transport).sendMail(reset('ann@'));
    const w = await workers.start({ encryption: { keys: { k1: K1, k2: K2 } } });
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1);
    const bad = [
      { keyId: 'k1', keys: { k1: K1.subarray(1) } },
      { keyId: 'k1', keys: { k1: `${K1.toString('hex')}00` } },
      { keyId: 'k3', keys: { k1: K1 } },
      { keys: { k1: K1 } },
    ];
    const errors = bad.map((encryption) => {
      try {
        new EmlApiQueueTransport({ connection: redis.url, encryption });
      } catch (err) {
        return err as Error;
      }
      throw new Error('expected a configuration error');
    });
    for (const err of errors)
      expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('encryption') });
    const texts = [
      inspect(transport, { depth: 10, showHidden: true }),
      inspect(w, { depth: 10, showHidden: true }),
      ...errors.map((e) => `${inspect(e, { depth: 10 })} ${JSON.stringify(e)}`),
      JSON.stringify(await readOutboxStatus(transport.queue)),
      await everything(),
    ];
    for (const text of texts) for (const key of shown) expect(text).not.toContain(key);
    const status = await runCliCapturing(['queue', 'status'], { env: { REDIS_URL: redis.url } });
    expect(status.stdout).toContain('eml to (encrypted)');
  });
});

describe('eml-api worker and eml-api relay with EML_API_OUTBOX_KEYS', () => {
  it('the relay stores ciphertext, the worker decrypts it; a malformed list is wrong usage, its value never printed', async () => {
    const keys = `k2:${K2.toString('base64')},k1:${K1.toString('hex')}`;
    const env = { REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey, EML_API_OUTBOX_KEYS: keys };
    const relay = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      queue: { connection: redis.url, encryption: { keyId: 'k2', keys: { k2: K2 } } },
    });
    try {
      await nodemailer
        .createTransport({ host: '127.0.0.1', port: relay.port, secure: false, ignoreTLS: true })
        .sendMail(reset('ann@example.test'));
    } finally {
      await relay.close();
    }
    expect(await everything()).not.toContain(SECRET);
    const stop = new AbortController();
    const running = runCliCapturing(['worker'], { env, signal: stop.signal });
    await eventually(() => emu.messages().length === 1, { what: 'the relayed message sent by the CLI worker' });
    stop.abort();
    expect((await running).code).toBe(0);
    expect(emu.messages()[0]!.raw.toString()).toContain(SECRET);

    const malformed = `k1=${K1.toString('base64')}`;
    const refused = await runCliCapturing(['worker'], { env: { ...env, EML_API_OUTBOX_KEYS: malformed } });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('EML_API_OUTBOX_KEYS');
    expect(refused.stderr + refused.stdout).not.toContain(K1.toString('base64'));
  });
});
