import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import {
  startOutboxWorker,
  type OutboxWorker,
  type OutboxWorkerOptions,
  type OutboxJobData,
} from '../../src/queue/index.js';
import { eventually } from './async.js';
import type { OutboxJobRecord } from '../../src/queue/outbox-job.js';
import { compiledPath, nodeArgs } from './compiled.js';

/**
 * Helpers of the outbox tests (test/queue/): worker processes, reading the
 * whole of Redis, and waiting for queue states (with the suite's one polling helper).
 */
export { eventually };

const WORKER_PROCESS = fileURLToPath(new URL('../queue/worker-process.ts', import.meta.url));
const SKEWED_CLOCK = fileURLToPath(new URL('./skewed-clock.mjs', import.meta.url));

/** A worker running in a child process (test/queue/worker-process.ts). */
export interface WorkerProcess {
  readonly child: ChildProcess;
  /** Job ids this process reported sent. */
  readonly sent: string[];
  /** The warnings it reported (its `'warning'` events). */
  readonly warnings: string[];
  /** Sets how far off its clock runs from now on (started with `clockSkewMs`). */
  skewClock(ms: number): void;
  /** Plays a suspend of its machine that long: its monotonic clock misses it (started with `clockSkewMs`). */
  suspend(ms: number): void;
  /** Stops it with SIGTERM (graceful close) and resolves with its exit code. */
  stop(): Promise<number | null>;
  /** Kills it with SIGKILL: no close, no cleanup, its jobs left active with their locks. */
  kill(): Promise<void>;
}

/**
 * Starts a worker process and resolves once it is connected to Redis.
 * @param process `script`: another worker script (default worker-process.ts); `clockSkewMs`: its clock runs
 *   that far off (test/helpers/skewed-clock.mjs)
 */
export async function startWorkerProcess(
  options: OutboxWorkerOptions,
  { script = WORKER_PROCESS, clockSkewMs }: { script?: string; clockSkewMs?: number } = {},
): Promise<WorkerProcess> {
  const skewed = clockSkewMs === undefined ? [] : ['--import', SKEWED_CLOCK];
  const child = fork(compiledPath(script), [JSON.stringify(options)], {
    execArgv: nodeArgs(['--import', 'tsx', ...skewed]),
    env: { ...process.env, ...(clockSkewMs === undefined ? {} : { CLOCK_SKEW_MS: String(clockSkewMs) }) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const sent: string[] = [];
  const warnings: string[] = [];
  const ready = new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`worker process exited (${code}) before it was ready`)));
    child.on('message', (m: { event: string; jobId?: string; message?: string; code?: string }) => {
      if (m.event === 'ready') resolve();
      if (m.event === 'sent') sent.push(m.jobId!);
      if (m.event === 'warning') warnings.push(m.message!);
      if (m.event === 'refused') reject(Object.assign(new Error(m.message), { code: m.code }));
    });
  });
  await ready;
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  return {
    child,
    sent,
    warnings,
    skewClock(ms) {
      child.send({ clockSkewMs: ms });
    },
    suspend(ms) {
      child.send({ suspendMs: ms });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      return exited;
    },
    async kill() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Every key and value in Redis, as text: to check what is (and is not) stored. */
export async function dumpRedis(redis: Redis): Promise<string> {
  const keys = await redis.keys('*');
  const parts: string[] = [];
  for (const key of keys.sort()) {
    const type = await redis.type(key);
    let value: unknown;
    if (type === 'string') value = (await redis.getBuffer(key))?.toString('latin1');
    else if (type === 'hash') value = await redis.hgetall(key);
    else if (type === 'list') value = await redis.lrange(key, 0, -1);
    else if (type === 'set') value = await redis.smembers(key);
    else if (type === 'zset') value = await redis.zrange(key, 0, -1, 'WITHSCORES');
    else if (type === 'stream') value = await redis.xrange(key, '-', '+');
    parts.push(`${key} (${type}): ${JSON.stringify(value)}`);
  }
  return parts.join('\n');
}

/**
 * Resolves once Redis's clock is past every deadline in a queue's content index (each stored message's
 * producer deadline): from then on a sweep frees the content whose job is gone.
 * @param index the index's key @default 'bull:eml-api:outbox:content-index'
 */
export async function pastContentDeadlines(
  redis: Pick<Redis, 'zrange' | 'time'>,
  index = 'bull:eml-api:outbox:content-index',
): Promise<void> {
  const last = await redis.zrange(index, -1, -1, 'WITHSCORES');
  const deadline = Number(last[1] ?? 0);
  await eventually(
    async () => {
      const [s, us] = await redis.time();
      return Number(s) * 1000 + Math.floor(Number(us) / 1000) > deadline;
    },
    { what: 'the stored messages past their deadlines' },
  );
}

/** Workers started in this process by a test file, closed together after each test. */
export interface InProcessWorkers {
  /** Starts a worker with the file's settings and `options` over them. */
  start(options?: Partial<OutboxWorkerOptions>): Promise<OutboxWorker>;
  /** Force-closes every worker started since the last call. */
  closeAll(): Promise<void>;
}

/**
 * Workers in this process with the test file's settings: no content sweep
 * (the tests count what Redis holds), the rest from `settings()`.
 * @example
 * const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));
 * afterEach(() => workers.closeAll());
 * const w = await workers.start({ concurrency: 2 });
 */
export function inProcessWorkers(settings: () => OutboxWorkerOptions): InProcessWorkers {
  let started: OutboxWorker[] = [];
  return {
    async start(options = {}) {
      const worker = await startOutboxWorker({ cleanupInterval: 0, ...settings(), ...options });
      started.push(worker);
      return worker;
    },
    async closeAll() {
      const closing = started;
      started = [];
      await Promise.all(closing.map((w) => w.close({ abort: true })));
    },
  };
}

/**
 * The bytes a job's content holds as stored (kept in the job when small, else under its key), or null
 * when they are gone.
 * @example
 * const eml = await storedContent(redis.client, job.data);
 */
export async function storedContent(redis: Pick<Redis, 'getBuffer'>, data: OutboxJobData): Promise<Buffer | null> {
  const { inline, contentKey } = data as OutboxJobRecord;
  if (inline !== undefined) return Buffer.from(inline, 'base64');
  return redis.getBuffer(contentKey);
}

/**
 * Whether a job's content is still stored (in the job, or under its key).
 * @example
 * expect(await hasStoredContent(redis.client, job.data)).toBe(true);
 */
export async function hasStoredContent(redis: Pick<Redis, 'exists'>, data: OutboxJobData): Promise<boolean> {
  const { inline, contentKey } = data as OutboxJobRecord;
  return inline !== undefined || (await redis.exists(contentKey)) === 1;
}

/**
 * Writes `count` failed jobs of the outbox straight into Redis, as BullMQ and
 * a worker leave them (the job's hash with its data, its error, its content
 * kept in the job; its id in the failed set), many times faster than failing
 * real sends: for the tests and benchmarks of what reading the queue costs.
 * @param options `contentBytes`: the content each keeps in its data; `parkedEvery`: every n-th has
 *   `lastError.parked` (0: none) @default 0; `prefix` @default 'bull'; `queueName` @default 'eml-api'
 * @returns the job ids
 */
export async function addFailedJobs(
  redis: Redis,
  {
    count,
    contentBytes,
    parkedEvery = 0,
    prefix = 'bull',
    queueName = 'eml-api',
  }: { count: number; contentBytes: number; parkedEvery?: number; prefix?: string; queueName?: string },
): Promise<string[]> {
  const base = `${prefix}:${queueName}:`;
  const inline = randomBytes(contentBytes).toString('base64');
  const ids: string[] = [];
  const now = Date.now();
  for (let start = 0; start < count; start += 500) {
    const batch = redis.pipeline();
    for (let i = start; i < Math.min(count, start + 500); i++) {
      const id = `failed-${i}`;
      ids.push(id);
      const at = now - (count - i);
      const parked = parkedEvery > 0 && i % parkedEvery === 0;
      const data = {
        kind: 'eml',
        contentKey: `${base}content:${id}:${at}-00000000`,
        size: contentBytes,
        inline,
        sha256: '0'.repeat(64),
        envelope: { from: 'shop@example.test', to: [`c${i}@example.test`] },
        messageId: `<${id}@example.test>`,
        idempotencyKey: id,
        lastError: {
          code: 'EAUTH',
          message: 'POST /v1/send/eml failed: the service refused the API key (401 invalid_api_key)',
          responseCode: 401,
          permanent: true,
          attempt: 1,
          at: new Date(at).toISOString(),
          ...(parked ? { parked: 'idempotency-window' } : {}),
        },
      };
      batch.hset(`${base}${id}`, {
        name: 'eml',
        data: JSON.stringify(data),
        opts: JSON.stringify({ attempts: 30 }),
        timestamp: String(at - 1000),
        delay: '0',
        priority: '1',
        processedOn: String(at - 10),
        finishedOn: String(at),
        atm: '1',
        ats: '1',
        failedReason: data.lastError.message,
      });
      batch.zadd(`${base}failed`, at, id);
    }
    await batch.exec();
  }
  return ids;
}
