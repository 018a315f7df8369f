import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, startOutboxWorker } from '../../src/queue/index.js';
// The class itself, as the CLI uses it: only it can close a worker whose start never finishes (Redis down).
import { OutboxWorker } from '../../src/queue/eml-api-worker.js';
import { blockingClient, queueClient } from '../../src/queue/bullmq-internals.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { capturingLogger } from '../helpers/logger.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { startRedisProxy } from '../helpers/redis-proxy.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
// The bounds on waiting for a Redis that does not answer, shortened here and in the worker processes.
import { SHORT_WAITS, useShortWaits } from '../helpers/short-waits.js';
import { nodeArgs } from '../helpers/compiled.js';

/**
 * close() of the producer and of workers, and stopping `eml-api worker`,
 * when Redis is down or stops answering (a network partition: the socket
 * stays open, nothing comes back). They used to wait for ever for Redis to
 * answer QUIT, or for BullMQ to connect: a process that could not be stopped
 * but with SIGKILL. Real redis-server, frozen with SIGSTOP; the outbox's
 * bounds on those waits shortened (test/helpers/short-waits.ts). A graceful
 * close also waited for ever when BullMQ's blocking connection was between
 * two tries to reconnect as Redis came back (a restart).
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** A port nothing listens on. */
const NOWHERE = 'redis://127.0.0.1:1';

/** `eml-api worker` in a child process, with the shortened waits; `output` gathers stdout and stderr. */
function workerProcess(flags: string[], env: Record<string, string>) {
  const child = spawn(
    process.execPath,
    nodeArgs(['--import', 'tsx', ...shortWaits.nodeArgs, 'src/cli/main.ts', 'worker', ...flags]),
    { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const worker = { child, output: '', exited: new Promise<number | null>((resolve) => child.once('exit', resolve)) };
  child.stdout.on('data', (d: Buffer) => (worker.output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (worker.output += d.toString()));
  return worker;
}

let redis: RedisServer;
let emu: Emulator;
let service: FakeService;
let frozen: number | undefined;
const shortWaits = useShortWaits();

beforeAll(async () => {
  [redis, emu, service] = await Promise.all([startRedisServer(), startEmulator(), startFakeService()]);
});

afterEach(() => {
  if (frozen !== undefined) process.kill(frozen, 'SIGCONT');
  frozen = undefined;
});

afterAll(async () => {
  await Promise.all([emu?.close(), service?.close()]);
  await redis?.stop();
});

/** Stops the Redis server answering, without closing its connections. */
/** A worker started on this file's Redis, its errors (Redis going away) expected. */
async function startedWorker() {
  const worker = await startOutboxWorker({
    connection: redis.url,
    apiKey: emu.apiKey,
    baseUrl: emu.url,
    cleanupInterval: 0,
  });
  worker.on('error', () => undefined);
  return worker;
}

async function freezeRedis(): Promise<void> {
  const info = await redis.client.info('server');
  frozen = Number(/process_id:(\d+)/.exec(info)![1]);
  process.kill(frozen, 'SIGSTOP');
}

/** How `promise` ended within `ms`: 'resolved', 'rejected', or 'pending'. */
async function within(promise: Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    promise.then(
      () => 'resolved',
      () => 'rejected',
    ),
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('pending'), ms))),
  ]);
  clearTimeout(timer);
  return outcome;
}

describe('close() when Redis does not answer', () => {
  it('the producer closes, its sends failed with ETIMEDOUT', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url, timeouts: { store: 1000 } });
    await transport.verify();
    await freezeRedis();
    const err = await nodemailer
      .createTransport(transport)
      .sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ETIMEDOUT' });
    expect(await within(transport.close(), 10_000)).toBe('resolved');
  });

  it('eml-api worker stops on a second SIGTERM while a send waits for Redis to record it', async () => {
    await redis.client.flushall();
    const transport = new EmlApiQueueTransport({ connection: redis.url });
    await nodemailer.createTransport(transport).sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
    await transport.close();
    // The key check gets a 400 (the key may send), the queued send is held.
    service.script([{ status: 400, body: { error: { code: 'invalid_request', message: 'no mail' } } }], 'hold');
    const worker = workerProcess([], {
      REDIS_URL: redis.url,
      EML_API_URL: service.url,
      EML_API_KEY: 'k_0123456789abcdef',
    });
    const { child, exited } = worker;
    try {
      await eventually(() => service.held >= 1, { what: 'the send held at the service' });
      await freezeRedis();
      child.kill('SIGTERM');
      service.releaseAll(); // sent: the worker now waits for Redis to record it, which it cannot
      expect(await within(exited, 2_000)).toBe('pending');
      child.kill('SIGTERM');
      await eventually(() => worker.output.includes('Worker stopped'), { timeout: 20_000, what: 'Worker stopped' });
      // Stopped, it leaves no socket to the frozen Redis open to keep the process alive: with ioredis's own wait for
      // a silent server (2 s a socket) it lived about 4 s more; 3 s leaves room for a loaded machine.
      expect(await within(exited, 3_000)).toBe('resolved');
      expect(await exited, worker.output).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
  }, 40_000);

  it('a worker closes', async () => {
    const worker = await startedWorker();
    await freezeRedis();
    expect(await within(worker.close(), 15_000)).toBe('resolved');
  });
});

describe('close() as Redis comes back', () => {
  it("a worker closes gracefully while BullMQ's blocking connection waits to reconnect", async () => {
    const worker = await startedWorker();
    // As after a restart of Redis: the worker's own connection is back, the blocking one waits for its retry timer.
    const blocking = (await blockingClient(worker.worker))!;
    const reconnecting = new Promise((resolve) => blocking.once('reconnecting', resolve));
    await redis.client.client('KILL', 'ADDR', `${blocking.stream.localAddress}:${blocking.stream.localPort}`);
    await reconnecting;
    expect(blocking.status).toBe('reconnecting');
    expect(await within(worker.close(), 15_000)).toBe('resolved');
  });

  it("a worker closes gracefully while BullMQ's blocking connection reconnects to a Redis that does not answer", async () => {
    const worker = await startedWorker();
    const blocking = (await blockingClient(worker.worker))!;
    const reconnecting = new Promise((resolve) => blocking.once('reconnecting', resolve));
    await redis.client.client('KILL', 'ADDR', `${blocking.stream.localAddress}:${blocking.stream.localPort}`);
    await reconnecting;
    // Its socket opens (the kernel accepts for the frozen server), but it is never ready.
    const connected = new Promise((resolve) => blocking.once('connect', resolve));
    await freezeRedis();
    await connected;
    expect(blocking.status).toBe('connect');
    expect(await within(worker.close(), 15_000)).toBe('resolved');
  });
});

/** Queues two messages (Redis empty first), and starts a worker through `url` that sends one at a time. */
async function twoQueuedAndAWorker(url: string): Promise<{ transport: EmlApiQueueTransport; worker: OutboxWorker }> {
  await redis.client.flushall();
  const transport = new EmlApiQueueTransport({ connection: redis.url });
  const mailer = nodemailer.createTransport(transport);
  for (const to of ['ann@example.test', 'bob@example.test']) {
    await mailer.sendMail({ from: 'shop@example.test', to, subject: 'Close', text: 'x' });
  }
  const worker = new OutboxWorker({ connection: url, apiKey: emu.apiKey, baseUrl: emu.url, concurrency: 1 });
  worker.on('error', () => undefined);
  return { transport, worker };
}

/** The states of the queue's jobs. */
async function jobStates(transport: EmlApiQueueTransport): Promise<string[]> {
  const jobs = await transport.queue.getJobs(['active', 'wait', 'completed']);
  return Promise.all(jobs.map((job) => job.getState()));
}

describe('close() while Redis is slow', () => {
  it('waits for BullMQ to record a send, and leaves the job its finish took next in no dead lock', async () => {
    const proxy = await startRedisHoldProxy(redis.port);
    // The worker's finish of its first send (which also takes the next job) waits in the network.
    proxy.holdNext(/:completed/);
    const { transport, worker } = await twoQueuedAndAWorker(proxy.url);
    try {
      await worker.started;
      await eventually(() => proxy.held > 0, { what: 'the finish held' });
      const closing = worker.close();
      // Longer than a close waits for a Redis that does not answer when nothing of its own is in flight.
      expect(await within(closing, 3 * SHORT_WAITS.quit)).toBe('pending');
      proxy.release();
      expect(await within(closing, 15_000)).toBe('resolved');
      const states = await jobStates(transport);
      expect(states).toContain('completed');
      expect(states).not.toContain('active');
    } finally {
      await transport.close();
      await proxy.close();
    }
  });
});

describe('close() when Redis is down', () => {
  it('waits for Redis to record a send whose finish was on its way: nothing is left active', async () => {
    const proxy = await startRedisProxy(redis.port);
    const held = proxy.holdWhen(({ text }) => text.includes(':completed'));
    const { transport, worker } = await twoQueuedAndAWorker(proxy.url);
    try {
      await worker.started;
      await held;
      // The first send's finish is on its way when Redis becomes unreachable: the worker has no send running.
      await proxy.down();
      const connection = worker.worker.opts.connection as { status: string };
      await eventually(() => connection.status !== 'ready', { what: 'the worker losing Redis' });
      expect(worker.activeJobs).toBe(0);
      const closing = worker.close();
      expect(await within(closing, 1_000)).toBe('pending');
      await proxy.up();
      expect(await within(closing, 15_000)).toBe('resolved');
      const states = await jobStates(transport);
      expect(states).toContain('completed');
      expect(states).not.toContain('active');
    } finally {
      await transport.close();
      await proxy.close();
    }
  });

  it('the producer closed between two tries to reconnect: the commands queued meanwhile fail at once, they do not wait for their timeout (it would hold the process that long)', async () => {
    const proxy = await startRedisProxy(redis.port);
    // The command timeout is the store timeout: long enough that only a failure at close settles the command.
    const transport = new EmlApiQueueTransport({ connection: proxy.url, timeouts: { store: 600_000 } });
    try {
      await transport.verify();
      const client = await queueClient(transport.queue);
      await proxy.down();
      await eventually(() => client.status === 'reconnecting', { what: 'the producer waiting to reconnect' });
      // As a write's clean-up sent as Redis went away, which no caller waits for.
      const queued = client.ping();
      await transport.close();
      await expect(queued).rejects.toThrow(/Connection is closed/);
    } finally {
      await proxy.close();
    }
  });

  it('a worker that never connected closes, gracefully or forced', async () => {
    for (const abort of [false, true]) {
      const logger = capturingLogger();
      const worker = new OutboxWorker({ connection: NOWHERE, apiKey: emu.apiKey, baseUrl: emu.url, logger });
      worker.on('error', () => undefined);
      await eventually(() => logger.messages('debug').includes('Redis error'), { what: 'a failed try to reach Redis' });
      expect({ abort, closed: await within(worker.close({ abort }), 15_000) }).toEqual({ abort, closed: 'resolved' });
    }
  });

  it('startOutboxWorker, still waiting for Redis, stops when its signal is aborted (EABORT) and leaves nothing open', async () => {
    const stop = new AbortController();
    const starting = startOutboxWorker(
      { connection: NOWHERE, apiKey: emu.apiKey, baseUrl: emu.url },
      { signal: stop.signal },
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    stop.abort();
    await expect(within(starting, 15_000)).resolves.toBe('rejected');
    await expect(starting).rejects.toMatchObject({ code: 'EABORT' });
    await expect(
      startOutboxWorker({ connection: NOWHERE, apiKey: emu.apiKey, baseUrl: emu.url }, { signal: stop.signal }),
    ).rejects.toThrow();
  });

  it.each([
    ['giving up after timeouts.connect', []],
    ['waiting for it (--wait-for-redis)', ['--wait-for-redis']],
  ])(
    'eml-api worker %s stops on SIGTERM at once, and says nothing more',
    async (_what, flags) => {
      const worker = workerProcess(flags, { REDIS_URL: NOWHERE, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey });
      const { child, exited } = worker;
      const output = () => worker.output;
      try {
        // Started: it reports that it cannot reach Redis.
        await eventually(() => output().includes('ECONNREFUSED'), { what: 'ECONNREFUSED in its output' });
        child.kill('SIGTERM');
        expect(await within(exited, 15_000)).toBe('resolved');
        expect(await exited).toBe(0);
        expect(output()).toMatch(/Worker stopped: 0 sent, 0 failed/);
        // Waiting for Redis ends with the worker: no warning about it once stopped.
        expect(output().slice(output().indexOf('Worker stopped'))).not.toContain('Cannot reach Redis');
      } finally {
        child.kill('SIGKILL');
      }
    },
    40_000,
  );
});
