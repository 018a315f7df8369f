import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxWorkerOptions } from '../../src/queue/index.js';
import { RedisClock } from '../../src/queue/redis-clock.js';
import { eventually, inProcessWorkers, startWorkerProcess, type WorkerProcess } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * Workers on machines whose clocks disagree (review F9, attack/04-clock-skew.ts).
 * `resendUntil` was written with one worker's clock and read with another's:
 * a worker behind sent a possibly-accepted message again after the
 * service's idempotency window had passed, and it was delivered twice. Now
 * every time a worker writes on a job or compares with one is Redis's
 * (`TIME`, tracked against the worker's monotonic clock). A worker more than
 * a minute off does not run at all (test/queue/worker-clock.test.ts): these
 * workers are 50 s off. Real redis-server, real worker processes whose
 * clocks are skewed (test/helpers/skewed-clock.mjs), the emulator, whose
 * clock the test moves to make 24.5 hours pass. A producer's clock (BullMQ's
 * `timestamp` on each job) is not checked: the outbox stamps each job with
 * Redis's time as it is added, and bounds windows with that.
 */

const H = 3_600_000;
let redis: RedisServer;
let emu: Emulator;
let shift = 0;
let slow: SlowAnswerProxy;
let holding: SlowAnswerProxy;
let transport: EmlApiQueueTransport;
const processes: WorkerProcess[] = [];
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: slow.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([
    startRedisServer({ appendonly: true }),
    startEmulator({ now: () => new Date(Date.now() + shift) }),
  ]);
  // Passes each request on at once and holds its answer 5 s: delivered, but the worker times out first.
  slow = await startSlowAnswerProxy(emu.url, 5_000);
  // Holds each request before the service sees it: a worker killed then has delivered nothing.
  holding = await startSlowAnswerProxy(emu.url, 0, { requestDelayMs: 600_000 });
  transport = new EmlApiQueueTransport({ connection: redis.url, retry: { attempts: 5, delay: 300, jitter: 0 } });
});

afterAll(async () => {
  await Promise.all(processes.map((p) => p.kill()));
  await transport?.close();
  await slow?.close();
  await holding?.close();
  await emu?.close();
  await redis?.stop();
});

beforeEach(async () => {
  shift = 0;
  emu.reset();
  await transport.queue.obliterate({ force: true });
});

afterEach(async () => {
  await workers.closeAll();
  await Promise.all(processes.splice(0).map((p) => p.kill()));
});

const invoices = () => emu.messages().filter((m) => m.subject === 'invoice').length;
const redisNow = async () => {
  const [s, us] = await redis.client.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};

/** A worker process whose clock runs `skewMs` off. */
async function skewedWorker(skewMs: number, more: Partial<OutboxWorkerOptions> = {}): Promise<WorkerProcess> {
  const options = { connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url, cleanupInterval: 0, ...more };
  const worker = await startWorkerProcess(options, { clockSkewMs: skewMs });
  processes.push(worker);
  return worker;
}

describe('a worker whose clock is 50 s behind', () => {
  it('does not send again a possibly-accepted message once the window has passed by Redis time', async () => {
    // Worker A: its request reaches the service, the answer comes too late: the outcome is unknown.
    await workers.start({ timeouts: { response: 1000 } });
    const info = await nodemailer.createTransport(transport).sendMail({
      from: 'a@example.test',
      to: 'ann@example.test',
      subject: 'invoice',
      text: 'x',
      idempotencyKey: 'inv-1',
    });
    await eventually(
      async () => (await recordQueue(transport.queue).getJob(info.queueId))!.data.resendUntil !== undefined,
      {
        what: 'the unknown outcome recorded',
      },
    );
    await workers.closeAll();
    await eventually(() => invoices() === 1, { what: 'the first attempt delivered' });

    // 24.5 hours pass: the service forgets the key. By Redis's clock the job's window (23 h) ended 30 s ago.
    shift = 24.5 * H;
    const job = await recordQueue(transport.queue).getJob(info.queueId);
    const resendUntil = (await redisNow()) - 30_000;
    await job!.updateData({ ...job!.data, possiblyAcceptedAt: resendUntil - 23 * H, resendUntil });
    // Due now (BullMQ itself promotes delayed jobs by the clock of the worker that looks).
    if ((await job!.getState()) === 'delayed') await job!.promote();
    // Worker B runs 50 s behind: by its own clock, the window has 20 s to go.
    await skewedWorker(-50_000);
    await eventually(async () => (await recordQueue(transport.queue).getJob(info.queueId))!.finishedOn !== undefined, {
      what: 'the job settled',
    });
    const done = await recordQueue(transport.queue).getJob(info.queueId);
    expect(await done!.getState()).toBe('failed');
    expect(done!.data.lastError?.parked).toBe('idempotency-window');
    expect(invoices()).toBe(1);
  });
});

describe('a worker whose clock is 50 s ahead', () => {
  it('stamps when an attempt may have been accepted, and when it failed, by Redis time', async () => {
    await skewedWorker(50_000, { baseUrl: slow.url, timeouts: { response: 1000 } });
    const info = await nodemailer
      .createTransport(transport)
      .sendMail({ from: 'a@example.test', to: 'bob@example.test', subject: 'invoice', text: 'x' });
    await eventually(
      async () => (await recordQueue(transport.queue).getJob(info.queueId))!.data.resendUntil !== undefined,
      {
        what: 'the unknown outcome recorded',
      },
    );
    const data = (await recordQueue(transport.queue).getJob(info.queueId))!.data;
    const now = await redisNow();
    // Within seconds of Redis's clock (the attempt's time), not 50 s ahead of it.
    expect(Math.abs(data.possiblyAcceptedAt! - now)).toBeLessThan(25_000);
    expect(data.resendUntil! - data.possiblyAcceptedAt!).toBe(23 * H);
    expect(Math.abs(Date.parse(data.lastError!.at) - now)).toBeLessThan(25_000);
  });
});

describe('a producer whose clock is ahead', () => {
  it('does not move the window of a stalled first attempt by its skew', async () => {
    // BullMQ stamps a job with its producer's clock (job.timestamp): here 2 hours ahead of Redis.
    const ahead = new EmlApiQueueTransport({ connection: redis.url, jobOptions: { timestamp: Date.now() + 2 * H } });
    const info = await nodemailer
      .createTransport(ahead)
      .sendMail({ from: 'a@example.test', to: 'cy@example.test', subject: 'invoice', text: 'x' });
    await ahead.close();
    // A worker takes it, posts it, and dies before the answer: a stall, the outcome unknown.
    const doomed = await skewedWorker(0, {
      baseUrl: holding.url,
      workerOptions: { lockDuration: 800, stalledInterval: 300 },
    });
    await eventually(() => holding.heldRequests > 0, { what: 'the doomed worker sending' });
    await doomed.kill();
    const started = await redisNow();
    await skewedWorker(0, { workerOptions: { lockDuration: 800, stalledInterval: 300 } });
    await eventually(async () => (await recordQueue(transport.queue).getJob(info.queueId))!.data.stalls === 1, {
      what: 'the stall counted',
    });
    const data = (await recordQueue(transport.queue).getJob(info.queueId))!.data;
    // The attempt started before the kill, so its window runs from then at the latest: not 2 hours later.
    expect(data.possiblyAcceptedAt!).toBeLessThanOrEqual((await redisNow()) + 1000);
    expect(data.possiblyAcceptedAt! - started).toBeLessThan(10 * 60_000);
  });
});

describe('a producer whose clock is behind', () => {
  it('does not park a stalled first attempt as past the window: the window runs from when Redis took the job', async () => {
    // BullMQ stamps a job with its producer's clock (job.timestamp): here 2 days behind Redis.
    const behind = new EmlApiQueueTransport({
      connection: redis.url,
      jobOptions: { timestamp: Date.now() - 48 * H },
      retry: { attempts: 5, delay: 300, jitter: 0 },
    });
    const queuedAt = await redisNow();
    const info = await nodemailer
      .createTransport(behind)
      .sendMail({ from: 'a@example.test', to: 'cy@example.test', subject: 'invoice', text: 'x' });
    await behind.close();
    // A worker takes it, posts it, and dies before the answer: a stall, the outcome unknown.
    const doomed = await skewedWorker(0, {
      baseUrl: holding.url,
      workerOptions: { lockDuration: 800, stalledInterval: 300 },
    });
    await eventually(() => holding.heldRequests > 0, { what: 'the doomed worker sending' });
    await doomed.kill();
    await skewedWorker(0, { workerOptions: { lockDuration: 800, stalledInterval: 300 } });
    // Retried under its key (the attempt started seconds ago, well inside the window), not parked.
    await eventually(
      async () => {
        const { completed, failed } = await transport.queue.getJobCounts('completed', 'failed');
        return (completed ?? 0) + (failed ?? 0) === 1;
      },
      { what: 'the job finished' },
    );
    const data = (await recordQueue(transport.queue).getJob(info.queueId))!.data;
    expect(data.lastError?.parked).toBeUndefined();
    expect(await transport.queue.getJobCounts('completed')).toEqual({ completed: 1 });
    expect(data.possiblyAcceptedAt!).toBeGreaterThanOrEqual(queuedAt - 1000);
    expect(invoices()).toBe(1);
  });
});

describe('RedisClock', () => {
  it('reads Redis once per refresh and carries its time forward on the monotonic clock', async () => {
    let mono = 1000;
    let reads = 0;
    let redisMs = 5_000_000;
    const clock = new RedisClock(
      async () => {
        reads++;
        mono += 4; // a round trip of 4 ms: Redis read its clock at its middle
        return redisMs;
      },
      { refreshEvery: 60_000, monotonic: () => mono, wall: () => 1e12 + mono },
    );
    expect(await clock.now()).toBe(5_000_000 + 2);
    mono += 30_000;
    expect(await clock.now()).toBe(5_030_002);
    expect(reads).toBe(1);
    mono += 30_000; // a minute since the reading: read again
    redisMs = 9_000_000;
    expect(await clock.now()).toBe(9_000_002);
    expect(reads).toBe(2);
  });

  it('reads Redis again after a suspend of the machine, which the monotonic clock misses', async () => {
    const mono = 0;
    let wall = 1e12;
    let reads = 0;
    const clock = new RedisClock(
      async () => {
        reads++;
        return wall;
      },
      { refreshEvery: 60_000, monotonic: () => mono, wall: () => wall },
    );
    await clock.now();
    wall += 3_600_000; // an hour asleep: the wall clock (and Redis's) moved, the monotonic one did not
    expect(await clock.now()).toBe(wall);
    expect(reads).toBe(2);
  });

  it('carries the last reading forward while Redis cannot be read, and throws when it never could', async () => {
    let mono = 0;
    let up = true;
    const clock = new RedisClock(
      async () => {
        if (!up) throw new Error('down');
        return 100;
      },
      { refreshEvery: 10, monotonic: () => mono, wall: () => mono },
    );
    await clock.sync();
    up = false;
    mono = 50;
    expect(await clock.now()).toBe(150);
    await expect(new RedisClock(() => Promise.reject(new Error('down'))).now()).rejects.toThrow('down');
  });
});
