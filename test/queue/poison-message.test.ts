import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxWorkerOptions } from '../../src/queue/index.js';
import { SoloGate } from '../../src/queue/solo-gate.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';
import { compiledPath, nodeArgs } from '../helpers/compiled.js';

/**
 * A message that crashes every worker that sends it is parked after
 * `maxStalls`, as designed; but each crash also stalls every job the dying
 * worker held, and stalled jobs came back together, on the same backoff, and
 * kept sharing the poison's crashes: with concurrency 10 and a supervisor
 * restarting the worker, innocent messages were parked as "crashes workers"
 * beside it (review F8, attack/13-poison-parks-innocents.ts). Now a job that
 * has stalled runs alone in its worker (nothing else in flight), and only a
 * stall of a run alone counts toward `maxStalls`.
 *
 * Real redis-server, real worker processes (test/queue/poison-worker-process.ts,
 * SIGKILLed when they send the poison) restarted by a supervisor loop, the
 * emulator with latency so that sends overlap. Scaled: maxStalls 3, locks of
 * 1 s, backoff of 300 ms.
 */

const POISON_WORKER = fileURLToPath(new URL('./poison-worker-process.ts', import.meta.url));
const INNOCENTS = 30;
let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
  emu.setFaults({ latencyMs: [300, 600] });
  transport = new EmlApiQueueTransport({
    connection: redis.url,
    retry: { attempts: 30, delay: 300, maxDelay: 300, jitter: 0.2 },
  });
});

afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

describe('a message that crashes every worker sending it', () => {
  it('is parked alone: the innocent messages that shared its crashes are delivered, none parked', async () => {
    const mailer = nodemailer.createTransport(transport);
    const mail = (subject: string, idempotencyKey: string) => ({
      from: 'a@example.test',
      to: 'b@example.test',
      subject,
      text: 'x',
      idempotencyKey,
    });
    await mailer.sendMail(mail('poison', 'poison'));
    for (let i = 0; i < INNOCENTS; i++) await mailer.sendMail(mail(`ok ${i}`, `ok-${i}`));
    const options: OutboxWorkerOptions = {
      connection: redis.url,
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      cleanupInterval: 0,
      concurrency: 10,
      maxStalls: 3,
      workerOptions: { lockDuration: 1000, stalledInterval: 500 },
    };
    // A supervisor (systemd, Kubernetes) restarting the worker each time it dies.
    let stop = false;
    let crashes = 0;
    let current: ReturnType<typeof fork> | undefined;
    const supervisor = (async () => {
      while (!stop) {
        current = fork(compiledPath(POISON_WORKER), [JSON.stringify(options)], {
          execArgv: nodeArgs(['--import', 'tsx']),
          env: { ...process.env, POISON_KEY: 'poison' },
          stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
        });
        const [, signal] = (await once(current, 'exit')) as [number | null, string | null];
        if (signal === 'SIGKILL' && !stop) crashes++;
      }
    })();
    try {
      await eventually(
        async () => {
          const { completed, failed } = await transport.queue.getJobCounts('completed', 'failed');
          return completed! + failed! === INNOCENTS + 1;
        },
        { timeout: 150_000, what: 'every message sent or parked' },
      );
    } finally {
      stop = true;
      current?.kill('SIGKILL');
      await supervisor;
    }
    const failed = await recordQueue(transport.queue).getFailed(0, -1);
    const parked = failed.map((j) => `${j.id} (${j.data.lastError?.parked}, stalls ${j.data.stalls})`);
    console.log(`poison: ${crashes} worker crashes; parked: ${parked.join(', ')}`);
    expect(failed.map((j) => j.id)).toEqual(['poison']);
    expect(failed[0]!.data.lastError?.parked).toBe('stalls');
    // Every innocent message delivered, once.
    const subjects = emu.messages().map((m) => m.subject);
    for (let i = 0; i < INNOCENTS; i++) expect(subjects.filter((s) => s === `ok ${i}`)).toHaveLength(1);
    expect(subjects).not.toContain('poison');
  }, 200_000);
});

describe('SoloGate', () => {
  /** Lets every settled promise's callbacks run. */
  const settle = () => new Promise((resolve) => setImmediate(resolve));

  it('runs a send alone once those in flight end, and the sends after it wait behind it, in order', async () => {
    const gate = new SoloGate();
    const order: string[] = [];
    const a = await gate.enter(false);
    const b = await gate.enter(false);
    const alone = gate.enter(true).then((leave) => (order.push('alone'), leave));
    const later = gate.enter(false).then((leave) => (order.push('later'), leave));
    await settle();
    expect(order).toEqual([]); // two sends in flight: the one alone waits, and the one after it too
    a();
    await settle();
    expect(order).toEqual([]);
    b();
    await settle();
    expect(order).toEqual(['alone']);
    expect(gate.inFlight).toBe(1);
    (await alone)();
    await settle();
    expect(order).toEqual(['alone', 'later']);
    (await later)();
    expect(gate.inFlight).toBe(0);
  });

  it('admits the ordinary sends waiting together, up to the next one alone', async () => {
    const gate = new SoloGate();
    const first = await gate.enter(true);
    const admitted: string[] = [];
    const waits = [
      gate.enter(false).then((l) => (admitted.push('s1'), l)),
      gate.enter(false).then((l) => (admitted.push('s2'), l)),
      gate.enter(true).then((l) => (admitted.push('a2'), l)),
      gate.enter(false).then((l) => (admitted.push('s3'), l)),
    ];
    first();
    await settle();
    expect(admitted).toEqual(['s1', 's2']);
    (await waits[0]!)();
    (await waits[1]!)();
    await settle();
    expect(admitted).toEqual(['s1', 's2', 'a2']);
    (await waits[2]!)();
    await settle();
    expect(admitted).toEqual(['s1', 's2', 'a2', 's3']);
  });
});
