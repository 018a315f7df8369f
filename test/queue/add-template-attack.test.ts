import nodemailer from 'nodemailer';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { addCommand, queueClient, type AddCommand } from '../../src/queue/bullmq-internals.js';
import { EmlApiQueueTransport, startOutboxWorker, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { outboxJobId } from '../../src/queue/outbox-job.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * The add command reused per queue, options and job name (bullmq-internals.ts `addCommand` with `json`), attacked:
 * random ids, options and times against BullMQ's own command byte for byte; what the adds leave in Redis against
 * Queue.add's; many producers, duplicate keys and a crash of Redis mid-add, delivered by a worker. Real redis-server.
 */

let redis: RedisServer;
let emu: Emulator;

beforeAll(async () => {
  redis = await startRedisServer({ appendonly: true, appendfsync: 'always' });
  emu = await startEmulator();
});

afterAll(async () => {
  await emu?.close();
  await redis?.stop();
});

/** A seeded generator (mulberry32): the same ids on every run. */
function generator(seed: number): (n: number) => number {
  return (n) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

const rnd = generator(0x9e3779b9);
const PIECES = ['\u00cb', '\u00cb\u0000', 'emlApiTemplateId', 'emlApiTemplateIdCheck', ':', '%', '\0', '12'];
const LENGTHS = [1, 2, 15, 16, 21, 31, 32, 33, 63, 64, 65, 255, 256, 1000, 65535, 65536];

function randomChar(): string {
  const r = rnd(10);
  if (r < 4) return String.fromCharCode(0x21 + rnd(94));
  if (r < 6) return String.fromCharCode(0x80 + rnd(0x700));
  if (r < 7) return String.fromCharCode(0x800 + rnd(0xd000 - 0x800));
  if (r < 8) return String.fromCodePoint(0x10000 + rnd(0xfffff));
  if (r < 9) return String.fromCharCode(0xd800 + rnd(0x800));
  return PIECES[rnd(PIECES.length)]!;
}

function randomId(): string {
  const length = rnd(10) < 7 ? LENGTHS[rnd(LENGTHS.length)]! : 1 + rnd(3000);
  let id = '';
  while (id.length < length) id += randomChar();
  id = id.slice(0, length);
  return rnd(2) ? id : outboxJobId(id);
}

function outcome(build: () => AddCommand): { script: string; args: unknown[] } | { error: string } {
  try {
    const { script, args } = build();
    return { script, args };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

describe('the reused add command, attacked', () => {
  it("is BullMQ's own, or BullMQ's refusal, for random ids, producer options and times", async () => {
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const queue = new Queue('fuzz', { connection, prefix: 'bull' });
    vi.useFakeTimers({ toFake: ['Date'] });
    const optionSets: object[] = [
      {},
      { priority: 3 },
      { priority: 2097151 },
      { delay: 60000 },
      { delay: 1 },
      { lifo: true },
      {
        attempts: 30,
        backoff: { type: 'custom' },
        removeOnComplete: { age: 86400 },
        removeOnFail: { age: 604800 },
        priority: 1,
      },
      { removeOnComplete: 100, removeOnFail: { count: 5 } },
      { removeOnComplete: false },
      { attempts: 3, backoff: { type: 'exponential', delay: 1000, jitter: 0.5 } },
      { timestamp: 1700000000000 },
      { timestamp: 12345 },
      { keepLogs: 10, stackTraceLimit: 3 },
      { priority: 5, lifo: true, delay: 0 },
    ];
    const times = [
      Date.UTC(2026, 10, 29, 12),
      Date.UTC(2031, 0, 1, 0, 0, 0, 7),
      2 ** 32,
      2 ** 32 + 1,
      8.64e15,
      0xffffffff,
      1,
      0,
      -5,
    ];
    const differ: string[] = [];
    try {
      for (const options of optionSets) {
        for (let k = 0; k < 40; k++) {
          const jobId = randomId();
          vi.setSystemTime(times[rnd(times.length)]!);
          const job = { name: 'eml', data: {}, options, jobId };
          const reused = outcome(() => addCommand(queue, job, '{"n":1}'));
          const bullmqs = outcome(() => addCommand(queue, job));
          if (JSON.stringify(reused) !== JSON.stringify(bullmqs)) {
            differ.push(
              `${JSON.stringify(options)} at ${Date.now()}: ${JSON.stringify(jobId.slice(0, 40))} (${jobId.length})`,
            );
          }
        }
      }
    } finally {
      vi.useRealTimers();
      await queue.close();
      connection.disconnect();
    }
    expect(differ).toEqual([]);
  }, 120_000);

  it('leaves in Redis what Queue.add leaves for the same ids, options and times', async () => {
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const reusedQueue = new Queue('same-a', { connection, prefix: 'bull' });
    const bullmqQueue = new Queue('same-b', { connection, prefix: 'bull' });
    const client = (await queueClient(reusedQueue)) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    vi.useFakeTimers({ toFake: ['Date'], now: Date.UTC(2026, 10, 29, 12) });
    try {
      const sets: object[] = [
        {},
        { priority: 7 },
        { delay: 5000 },
        { lifo: true },
        {
          attempts: 30,
          backoff: { type: 'custom' },
          removeOnComplete: { age: 86400 },
          removeOnFail: { age: 604800 },
          priority: 2,
        },
      ];
      let n = 0;
      for (const options of sets) {
        for (const key of ['k1', 'x'.repeat(200), '1234', 'a:b', '%', 'y'.repeat(255), 'emlApiTemplateId', 'wait']) {
          vi.setSystemTime(Date.UTC(2026, 10, 29, 12) + n * 7);
          const jobId = outboxJobId(`${key}-${n}`.slice(0, 255));
          const json = JSON.stringify({ n, s: 'é\u2028\ud800' });
          const command = addCommand(reusedQueue, { name: 'eml', data: {}, options, jobId }, json);
          const args = [...command.args];
          args[args.indexOf('{}')] = Buffer.from(command.data!);
          await client[command.script]!.call(client, ...args);
          await bullmqQueue.add('eml', JSON.parse(json), { ...options, jobId });
          n++;
        }
      }
      const dump = async (name: string) => {
        const out: Record<string, unknown> = {};
        for (const key of (await redis.client.keys(`bull:${name}:*`)).sort()) {
          const type = await redis.client.type(key);
          out[key.slice(`bull:${name}:`.length)] =
            type === 'hash'
              ? await redis.client.hgetall(key)
              : type === 'zset'
                ? await redis.client.zrange(key, 0, -1, 'WITHSCORES')
                : type === 'list'
                  ? await redis.client.lrange(key, 0, -1)
                  : type === 'stream'
                    ? (await redis.client.xrange(key, '-', '+')).map(([, fields]) => fields)
                    : await redis.client.get(key);
        }
        return JSON.parse(JSON.stringify(out).replaceAll(`bull:${name}:`, 'bull:Q:')) as unknown;
      };
      expect(await dump('same-a')).toEqual(await dump('same-b'));
    } finally {
      vi.useRealTimers();
      await reusedQueue.close();
      await bullmqQueue.close();
      connection.disconnect();
    }
  });

  it('delivers each acknowledged send once, duplicates told, priority kept, across producers and a crash of Redis', async () => {
    const transports = Array.from(
      { length: 6 },
      (_, p) =>
        new EmlApiQueueTransport({
          connection: redis.url,
          queueName: 'e2e',
          concurrency: 20,
          jobOptions: p % 2 ? { priority: 5 } : { priority: 1, attempts: 40 },
        }),
    );
    const news = new Map<string, { text: string; high: boolean }>();
    let duplicates = 0;
    const failed: string[] = [];
    const prefixes = ['k', 'emlApiTemplateId', 'x'.repeat(240), '%:%', '12'];
    const sends: Promise<void>[] = [];
    for (let i = 0; i < 200; i++) {
      // Two sends of each key, through two producers.
      const key = `${prefixes[Math.floor(i / 2) % 5]}-${Math.floor(i / 2)}`.slice(0, 255);
      const transport = transports[i % transports.length]!;
      sends.push(
        (async () => {
          try {
            const info = (await nodemailer.createTransport(transport).sendMail({
              from: 'a@example.test',
              to: `t${i}@example.test`,
              text: `m${i}`,
              idempotencyKey: key,
            })) as unknown as OutboxQueuedMessageInfo;
            if (info.duplicate) duplicates++;
            else if (news.has(key)) failed.push(`two new sends of ${key}`);
            else news.set(key, { text: `m${i}`, high: i % 2 === 0 });
          } catch (err) {
            failed.push(`${i}: ${(err as Error).message}`);
          }
        })(),
      );
      if (i === 100) await redis.restart('crash');
    }
    await Promise.all(sends);
    expect(failed).toEqual([]);
    expect([news.size, duplicates]).toEqual([100, 100]);
    const queue = transports[0]!.queue;
    for (const [key, { text }] of news) {
      const job = await queue.getJob(outboxJobId(key));
      expect(job?.id).toBe(outboxJobId(key));
      expect(Math.abs(job!.timestamp - Date.now())).toBeLessThan(120_000);
      expect(job!.data.idempotencyKey).toBe(key);
      void text;
    }
    emu.reset();
    const worker = await startOutboxWorker({
      connection: redis.url,
      queueName: 'e2e',
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      cleanupInterval: 0,
      concurrency: 1,
    });
    try {
      await eventually(() => emu.messages().length >= 100, { what: '100 delivered' });
      await new Promise((r) => setTimeout(r, 300));
      const texts = emu.messages().map((m) => String((m as unknown as { text?: string }).text).trim());
      expect(texts.slice().sort()).toEqual([...news.values()].map((n) => n.text).sort());
      const byText = new Map([...news.values()].map((n) => [n.text, n.high]));
      const high = texts.map((t) => byText.get(t));
      expect(high.lastIndexOf(true)).toBeLessThan(high.indexOf(false) === -1 ? Infinity : high.indexOf(false));
    } finally {
      await worker.close();
      await Promise.all(transports.map((t) => t.close()));
    }
  }, 120_000);
});
