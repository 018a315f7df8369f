import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient } from '../../src/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { eventually, startWorkerProcess, type WorkerProcess } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Issue 11, test 4: `rateLimit` is global. Three worker processes, each
 * allowed 10 sends at once, share 20 sends per second: no one-second window
 * holds more than 21 job starts (as BullMQ stamps them).
 */

const MESSAGES = 80;
let redis: RedisServer;
let emu: Emulator;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  // The emulator's first messages are parsed slowly (code not yet compiled): requests arriving
  // meanwhile would be stamped together. Warm it up so its timestamps show when sends arrive.
  const client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
  for (let i = 0; i < 20; i++)
    await client.sendEml(`From: a@example.test\r\nTo: b@example.test\r\nSubject: warm-up ${i}\r\n\r\nx\r\n`);
  await client.close();
  emu.reset();
});

afterAll(async () => {
  await Promise.all(workers.map((w) => w.kill()));
  await emu?.close();
  await redis?.stop();
});

/** The most timestamps within any window of `ms` (sliding, not aligned to seconds). */
function busiestWindow(times: number[], ms: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let most = 0;
  for (let start = 0, end = 0; end < sorted.length; end++) {
    while (sorted[end]! - sorted[start]! >= ms) start++;
    most = Math.max(most, end - start + 1);
  }
  return most;
}

describe('rateLimit: { max: 20, duration: 1000 }', () => {
  it('holds three worker processes together to 20 sends a second', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url });
    const transporter = nodemailer.createTransport(transport);
    for (let i = 0; i < MESSAGES; i++) {
      await transporter.sendMail({ from: 'shop@example.test', to: `c${i}@example.test`, text: `n${i}` });
    }
    const started = await Promise.all(
      ['one', 'two', 'three'].map((name) =>
        startWorkerProcess({
          connection: redis.url,
          apiKey: emu.apiKey,
          baseUrl: emu.url,
          concurrency: 10,
          rateLimit: { max: 20, duration: 1000 },
          cleanupInterval: 0,
          workerOptions: { name },
        }),
      ),
    );
    workers.push(...started);
    await eventually(() => emu.messages().length === MESSAGES, { timeout: 30_000, what: 'all delivered' });
    // A worker completes a job in Redis just after the service took it: CI once read 79 of 80 completed here.
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === MESSAGES, {
      what: 'all completed',
    });
    // The limiter decides when a job starts: BullMQ stamps that moment on the job (processedOn).
    // The emulator's arrival times would add the machine's scheduling jitter (a loaded CI host
    // delays one request and bunches the next ones), which the limiter does not control.
    const jobs = await transport.queue.getCompleted(0, MESSAGES);
    expect(jobs).toHaveLength(MESSAGES);
    const times = jobs.map((job) => job.processedOn!);
    const busiest = busiestWindow(times, 1000);
    const spread = (Math.max(...times) - Math.min(...times)) / 1000;
    console.log(
      `rateLimit: ${MESSAGES} sends over ${spread.toFixed(1)} s by ${started.map((w) => w.sent.length).join(' + ')}; busiest 1 s window: ${busiest}`,
    );
    expect(busiest).toBeLessThanOrEqual(21);
    // It really limited: 80 sends at 20 a second take at least 3 seconds (unlimited, they take a fraction of one).
    expect(spread).toBeGreaterThanOrEqual(2.9);
    // And all three workers took part.
    for (const w of started) expect(w.sent.length).toBeGreaterThan(0);
    expect(await Promise.all(started.map((w) => w.stop()))).toEqual([0, 0, 0]);
    await transport.close();
  }, 60_000);
});
