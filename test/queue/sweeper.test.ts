import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { eventually, inProcessWorkers, pastContentDeadlines } from '../helpers/outbox.js';
import { startRedisProxy, type RedisProxy } from '../helpers/redis-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * The sweeper of stored content nobody needs: it judges deadlines by Redis's
 * clock, not the worker's; it frees content whose job is gone once its
 * producer's store deadline has passed, and never content a job still to be
 * sent points at; one worker sweeps at a time; it works from the queue's
 * content index, never a SCAN of the keyspace (but still finds content in no
 * index entry); a store that timed out before its job was added discards its
 * content once the add is known not to have landed, and an add that lands
 * after its content was freed is refused. Real redis-server, a TCP proxy in
 * front of it where a test needs Redis to stall at an exact point, the
 * emulator over HTTP.
 */

let redis: RedisServer;
let emu: Emulator;
let proxy: RedisProxy;
const location = resolveQueueLocation(undefined, undefined);
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  proxy = await startRedisProxy(redis.port);
});

afterEach(async () => {
  vi.useRealTimers();
  proxy.cut();
  await workers.closeAll();
  await redis.client.flushall();
  emu.reset();
});

afterAll(async () => {
  await proxy?.close();
  await emu?.close();
  await redis?.stop();
});

/** A message whose content is stored beside its job (over 64 KiB: smaller content goes in the job, unswept). */
const message = (text: string) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: 'Hi',
  text,
  attachments: [{ filename: 'pad.bin', content: PAD }],
});
const PAD = Buffer.alloc(50_000, 1);
/** A producer's store deadline short enough for a test to wait out. */
const SHORT_STORE = 1500;

/** Content keys holding content (strings; a discarded key is a small hash for an hour). */
async function contentKeys(): Promise<string[]> {
  const keys: string[] = [];
  for (const key of await redis.client.keys('bull:eml-api:content:*')) {
    if ((await redis.client.type(key)) === 'string') keys.push(key);
  }
  return keys;
}

/** Queues a message and removes its job: content no job needs. */
async function orphan(transport: EmlApiQueueTransport, text: string): Promise<string> {
  const info = (await nodemailer
    .createTransport(transport)
    .sendMail(message(text))) as unknown as OutboxQueuedMessageInfo;
  const job = await recordQueue(transport.queue).getJob(info.queueId);
  await job!.remove();
  return job!.data.contentKey;
}

async function scanCalls(): Promise<number> {
  const stats = (await redis.client.info('commandstats')).match(/^cmdstat_scan:calls=(\d+)/m);
  return stats ? Number(stats[1]) : 0;
}

describe('the content sweeper', () => {
  it("judges age by Redis's clock: a worker whose clock is 2 hours ahead leaves content being written alone", async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url });
    try {
      await transport.verify();
      // The content is written; BullMQ's add (the only command naming "contentKey") is held back.
      const held = proxy.holdWhen(({ text }) => text.includes('"contentKey"'));
      const sending = nodemailer.createTransport(transport).sendMail(message('being queued'));
      await held;
      expect(await contentKeys()).toHaveLength(1);
      // A worker on a machine whose clock runs 2 hours ahead sweeps now.
      vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 2 * 3_600_000 });
      await sweepStoredContent(redis.client, location);
      vi.useRealTimers();
      expect(await contentKeys()).toHaveLength(1);
      // The add goes through (re-sent on reconnect) and the message is delivered whole.
      proxy.cut();
      const info = (await sending) as unknown as OutboxQueuedMessageInfo;
      await workers.start();
      await eventually(() => emu.messages().length === 1, { what: 'the message delivered' });
      expect(emu.messages()[0]!.messageId).toBe(info.messageId);
    } finally {
      await transport.close();
    }
  });

  it("removes content whose job is gone once its producer's deadline has passed, keeps the content of waiting jobs", async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, timeouts: { store: SHORT_STORE } });
    try {
      const kept = await nodemailer.createTransport(transport).sendMail(message('kept'));
      const gone = await orphan(transport, 'gone');
      // Within its producer's deadline: it might belong to a job being added right now.
      expect(await sweepStoredContent(redis.client, location)).toBe(0);
      await pastContentDeadlines(redis.client);
      expect(await sweepStoredContent(redis.client, location)).toBe(1);
      expect(await redis.client.exists(gone)).toBe(0);
      const keptJob = await recordQueue(transport.queue).getJob((kept as unknown as OutboxQueuedMessageInfo).queueId);
      expect(await redis.client.exists(keptJob!.data.contentKey)).toBe(1);
    } finally {
      await transport.close();
    }
  });

  it('never SCANs the keyspace to find the content: it reads the queue’s index', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, timeouts: { store: SHORT_STORE } });
    try {
      // Another app's keys in the same Redis.
      await redis.client.mset(Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`cache:${i}`, 'x'])));
      const orphaned = await orphan(transport, 'orphaned');
      await pastContentDeadlines(redis.client);
      const scans = await scanCalls();
      expect(await sweepStoredContent(redis.client, location)).toBe(1);
      expect(await redis.client.exists(orphaned)).toBe(0);
      expect(await scanCalls()).toBe(scans);
    } finally {
      await transport.close();
    }
  });

  it('sweeps one worker at a time: nothing is done while another holds the lock', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, timeouts: { store: SHORT_STORE } });
    try {
      const key = await orphan(transport, 'orphan');
      await pastContentDeadlines(redis.client);
      // Another worker's sweep under way.
      await redis.client.set('bull:eml-api:outbox:sweep-lock', 'another-worker', 'PX', 60_000);
      expect(await sweepStoredContent(redis.client, location)).toBe(0);
      expect(await redis.client.exists(key)).toBe(1);
      await redis.client.del('bull:eml-api:outbox:sweep-lock');
      expect(await sweepStoredContent(redis.client, location)).toBe(1);
      expect(await redis.client.get('bull:eml-api:outbox:sweep-lock')).toBeNull();
    } finally {
      await transport.close();
    }
  });

  it('judges each entry once per sweep, however many there are (batches)', async () => {
    const transport = new EmlApiQueueTransport({
      connection: redis.url,
      concurrency: 50,
      timeouts: { store: SHORT_STORE },
    });
    try {
      const transporter = nodemailer.createTransport(transport);
      await Promise.all(Array.from({ length: 450 }, (_, i) => transporter.sendMail(message(`n${i}`))));
      for (let i = 0; i < 30; i++) await orphan(transport, `orphan ${i}`);
      await pastContentDeadlines(redis.client);
      expect(await sweepStoredContent(redis.client, location)).toBe(30);
      expect(await contentKeys()).toHaveLength(450);
    } finally {
      await transport.close();
    }
  });
});

describe('a store that timed out', () => {
  it('discards its content at once, even when the app closes the transport right after', async () => {
    // Writes stalled (CLIENT PAUSE, as during a long fork or a failover) past storeTimeout, then the
    // app shuts down. The writer used to remove the key only after its last write was answered, by
    // when the connection was closing: the whole message stayed in Redis, with no job, until a sweep
    // an hour later. Now the send discards it as it gives up (a tombstone on which the writes still
    // queued fail), a command that goes out before the connection closes.
    const transport = new EmlApiQueueTransport({ connection: redis.url, timeouts: { store: 300 } });
    await transport.verify();
    await redis.client.call('CLIENT', 'PAUSE', '1000', 'WRITE');
    const err = await nodemailer
      .createTransport(transport)
      .sendMail({ ...message('big'), attachments: [{ filename: 'a.bin', content: Buffer.alloc(3 * 1024 * 1024, 1) }] })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: false });
    await transport.close();
    await eventually(async () => (await redis.client.call('CLIENT', 'UNPAUSE')) === 'OK');
    expect(await contentKeys()).toEqual([]);
    expect(await redis.client.keys('bull:eml-api:content:*')).toHaveLength(1); // the tombstone, for an hour
  });

  it('keeps its content when the add landed after all: the job is sent', async () => {
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 500 } });
    try {
      await transport.verify();
      const held = proxy.holdWhen(({ text }) => text.includes('"contentKey"'));
      const sending = nodemailer
        .createTransport(transport)
        .sendMail(message('late but queued'))
        .catch((e: unknown) => e);
      await held;
      expect(await sending).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true });
      // Reconnected, the producer re-sends the add, which lands.
      proxy.cut();
      await eventually(async () => {
        const counts = await transport.queue.getJobCounts('waiting', 'prioritized');
        return (counts.waiting ?? 0) + (counts.prioritized ?? 0) === 1;
      });
      await workers.start();
      await eventually(() => emu.messages().length === 1, { what: 'the message delivered' });
    } finally {
      await transport.close();
    }
  });

  it('is refused when its add lands after its content was freed: no job points at nothing, and queueing again sends it once', async () => {
    // The add waits on a connection that went silent; the producer gives up (ETIMEDOUT, may have been
    // accepted); past its deadline a sweep frees the content, which no job points at; then the network
    // comes back and ioredis sends the add again. It used to make a job whose content was gone, failed
    // by the worker as "missing from Redis", and a sendMail with the key was answered as a duplicate of it.
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 500 } });
    try {
      await transport.verify();
      const held = proxy.holdWhen(({ text }) => text.includes('"contentKey"'));
      const mailer = nodemailer.createTransport(transport);
      const first = mailer.sendMail({ ...message('late'), idempotencyKey: 'late-add' }).catch((e: unknown) => e);
      await held;
      expect(await first).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true });
      await pastContentDeadlines(redis.client);
      expect(await sweepStoredContent(redis.client, location)).toBe(1);
      proxy.cut();
      // Answered after the commands ioredis sends again on the new connection.
      await transport.verify();
      expect(await recordQueue(transport.queue).getJob('late-add')).toBeUndefined();
      const again = (await mailer.sendMail({
        ...message('late'),
        idempotencyKey: 'late-add',
      })) as unknown as OutboxQueuedMessageInfo;
      expect(again.duplicate).toBe(false);
      await workers.start();
      await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
        what: 'the message sent',
      });
      expect(emu.messages().map((m) => m.messageId)).toEqual([again.messageId]);
    } finally {
      await transport.close();
    }
  });
});
