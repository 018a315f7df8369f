import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, purgeOutbox, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually, inProcessWorkers, pastContentDeadlines } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * Removing queued mail for good (review F11, attack/12-obliterate-leaves-mail.ts):
 * `queue.obliterate()` removed BullMQ's keys and left every stored message
 * (password-reset links, in clear) and the outbox's own keys, contradicting
 * "leaves no key of the outbox behind"; remove, clean and drain left the
 * messages for the sweeper's grace. `purgeOutbox()` and `eml-api queue purge`
 * remove the jobs and their messages now. And the sweeper's once-a-day look
 * for content written before the index ran on every worker start (review
 * F13 b): its marker is now in Redis. Real redis-server, the emulator.
 */

let redis: RedisServer;
let emu: Emulator;
let holding: SlowAnswerProxy;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({
  connection: redis.url,
  apiKey: emu.apiKey,
  baseUrl: emu.url,
  encryption: { keys: { k1: K1 } },
}));
const env = () => ({ REDIS_URL: redis.url });
const K1 = randomBytes(32);

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
  holding = await startSlowAnswerProxy(emu.url, 0, { requestDelayMs: 600_000 });
});

beforeEach(async () => {
  await redis.client.flushall();
  transport = new EmlApiQueueTransport({
    connection: redis.url,
    encryption: { keyId: 'k1', keys: { k1: K1 } },
  });
});

afterEach(async () => {
  await workers.closeAll();
  await transport.close();
});

afterAll(async () => {
  await holding?.close();
  await emu?.close();
  await redis?.stop();
});

/** Queues password resets; returns their infos. */
async function resets(n: number): Promise<OutboxQueuedMessageInfo[]> {
  const mailer = nodemailer.createTransport(transport);
  const infos = [];
  for (let i = 0; i < n; i++) {
    infos.push(
      (await mailer.sendMail({
        from: 'a@example.test',
        to: `u${i}@example.test`,
        subject: 'reset',
        text: `https://example.test/reset?token=SECRET${i}`,
        // Over the 64 KiB kept inline in the job: stored under a content key of its own.
        attachments: [{ filename: 'terms.txt', content: 'terms and conditions\n'.repeat(4000) }],
        idempotencyKey: `reset-${i}`,
      })) as unknown as OutboxQueuedMessageInfo,
    );
  }
  return infos;
}

const queueKeys = async () => (await redis.client.keys('bull:eml-api:*')).sort();

describe('queue.obliterate()', () => {
  it('leaves the stored messages and the outbox keys (BullMQ knows nothing of them): purge exists for that', async () => {
    await resets(2);
    await transport.queue.obliterate({ force: true });
    const left = await queueKeys();
    expect(left.filter((k) => k.startsWith('bull:eml-api:content:'))).toHaveLength(2);
    expect(left).toContain('bull:eml-api:outbox:content-index');
  });
});

describe('purgeOutbox', () => {
  it('removes the whole queue: every job, every stored message, every key of the outbox', async () => {
    await resets(3);
    // Content no job points at (a producer that died between storing and queueing) goes too.
    const orphan = 'bull:eml-api:content:gone:1795453916326-e6f0dafa';
    await redis.client.set(orphan, 'orphaned message');
    // A 429's pause of every worker (BullMQ's rate limit key, which its obliterate leaves), a parked job.
    await redis.client.set('bull:eml-api:limiter', String(Number.MAX_SAFE_INTEGER), 'PX', 600_000);
    await redis.client.zadd('bull:eml-api:outbox:parked', 1, 'reset-0');
    const result = await purgeOutbox(transport.queue);
    expect(result).toEqual({ jobs: 3, content: 4, busy: [], notFound: [] });
    expect(await queueKeys()).toEqual([]);
  });

  it('removes named jobs with their messages, and only those', async () => {
    const infos = await resets(3);
    const keep = (await recordQueue(transport.queue).getJob(infos[2]!.queueId))!.data.contentKey;
    const result = await purgeOutbox(transport.queue, { ids: ['reset-0', 'reset-1', 'nope'] });
    expect(result).toEqual({ jobs: 2, content: 2, busy: [], notFound: ['nope'] });
    expect((await queueKeys()).filter((k) => k.includes(':content:'))).toEqual([keep]);
    expect(await recordQueue(transport.queue).getJob('reset-0')).toBeUndefined();
    expect(await transport.queue.count()).toBe(1);
  });

  it('leaves the queue as it is while a job is being sent, unless forced', async () => {
    await resets(2);
    await workers.start({ baseUrl: holding.url, concurrency: 1 });
    await eventually(() => holding.heldRequests === 1, { what: 'a send in flight' });
    const held = await purgeOutbox(transport.queue);
    expect(held.busy).toHaveLength(1);
    expect(held.jobs).toBe(0);
    expect(await transport.queue.getJobCounts('active', 'prioritized')).toEqual({ active: 1, prioritized: 1 });
    expect((await purgeOutbox(transport.queue, { force: true })).jobs).toBe(2);
    expect((await queueKeys()).filter((k) => k.includes(':content:'))).toEqual([]);
  });
});

describe('purgeOutbox and the sweeper beside queues whose prefix nests in this one', () => {
  it("touch this queue's keys only: other apps' queues under the prefix bull:x (named content and outbox) keep theirs", async () => {
    // App A: prefix bull, queue x (keys bull:x:*). Apps B and C: prefix bull:x, queues content and
    // outbox: their keys start bull:x:content: and bull:x:outbox:, where A keeps its messages and its own keys.
    const b = new EmlApiQueueTransport({ connection: redis.url, prefix: 'bull:x', queueName: 'content' });
    const c = new EmlApiQueueTransport({ connection: redis.url, prefix: 'bull:x', queueName: 'outbox' });
    let a: EmlApiQueueTransport | undefined;
    try {
      const big = (to: string) => ({
        from: 'a@example.test',
        to,
        text: to,
        attachments: [{ filename: 'pad.bin', content: Buffer.alloc(80_000, 1) }],
      });
      await nodemailer.createTransport(b).sendMail(big('b@example.test'));
      await nodemailer.createTransport(c).sendMail(big('c@example.test'));
      const others = await redis.client.keys('bull:x:*');
      a = new EmlApiQueueTransport({ connection: redis.url, queueName: 'x', timeouts: { store: 300 } });
      await nodemailer.createTransport(a).sendMail(big('a@example.test'));
      // A's workers sweep, then A is purged.
      await pastContentDeadlines(redis.client, 'bull:x:outbox:content-index');
      await sweepStoredContent(redis.client, resolveQueueLocation('x', 'bull'));
      expect(await purgeOutbox(a.queue)).toMatchObject({ jobs: 1, content: 1 });
      const gone = [];
      for (const key of others) if ((await redis.client.exists(key)) === 0) gone.push(key);
      expect(gone).toEqual([]);
      await workers.start({ prefix: 'bull:x', queueName: 'content', encryption: undefined });
      await workers.start({ prefix: 'bull:x', queueName: 'outbox', encryption: undefined });
      await eventually(() => emu.messages().length === 2, { what: "B's and C's messages delivered" });
    } finally {
      await Promise.all([a?.close(), b.close(), c.close()]);
    }
  });
});

describe('eml-api queue purge', () => {
  it('purges named jobs, or the whole queue with --all, and says what it removed', async () => {
    await resets(3);
    const one = await runCliCapturing(['queue', 'purge', 'reset-0', 'missing'], { env: env() });
    expect(one).toMatchObject({ code: 1, stdout: 'Removed 1 job and 1 stored message\n' });
    expect(one.stderr).toContain('missing: no such job');
    const all = await runCliCapturing(['queue', 'purge', '--all'], { env: env() });
    expect(all).toMatchObject({ code: 0, stdout: 'Purged queue "eml-api": removed 2 jobs and 2 stored messages\n' });
    expect(await queueKeys()).toEqual([]);
    expect(await runCliCapturing(['queue', 'purge'], { env: env() })).toMatchObject({ code: 2 });
    expect(await runCliCapturing(['queue', 'purge', '--all', 'x'], { env: env() })).toMatchObject({ code: 2 });
    expect(await runCliCapturing(['queue', 'purge', 'x', '--force'], { env: env() })).toMatchObject({ code: 2 });
  });
});
