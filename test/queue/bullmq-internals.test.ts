import { once } from 'node:events';
import type { Job } from 'bullmq';
import { Queue, QueueKeys, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  ADD_SCRIPT,
  BULLMQ_KEY_NAMES,
  addCommand,
  blockingClient,
  runBeforeFinish,
  runGuardedAdd,
  queueClient,
} from '../../src/queue/bullmq-internals.js';
import { PAUSE_MARK } from '../../src/queue/outbox-admin.js';
import { jobLockKey, queueKey, resolveQueueLocation } from '../../src/queue/queue-location.js';
import { loadBullmq, requireQueuePeers } from '../../src/queue/redis-connection.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * What the outbox relies on of BullMQ beyond its documented API
 * (bullmq-internals.ts, and the Redis layout its scripts read), checked
 * against the BullMQ installed: each failure names what a BullMQ release
 * changed, so that an upgrade within the peer range (^5 || ^6) that breaks
 * the outbox fails here, loudly. A real redis-server.
 */

const version = requireQueuePeers().bullmq;
const changed = (what: string) => `BullMQ ${version} changed ${what}`;
const location = resolveQueueLocation('internals', 'bull');
let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedisServer();
});

afterAll(async () => {
  await redis?.stop();
});

beforeEach(async () => {
  await redis.client.flushall();
});

/** A queue on a connection of its own. */
async function openQueue(): Promise<{ queue: Queue; client: Redis; close(): Promise<void> }> {
  const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
  const queue = new Queue(location.queueName, { connection, prefix: location.prefix });
  const client = (await queueClient(queue)) as Redis;
  return {
    queue,
    client,
    close: async () => {
      await queue.close();
      connection.disconnect();
    },
  };
}

describe(`BullMQ ${version}, as the outbox uses it`, () => {
  it('names its keys of a queue as the outbox avoids them for job ids', () => {
    const keys = new QueueKeys(location.prefix).getKeys(location.queueName);
    const names = Object.keys(keys).filter((name) => name !== '');
    expect(new Set(names), changed('the names of its keys of a queue (QueueKeys)')).toEqual(BULLMQ_KEY_NAMES);
    for (const name of names) {
      expect(keys[name], changed(`where the key ${name} is`)).toBe(queueKey(location, name));
    }
  });

  it("gives the queue's Redis client, with its add scripts defined on it", async () => {
    const { client, close } = await openQueue();
    try {
      expect(await client.ping(), changed("how a queue's client is reached (queue.client, getBackend().client)")).toBe(
        'PONG',
      );
      const scripts = Object.keys((client as unknown as { scriptsSet?: object }).scriptsSet ?? {});
      for (const kind of ['Standard', 'Prioritized', 'Delayed']) {
        expect(
          scripts.filter((name) => ADD_SCRIPT.test(name) && name.startsWith(`add${kind}Job`)),
          changed(`its add script of a ${kind.toLowerCase()} job (add${kind}Job on the client's scriptsSet)`),
        ).toHaveLength(1);
      }
    } finally {
      await close();
    }
  });

  it("gives a worker's blocking connection, the one that waits for jobs", async () => {
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const worker = new Worker(location.queueName, async () => undefined, { connection, prefix: location.prefix });
    try {
      await worker.waitUntilReady();
      const client = await blockingClient(worker);
      const how = changed(
        "how a worker's blocking connection is reached (blockingConnection.client, getBackend().blockingClient)",
      );
      expect(client?.status, how).toBe('ready');
      const addr = `${client!.stream.localAddress}:${client!.stream.localPort}`;
      await expect
        .poll(
          async () =>
            String(await redis.client.client('LIST'))
              .split('\n')
              .find((line) => line.includes(` addr=${addr} `)),
          {
            message: how,
          },
        )
        .toContain('cmd=bzpopmin');
    } finally {
      await worker.close();
      connection.disconnect();
    }
  });

  it("reuses BullMQ's add command of a queue, name and options, with each job's id and time put in as BullMQ puts them", async () => {
    const { queue, close } = await openQueue();
    const addJob = vi.spyOn(loadBullmq().Job.prototype, 'addJob');
    // A fixed clock, so that BullMQ's own command (its Job takes Date.now()) can be compared byte for byte.
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      const producerOptions = { attempts: 5, backoff: { type: 'custom' }, removeOnComplete: { age: 3600 } };
      for (const opts of [{}, { priority: 3 }, { delay: 60_000 }, producerOptions]) {
        // Ids whose MessagePack headers differ in size (fixstr, str 8, str 16), one of them not ASCII (str 32 and random
        // ids: add-template-attack.test.ts).
        for (const jobId of ['j', 'x'.repeat(40), 'é'.repeat(20), 'w'.repeat(200), 'y'.repeat(300)]) {
          for (const at of [Date.UTC(2026, 10, 29, 12), Date.UTC(2031, 0, 1, 0, 0, 0, 7)]) {
            vi.setSystemTime(at);
            const job = { name: 'eml', data: {}, options: opts, jobId };
            const reused = addCommand(queue, job, '{"n":1}');
            const bullmqs = addCommand(queue, job);
            expect(reused.args, changed(`how it packs an add's arguments (${JSON.stringify(opts)})`)).toEqual(
              bullmqs.args,
            );
            expect(reused.data).toBe('{"n":1}');
          }
        }
      }
      addJob.mockClear();
      for (let i = 0; i < 20; i++)
        addCommand(queue, { name: 'eml', data: {}, options: producerOptions, jobId: `k${i}` }, '{}');
      expect(addJob).not.toHaveBeenCalled();
    } finally {
      vi.useRealTimers();
      addJob.mockRestore();
      await close();
    }
  });

  it('adds a job with one add script, its data as JSON in ARGV[2], run guarded inside a function', async () => {
    // The guard records what it is given, and refuses the job named "refused" as the outbox's guard refuses one;
    // the read after the add answers its own keys and arguments, and what the add left.
    const probe = `
redis.call('RPUSH', '${location.prefix}:probe', ARGV[2])
if string.find(ARGV[2], '"refused"', 1, true) then return -1000 end
`;
    const read = { lua: `return { KEYS[1], ARGV[1], redis.call('EXISTS', KEYS[2]), DATA }`, keys: 2, args: 1 };
    const { queue, client, close } = await openQueue();
    try {
      // The last is given as JSON, made by the caller.
      const forms = [{}, { priority: 3 }, { delay: 60_000 }, {}, {}];
      const answers = [];
      for (const [i, opts] of forms.entries()) {
        const jobId = i === 3 ? 'refused' : `j${i}`;
        const data = i === 3 ? { refused: true } : { n: i };
        const json = i === 4 ? '{"given":4}' : undefined;
        const command = addCommand(queue, { name: 'eml', data, options: opts, jobId }, json);
        expect(command.script, changed('the name of its add scripts')).toMatch(ADD_SCRIPT);
        const { answer } = runGuardedAdd(
          client,
          command,
          probe,
          read,
          [`probe:${i}`, queueKey(location, jobId)],
          [`arg${i}`],
        );
        answers.push(await answer);
      }
      expect(answers, changed('what its add script answers (the job id), or its Lua as a function body')).toEqual([
        ['j0', ['probe:0', 'arg0', 1, '{"n":0}']],
        ['j1', ['probe:1', 'arg1', 1, '{"n":1}']],
        ['j2', ['probe:2', 'arg2', 1, '{"n":2}']],
        [-1000, ['probe:3', 'arg3', 0, '{"refused":true}']],
        ['j4', ['probe:4', 'arg4', 1, '{"given":4}']],
      ]);
      const seen = (await redis.client.lrange(`${location.prefix}:probe`, 0, -1)).map((d) => JSON.parse(d) as object);
      expect(seen, changed("where its add scripts take the job's data (ARGV[2])")).toEqual([
        { n: 0 },
        { n: 1 },
        { n: 2 },
        { refused: true },
        { given: 4 },
      ]);
      expect(await queue.getJob('refused'), changed('whether a negative answer of the guard stops the add')).toBe(
        undefined,
      );
      expect((await queue.getJob('j4'))?.data).toEqual({ given: 4 });
      expect(await queue.getJobCounts('wait', 'prioritized', 'delayed')).toEqual({
        wait: 2,
        prioritized: 1,
        delayed: 1,
      });
      expect((await queue.getJob('j1'))?.opts, changed("how a job's options are stored")).toMatchObject({
        priority: 3,
      });
    } finally {
      await close();
    }
  });

  it("finishes a job with one script on the worker's connection, its hash in KEYS[12], run after the outbox's", async () => {
    const { queue, close } = await openQueue();
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    // The outbox's step reads the job as BullMQ left it before its finish, and answers through `answered`.
    const before = {
      lua: `redis.call('RPUSH', KEYS[1], ARGV[1], redis.call('HGET', KEYS[2], 'finishedOn') or 'active') return 7`,
      keys: 2,
      args: 1,
      ranAlready: 2,
    };
    const answers: unknown[] = [];
    const asked: string[] = [];
    const probe = `${location.prefix}:finish-probe`;
    const worker = new Worker(location.queueName, async (job: Job) => `done ${job.id}`, {
      connection,
      prefix: location.prefix,
      autorun: false,
    });
    try {
      await worker.waitUntilReady();
      const installed = runBeforeFinish(connection, before, (jobKey) => {
        asked.push(jobKey);
        return jobKey.endsWith(':plain')
          ? undefined
          : { keys: [probe, jobKey], args: ['seen'], answered: (a) => answers.push(a), failed: () => undefined };
      });
      expect(installed, changed('the name of its script that finishes a job (moveToFinished)')).toBe(true);
      await queue.add('eml', {}, { jobId: 'finished' });
      await queue.add('eml', {}, { jobId: 'plain' });
      const completed = new Promise<void>((resolve) => {
        let n = 0;
        worker.on('completed', () => ++n === 2 && resolve());
      });
      void worker.run();
      await completed;
      expect(asked, changed("where its finish script takes the job's hash (KEYS[12])")).toEqual([
        queueKey(location, 'finished'),
        queueKey(location, 'plain'),
      ]);
      expect(await redis.client.lrange(probe, 0, -1), changed('its finish script, run as a function body')).toEqual([
        'seen',
        'active',
      ]);
      expect(answers).toEqual([7]);
      for (const id of ['finished', 'plain']) {
        const job = await queue.getJob(id);
        expect(await job?.getState()).toBe('completed');
        expect(job?.returnvalue).toBe(`done ${id}`);
      }
    } finally {
      await worker.close();
      connection.disconnect();
      await close();
    }
  });

  it("keeps a job's data, run times and worker lock where the outbox's scripts read them", async () => {
    const { queue, close } = await openQueue();
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const worker = new Worker(
      location.queueName,
      async (_job: Job, token?: string) => {
        await held;
        // The outbox's scripts check that a worker still holds a job: its token under the job's lock key.
        expect(await redis.client.get(jobLockKey(location, 'locked')), changed("where a job's lock is")).toBe(token);
        throw new Error('failed on purpose');
      },
      { connection, prefix: location.prefix, limiter: { max: 1_000_000, duration: 1000 } },
    );
    try {
      await queue.add('eml', { n: 1 }, { jobId: 'locked' });
      const active = once(worker, 'active');
      await active;
      const failed = once(worker, 'failed');
      release();
      await failed;
      const hash = await redis.client.hgetall(queueKey(location, 'locked'));
      expect(JSON.parse(hash.data!), changed("the field of a job's data")).toEqual({ n: 1 });
      expect(Number(hash.processedOn), changed('the field processedOn')).toBeGreaterThan(0);
      expect(Number(hash.finishedOn), changed('the field finishedOn')).toBeGreaterThan(0);
      expect(await redis.client.zscore(queueKey(location, 'failed'), 'locked'), changed('the failed set')).toBe(
        hash.finishedOn,
      );
      // A 429's pause of every worker: the limiter key, read by the status and cut by maxRetryAfter.
      await worker.rateLimit(60_000);
      const limiter = queueKey(location, 'limiter');
      expect(
        Number(await redis.client.get(limiter)),
        changed("what a worker's rateLimit() writes"),
      ).toBeGreaterThanOrEqual(PAUSE_MARK);
      expect(await redis.client.pttl(limiter)).toBeGreaterThan(50_000);
    } finally {
      release();
      await worker.close(true);
      connection.disconnect();
      await close();
    }
  });

  it('fails loudly, naming its version, when it defines no add script the outbox knows', () => {
    const bare = new Redis(redis.url, { lazyConnect: true });
    try {
      expect(runBeforeFinish(bare, { lua: '', keys: 0, args: 0, ranAlready: 2 }, () => undefined)).toBe(false);
      const command = { script: 'addStandardJob', args: [] };
      expect(() => runGuardedAdd(bare, command, 'return 1', { lua: '', keys: 0, args: 0 }, [], [])).toThrow(
        new RegExp(`^BullMQ ${version.replace(/\./g, '\\.')} defines no add script`),
      );
    } finally {
      bare.disconnect();
    }
  });
});
