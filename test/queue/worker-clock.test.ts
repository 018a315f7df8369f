import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxWorkerOptions } from '../../src/queue/index.js';
import { eventually, inProcessWorkers, startWorkerProcess, type WorkerProcess } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * A worker whose clock is wrong erased failed mail: BullMQ removes old
 * failed (and sent) jobs by the clock of the worker that finishes a job, so a
 * worker 8 days ahead removed every failed job, kept 7 days for a person, at
 * its first failure. The worker read Redis's TIME at start but never compared
 * it with its own clock. It now refuses to start more than a minute off
 * Redis's clock, and stops taking jobs (saying so) when its clock is stepped
 * that far while it runs, until it is right again. Real redis-server, worker
 * processes whose clocks are skewed (test/helpers/skewed-clock.mjs).
 */

const DAY = 24 * 3_600_000;
let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
const processes: WorkerProcess[] = [];
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
});

afterEach(async () => {
  await workers.closeAll();
  await Promise.all(processes.splice(0).map((p) => p.kill()));
  await transport.queue.obliterate({ force: true });
});

afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

/** A group send to a group the service does not have: failed at once (404), kept for a person. */
const doomed = (i: number) =>
  nodemailer
    .createTransport(transport)
    .sendMail({ from: 'shop@example.test', subject: `News ${i}`, html: '<p>x</p>', group: 'no-such-group' });
const failed = async () => (await transport.queue.getJobCounts('failed')).failed;

async function skewedWorker(skewMs: number): Promise<WorkerProcess> {
  const options: OutboxWorkerOptions = {
    connection: redis.url,
    apiKey: emu.apiKey,
    baseUrl: emu.url,
    cleanupInterval: 0,
  };
  const worker = await startWorkerProcess(options, { clockSkewMs: skewMs });
  processes.push(worker);
  return worker;
}

describe('a worker whose clock is more than a minute off Redis’s', () => {
  it('does not start, saying why, and the failed mail stays', async () => {
    for (let i = 0; i < 3; i++) await doomed(i);
    await workers.start();
    await eventually(async () => (await failed()) === 3, { what: 'three failed jobs' });
    await workers.closeAll();
    await doomed(3);
    const refusal = await skewedWorker(8 * DAY).catch((err: unknown) => err);
    expect(refusal).toMatchObject({ code: 'ECONFIG', message: expect.stringMatching(/clock .* ahead of Redis/) });
    expect(await failed()).toBe(3);
    const late = await skewedWorker(-8 * DAY).catch((err: unknown) => err);
    expect(late).toMatchObject({ code: 'ECONFIG', message: expect.stringMatching(/clock .* behind Redis/) });
  });

  it('stops taking jobs when its clock is stepped while it runs, and takes them again once it is right', async () => {
    const worker = await skewedWorker(0);
    await doomed(0);
    await eventually(async () => (await failed()) === 1, { what: 'the first failure' });
    worker.skewClock(8 * DAY);
    await doomed(1);
    await eventually(() => worker.warnings.some((w) => /clock/.test(w)), { what: 'the warning' });
    expect(await failed()).toBe(1);
    worker.skewClock(0);
    await eventually(async () => (await failed()) === 2, { what: 'the second failure, once the clock is right' });
  });

  it('hands back the jobs it takes meanwhile without counting them as cut short by its close', async () => {
    const worker = await workers.start();
    const warnings: string[] = [];
    worker.on('warning', (message: string) => warnings.push(message));
    // Stepping this machine's clock would step every process here: Date.now alone is stepped, in this process.
    const now = Date.now.bind(Date);
    const stepped = vi.spyOn(Date, 'now').mockImplementation(() => now() + 8 * DAY);
    try {
      await doomed(0);
      await eventually(() => warnings.some((w) => /clock/.test(w)), { what: 'the warning' });
      await eventually(async () => (await transport.queue.getJobCounts('prioritized')).prioritized === 1, {
        what: 'the job handed back',
      });
    } finally {
      stepped.mockRestore();
    }
    await worker.close();
    // `eml-api worker` exits 4 when a close handed sends back; this close ended none.
    expect(worker.handedBack).toBe(0);
    expect(await failed()).toBe(0);
  });

  it('is not taken for one by a suspend of its machine, which its monotonic clock misses', async () => {
    const worker = await skewedWorker(0);
    await doomed(0);
    await eventually(async () => (await failed()) === 1, { what: 'the first failure' });
    worker.suspend(DAY);
    await doomed(1);
    await eventually(async () => (await failed()) === 2, { what: 'the second failure' });
    expect(worker.warnings.filter((w) => /clock/.test(w))).toEqual([]);
  });
});
