import { inspect } from 'node:util';
import { Worker } from 'node:worker_threads';
import nodemailer, { type Transporter } from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, outboxJobId, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { DEFAULT_RETRY_SCHEDULE, outboxBackoffDelay, retrySpan } from '../../src/queue/retry-schedule.js';
import { DEFAULT_IDEMPOTENCY_MARGIN, DEFAULT_IDEMPOTENCY_WINDOW } from '../../src/queue/worker-options.js';
import { neutralEml } from '../helpers/eml-bytes.js';
import { richMovable } from '../helpers/message-corpus.js';
import { FIXTURES } from '../helpers/rich-message.js';
import { storedContent } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue, type OutboxJobRecord } from '../../src/queue/outbox-job.js';

/**
 * The producer side of the outbox: what sendMail resolves with, what is
 * stored (and what is not), the same refusals as the direct transport, the
 * size cap, idempotency keys as job ids. Real redis-server, real emulator.
 */

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
let transporter: Transporter<OutboxQueuedMessageInfo>;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator({ groups: ['newsletter'] })]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
  transporter = nodemailer.createTransport(transport) as unknown as Transporter<OutboxQueuedMessageInfo>;
});

afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

beforeEach(async () => {
  await redis.client.flushall();
});

/**
 * What a send stores: content (keys, and content kept in jobs) and jobs (BullMQ's own bookkeeping keys, such
 * as its meta hash, are not counted).
 */
async function stored(): Promise<{ content: number; jobs: number }> {
  const jobs = await recordQueue(transport.queue).getJobs([
    'waiting',
    'delayed',
    'prioritized',
    'active',
    'failed',
    'completed',
  ]);
  const content = (await redis.client.keys('bull:eml-api:content:*')).length + jobs.filter((j) => j.data.inline).length;
  const counts = await transport.queue.getJobCounts(
    'waiting',
    'delayed',
    'prioritized',
    'active',
    'failed',
    'completed',
  );
  return { content, jobs: Object.values(counts).reduce((a, b) => a + b, 0) };
}

describe('sendMail through EmlApiQueueTransport', () => {
  it('resolves once Redis has the job, with the info of a relay that took the message', async () => {
    const info = await transporter.sendMail({
      from: 'Shop <shop@example.test>',
      to: 'ann@example.test',
      cc: 'bob@example.test',
      bcc: 'audit@example.test',
      subject: 'Your order',
      text: 'Thanks',
      idempotencyKey: 'order-1042',
    });
    expect(info).toEqual({
      envelope: { from: 'shop@example.test', to: ['ann@example.test', 'bob@example.test', 'audit@example.test'] },
      messageId: expect.stringMatching(/^<.+@example\.test>$/),
      accepted: ['ann@example.test', 'bob@example.test', 'audit@example.test'],
      rejected: [],
      pending: [],
      response: '250 Queued as order-1042',
      queueId: 'order-1042',
      idempotencyKey: 'order-1042',
      duplicate: false,
    });
    const job = await recordQueue(transport.queue).getJob('order-1042');
    expect(job?.name).toBe('eml');
    const data = job!.data as OutboxJobRecord;
    expect(data).toMatchObject({ kind: 'eml', messageId: info.messageId, idempotencyKey: 'order-1042' });
    // A small message is kept in the job (Base64), Bcc kept for the service to strip; nothing beside it.
    expect(await redis.client.exists(data.contentKey)).toBe(0);
    const stored = await storedContent(redis.client, data);
    expect(stored!.length).toBe(data.size);
    expect(stored!.toString()).toMatch(/^Bcc: audit@example\.test\r$/m);
    expect(stored!.toString()).toContain(`Message-ID: ${info.messageId}`);
    expect(job!.opts.attempts).toBe(DEFAULT_RETRY_SCHEDULE.attempts);
  });

  it('keeps content up to 64 KiB in the job, larger content beside it, raw (not Base64)', async () => {
    const message = (kib: number, key: string) => ({
      from: 'shop@example.test',
      to: 'ann@example.test',
      text: 'x'.repeat(kib * 1024),
      idempotencyKey: key,
    });
    // Nodemailer wraps long lines: a text of 60 KiB makes an EML of about 62 KiB, and 70 KiB about 72.
    const small = await transporter.sendMail(message(60, 'small'));
    const large = await transporter.sendMail(message(70, 'large'));
    const smallData = (await recordQueue(transport.queue).getJob(small.queueId))!.data;
    const largeData = (await recordQueue(transport.queue).getJob(large.queueId))!.data;
    expect(smallData.size).toBeLessThanOrEqual(64 * 1024);
    expect(smallData).toMatchObject({ inline: expect.any(String) });
    expect(largeData.size).toBeGreaterThan(64 * 1024);
    expect(largeData).toMatchObject({ sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(largeData.inline).toBeUndefined();
    const beside = await redis.client.getBuffer(largeData.contentKey);
    expect(beside!.length).toBe(largeData.size);
    expect(beside!.toString()).toContain(`Message-ID: ${large.messageId}`);
  });

  it('with buildThreads, stores what a build on the sending thread stores, built on a thread', async () => {
    const threaded = new EmlApiQueueTransport({ connection: redis.url, buildThreads: 1 });
    const posted: unknown[] = [];
    const original = Worker.prototype.postMessage;
    const spy = vi.spyOn(Worker.prototype, 'postMessage').mockImplementation(function (this: Worker, ...args) {
      posted.push(args[0]);
      return original.apply(this, args);
    });
    let onThread: OutboxQueuedMessageInfo;
    try {
      onThread = await nodemailer.createTransport(threaded).sendMail({ ...richMovable(), idempotencyKey: 'on-thread' });
    } finally {
      spy.mockRestore();
      await threaded.close();
    }
    const here = await transporter.sendMail({ ...richMovable(), idempotencyKey: 'here' });
    expect(posted).toEqual([expect.objectContaining({ type: 'build' })]);
    const content = async (info: OutboxQueuedMessageInfo) => {
      const data = (await recordQueue(transport.queue).getJob(info.queueId))!.data as OutboxJobRecord;
      return (await storedContent(redis.client, data))!;
    };
    expect(onThread.envelope).toEqual(here.envelope);
    // The rich message fixes its Message-ID and Date: only the boundaries are random per build.
    expect(neutralEml(await content(onThread), { keepIds: true })).toBe(
      neutralEml(await content(here), { keepIds: true }),
    );
  });

  it('makes an idempotency key the job id, so queueing the same message twice stores it once', async () => {
    const message = { from: 'shop@example.test', to: 'ann@example.test', subject: 'Receipt', text: 'x' };
    const first = await transporter.sendMail({ ...message, idempotencyKey: 'receipt:7' });
    const again = await transporter.sendMail({
      ...message,
      to: 'someone-else@example.test',
      idempotencyKey: 'receipt:7',
    });
    expect(first.queueId).toBe('receipt%3A7');
    expect(again).toEqual({ ...first, duplicate: true });
    expect(await stored()).toEqual({ content: 1, jobs: 1 });
  });

  it('queues a message whose idempotency key reads as a whole number, negative ones included', async () => {
    const message = { from: 'shop@example.test', to: 'ann@example.test', subject: 'Receipt', text: 'x' };
    // BullMQ refuses ids that read as integers ("-5" too): each key gets an id it takes, and is stored once.
    for (const idempotencyKey of ['42', '-5', '-0', '-05']) {
      const info = await transporter.sendMail({ ...message, idempotencyKey });
      expect(decodeURIComponent(info.queueId)).toBe(idempotencyKey);
      expect(await recordQueue(transport.queue).getJob(info.queueId)).toBeTruthy();
      expect(await transporter.sendMail({ ...message, idempotencyKey })).toEqual({ ...info, duplicate: true });
    }
    expect(await stored()).toEqual({ content: 4, jobs: 4 });
  });

  it('gives each send without a key its own UUID key and job', async () => {
    const a = await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: '1' });
    const b = await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: '2' });
    expect(a.idempotencyKey).toMatch(/^[0-9a-f-]{36}$/);
    expect(a.queueId).toBe(a.idempotencyKey);
    expect(b.queueId).not.toBe(a.queueId);
  });

  it('queues group and tracked sends as their JSON request bodies, images included', async () => {
    const group = await transporter.sendMail({
      from: 'News <news@example.test>',
      subject: 'Hi {{first_name}}',
      html: '<p>Hi {{first_name}}</p><img src="cid:logo">',
      attachments: [{ filename: 'logo.png', path: `${FIXTURES}logo.png`, cid: 'logo' }],
      group: 'newsletter',
    });
    expect(group).toMatchObject({ group: 'newsletter', accepted: [], envelope: { from: 'news@example.test', to: [] } });
    const tracked = await transporter.sendMail({
      from: 'shop@example.test',
      to: ['ann@example.test', 'Bob <bob@example.test>'],
      subject: 'Tracked',
      html: '<p>x</p>',
      tracking: true,
    });
    expect(tracked.accepted).toEqual(['ann@example.test', 'bob@example.test']);
    const groupJob = await recordQueue(transport.queue).getJob(group.queueId);
    expect(groupJob!.name).toBe('group');
    const body = JSON.parse((await storedContent(redis.client, groupJob!.data))!.toString()) as {
      subject: string;
      textContent: { html: string; images: unknown[] };
    };
    expect(body.subject).toBe('Hi {{first_name}}');
    expect(body.textContent.html).toBe('<p>Hi {{first_name}}</p><img src="{{logo}}">');
    expect(body.textContent.images[0]).toMatchObject({ name: 'logo', mimeType: 'PNG' });
    const trackedJob = await recordQueue(transport.queue).getJob(tracked.queueId);
    expect(trackedJob!.name).toBe('email');
    expect(JSON.parse((await storedContent(redis.client, trackedJob!.data))!.toString())).toMatchObject({
      to: [{ email: 'ann@example.test' }, { email: 'bob@example.test', name: 'Bob' }],
      textContent: { tracking: true },
    });
  });

  it('refuses a message over maxMessageSize (its own bytes) with EMESSAGE, storing nothing', async () => {
    const small = new EmlApiQueueTransport({ connection: redis.url, maxMessageSize: 1024 * 1024 });
    try {
      await small.verify();
      const err = await nodemailer
        .createTransport(small)
        .sendMail({
          from: 'a@example.test',
          to: 'b@example.test',
          text: 'big',
          attachments: [{ filename: 'big.bin', content: Buffer.alloc(900 * 1024, 7) }],
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err).toMatchObject({ code: 'EMESSAGE', permanent: true });
      // Refused as it is built, once past the limit: its whole size is never known.
      expect((err as Error).message).toMatch(/^The message is over maxMessageSize \(1\.0 MiB\).*not queued/);
      expect(await stored()).toEqual({ content: 0, jobs: 0 });
      // Just under the cap is queued.
      await nodemailer.createTransport(small).sendMail({
        from: 'a@example.test',
        to: 'b@example.test',
        attachments: [{ filename: 'ok.bin', content: Buffer.alloc(400 * 1024, 7) }],
      });
      expect(await stored()).toEqual({ content: 1, jobs: 1 });
    } finally {
      await small.close();
    }
  });

  it('holds no API key at all (it has none), and inspecting it shows none', () => {
    expect(Object.keys(transport)).not.toContain('apiKey');
    expect(inspect(transport, { depth: 3 })).not.toMatch(/apiKey/i);
  });

  it('checks that Redis answers in verify(), and says which Redis when it does not', async () => {
    await expect(transporter.verify()).resolves.toBe(true);
    const nowhere = new EmlApiQueueTransport({ connection: 'redis://127.0.0.1:1', timeouts: { store: 5000 } });
    try {
      const err = (await nowhere.verify().catch((e: unknown) => e)) as EmlApiError;
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err.code).toMatch(/^(ECONNECTION|ETIMEDOUT)$/);
      expect(err.message).toContain('127.0.0.1:1');
      // And a send fails instead of hanging.
      const send = await nodemailer
        .createTransport(nowhere)
        .sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' })
        .catch((e: unknown) => e);
      expect(send).toMatchObject({ code: expect.stringMatching(/^(ECONNECTION|ETIMEDOUT)$/) });
    } finally {
      await nowhere.close();
    }
  });

  it('calls the send callback once, is idle between sends, and refuses sends after close()', async () => {
    const own = new EmlApiQueueTransport({ connection: redis.url, concurrency: 1 });
    const calls: unknown[] = [];
    await new Promise<void>((resolve) => {
      own.send({ data: {}, message: {} } as never, (err) => {
        calls.push(err);
        resolve();
      });
    });
    expect(calls).toHaveLength(1);
    expect(own.isIdle()).toBe(true);
    const idle = new Promise((resolve) => own.once('idle', resolve));
    const sending = nodemailer
      .createTransport(own)
      .sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
    expect(own.isIdle()).toBe(false);
    await sending;
    await idle;
    await own.close();
    expect(own.isIdle()).toBe(false);
    const err = await nodemailer
      .createTransport(own)
      .sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ECONNECTION' });
  });

  it("keeps the job options it checked: a change to the caller's object afterwards changes no job", async () => {
    const jobOptions = { priority: 4, removeOnComplete: { age: 2 * 24 * 3600 } };
    const own = new EmlApiQueueTransport({ connection: redis.url, queueName: 'kept-options', jobOptions });
    try {
      const send = nodemailer.createTransport(own) as unknown as Transporter<OutboxQueuedMessageInfo>;
      const kept = { from: 'shop@example.test', to: 'ann@example.test', subject: 'Kept', text: 'Options kept.' };
      // Unchecked, an age of 5 s would drop sent jobs inside the idempotency window.
      jobOptions.removeOnComplete.age = 5;
      jobOptions.priority = 1;
      const info = await send.sendMail({ ...kept, idempotencyKey: 'kept-1' } as never);
      const job = await own.queue.getJob(info.queueId);
      expect(job?.opts).toMatchObject({ priority: 5, removeOnComplete: { age: 2 * 24 * 3600 } });
    } finally {
      await own.close();
    }
  });

  it('names the option in configuration errors', () => {
    const bad = (options: object) => {
      try {
        new EmlApiQueueTransport(options as never);
      } catch (err) {
        return err as EmlApiError;
      }
      throw new Error('expected a configuration error');
    };
    expect(bad({})).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('connection') });
    expect(bad({ connection: 'http://x' })).toMatchObject({ message: expect.stringContaining('redis://') });
    expect(bad({ connection: redis.url, queueName: 'a:b' })).toMatchObject({
      message: expect.stringContaining('queueName'),
    });
    expect(bad({ connection: redis.url, retry: { attempts: 0 } })).toMatchObject({
      message: expect.stringContaining('retry.attempts'),
    });
    expect(bad({ connection: redis.url, jobOptions: { jobId: 'x' } })).toMatchObject({
      message: expect.stringContaining('idempotencyKey'),
    });
    expect(bad({ connection: redis.url, jobOptions: { backoff: { type: 'custom', pick: () => 1 } } })).toMatchObject({
      code: 'ECONFIG',
      message: expect.stringMatching(/^Invalid option jobOptions: expected plain data/),
    });
    expect(bad({ connection: redis.url, maxMessageSize: -1 })).toMatchObject({
      message: expect.stringContaining('maxMessageSize'),
    });
    expect(bad({ connection: redis.url, buildThreads: 'several' })).toMatchObject({
      code: 'ECONFIG',
      message: expect.stringMatching(/^Invalid option buildThreads/),
    });
  });
});

describe('producer parity: what the direct transport refuses before sending is refused before storing', () => {
  const refused: [string, Record<string, unknown>][] = [
    ['no recipient', { from: 'a@example.test', subject: 'x', text: 'x' }],
    [
      'an envelope naming other recipients',
      {
        from: 'a@example.test',
        to: 'b@example.test',
        text: 'x',
        envelope: { from: 'a@example.test', to: 'c@example.test' },
      },
    ],
    [
      'an attachment that cannot be read',
      { from: 'a@example.test', to: 'b@example.test', attachments: [{ path: '/nonexistent/x.pdf' }] },
    ],
    ['a bad idempotency key', { from: 'a@example.test', to: 'b@example.test', text: 'x', idempotencyKey: 'has space' }],
    ['a group option that is not a string', { from: 'a@example.test', subject: 's', html: 'x', group: 42 }],
    [
      'a tracking option that is not a boolean',
      { from: 'a@example.test', to: 'b@example.test', html: 'x', tracking: 'yes' },
    ],
    [
      'a group send with recipients',
      { from: 'a@example.test', to: 'b@example.test', subject: 's', html: 'x', group: 'newsletter' },
    ],
    [
      'a group send with a file attachment',
      {
        from: 'a@example.test',
        subject: 's',
        html: 'x',
        group: 'newsletter',
        attachments: [{ filename: 'a.txt', content: 'x' }],
      },
    ],
    ['a group send without a subject', { from: 'a@example.test', html: 'x', group: 'newsletter' }],
    ['a tracked send without a recipient', { from: 'a@example.test', subject: 's', html: 'x', tracking: true }],
    [
      'a tracked send with custom headers',
      {
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 's',
        html: 'x',
        tracking: true,
        headers: { 'X-A': '1' },
      },
    ],
    [
      'a tracked send with cc',
      { from: 'a@example.test', to: 'b@example.test', cc: 'c@example.test', subject: 's', html: 'x', tracking: true },
    ],
    ['an empty raw message', { raw: '' }],
    ['an aborted send', { from: 'a@example.test', to: 'b@example.test', text: 'x', signal: AbortSignal.abort() }],
  ];

  it.each(refused)('%s', async (_label, message) => {
    const direct = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
    const sent = emu.messages().length;
    const directError = (await nodemailer
      .createTransport(direct)
      .sendMail(message)
      .catch((e: unknown) => e)) as Error;
    await direct.close();
    expect(directError).toBeInstanceOf(Error);
    expect(emu.messages().length).toBe(sent);

    const queuedError = (await transporter.sendMail(message).catch((e: unknown) => e)) as Error;
    expect(queuedError).toBeInstanceOf(Error);
    // The same kind of error with the same code (an aborted send is refused by Nodemailer itself, in both).
    expect(queuedError instanceof EmlApiError).toBe(directError instanceof EmlApiError);
    expect((queuedError as EmlApiError).code).toBe((directError as EmlApiError).code);
    expect((queuedError as EmlApiError).code).toMatch(/^E[A-Z]+$/);
    expect(await stored()).toEqual({ content: 0, jobs: 0 });
  });
});

describe('job ids and the retry schedule', () => {
  it('maps idempotency keys one to one onto ids BullMQ accepts', () => {
    expect(outboxJobId('order-1042')).toBe('order-1042');
    expect(outboxJobId('a:b')).toBe('a%3Ab');
    expect(outboxJobId('a%3Ab')).toBe('a%253Ab');
    expect(outboxJobId('42')).toBe('%342');
    expect(outboxJobId('042')).toBe('%3042');
    expect(outboxJobId('-5')).toBe('%2D5');
    expect(outboxJobId('-05')).toBe('-05');
    expect(decodeURIComponent(outboxJobId('42'))).toBe('42');
    for (const key of ['x:y:z', '100%', '7', 'ok']) expect(decodeURIComponent(outboxJobId(key))).toBe(key);
  });

  it('keeps trying for most of a day by default, ending before the idempotency window less its margin', () => {
    const span = retrySpan(DEFAULT_RETRY_SCHEDULE);
    // 30 attempts, 5 s doubling to an hourly cap: 20.4 hours of waits, 16.3 with every wait cut by its full jitter.
    expect(span / 3_600_000).toBeCloseTo(20.42, 2);
    expect(((1 - DEFAULT_RETRY_SCHEDULE.jitter) * span) / 3_600_000).toBeCloseTo(16.34, 2);
    // A send whose answer was lost is answered from its first attempt up to the last: the whole schedule fits
    // in the window the workers resend within, with hours to spare for the attempts themselves.
    expect(span + 2 * 3_600_000).toBeLessThan(DEFAULT_IDEMPOTENCY_WINDOW - DEFAULT_IDEMPOTENCY_MARGIN);
    const backoff = { delay: 5000, maxDelay: 3_600_000, jitter: 0.2 };
    expect(outboxBackoffDelay(1, backoff, undefined, () => 0)).toBe(5000);
    expect(outboxBackoffDelay(2, backoff, undefined, () => 0)).toBe(10_000);
    expect(outboxBackoffDelay(30, backoff, undefined, () => 0)).toBe(3_600_000);
    expect(outboxBackoffDelay(1, backoff, undefined, () => 1)).toBe(4000);
    // A Retry-After longer than the scheduled wait is honoured.
    const busy = new EmlApiError('EAPI', '503', { responseCode: 503, retryAfter: 60_000 });
    expect(outboxBackoffDelay(1, backoff, busy, () => 0)).toBe(60_000);
    // Up to the workers' maxRetryAfter (review F5): a Retry-After of a year waits that cap, or the schedule's wait.
    const year = new EmlApiError('EAPI', '503', { responseCode: 503, retryAfter: 365 * 86_400_000 });
    expect(outboxBackoffDelay(1, backoff, year, () => 0, 900_000)).toBe(900_000);
    expect(outboxBackoffDelay(30, backoff, year, () => 0, 900_000)).toBe(3_600_000);
  });
});
