/**
 * `eml-api worker --processes 2`: real processes (the CLI, node:cluster), a
 * real Redis. One process takes one job at a time (--concurrency 1), so two
 * jobs in flight at once are one in each: /metrics sums them, a killed
 * process is replaced without losing its job, and SIGTERM drains both.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { childPids } from '../helpers/processes.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { nodeArgs } from '../helpers/compiled.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
let worker: ChildProcess;
let output = '';
let opsPort: number;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
  worker = spawn(
    process.execPath,
    nodeArgs([
      '--import',
      'tsx',
      'src/cli/main.ts',
      'worker',
      '--processes',
      '2',
      '--concurrency',
      '1',
      '--http-port',
      '0',
    ]),
    {
      cwd: ROOT,
      env: { ...process.env, REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  worker.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  worker.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await eventually(() => /Health and metrics on/.test(output), { timeout: 30_000, what: () => output });
  opsPort = Number(/Health and metrics on http:\/\/127\.0\.0\.1:(\d+)/.exec(output)![1]);
}, 60_000);

afterAll(async () => {
  if (worker && worker.exitCode === null && worker.signalCode === null) {
    for (const pid of workerPids()) process.kill(pid, 'SIGKILL');
    worker.kill('SIGKILL');
  }
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

function workerPids(): number[] {
  return childPids(worker.pid!, 'src/cli/main.');
}

const send = (to: string) =>
  nodemailer.createTransport(transport).sendMail({ from: 'shop@example.test', to, subject: 'Hi', text: 'x' });

async function metrics(): Promise<string> {
  return (await fetch(`http://127.0.0.1:${opsPort}/metrics`)).text();
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => !l.startsWith('#') && l.startsWith(name));
  return line === undefined ? NaN : Number(line.split(' ').at(-1));
}

const active = async () => (await transport.queue.getJobCounts('active')).active;

describe('eml-api worker --processes 2', () => {
  it('prints one start line; /metrics sums the processes, and reads the queue once', async () => {
    expect(output).toMatch(/^Worker sending from queue "eml-api" in 2 processes, 1 at a time in each$/m);
    expect(workerPids()).toHaveLength(2);
    await Promise.all([send('a@example.test'), send('b@example.test')]);
    await eventually(() => emu.messages().length === 2);
    const ready = await fetch(`http://127.0.0.1:${opsPort}/readyz`);
    expect(ready.status, await ready.text()).toBe(200);
    emu.setFaults({ latencyMs: 3_000 });
    await Promise.all([send('c@example.test'), send('d@example.test')]);
    // One job at a time in each: two at once are one in each process.
    await eventually(async () => (await active()) === 2);
    const text = await metrics();
    expect(metric(text, 'eml_api_worker_active_jobs')).toBe(2);
    expect(metric(text, 'eml_api_sends_total{component="worker",outcome="sent"')).toBe(2);
    expect(metric(text, 'eml_api_processes{component="worker"}')).toBe(2);
    // Every process reads the same queue: its gauges are one process's, not the sum.
    expect(metric(text, 'eml_api_outbox_jobs{queue="eml-api",state="active"}')).toBe(2);
    expect(metric(text, 'eml_api_outbox_jobs{queue="eml-api",state="completed"}')).toBe(2);
  });

  it('a process killed while it sends is replaced; its job stays in the queue', async () => {
    const sent = metric(await metrics(), 'eml_api_sends_total{component="worker",outcome="sent"');
    const [victim] = workerPids();
    process.kill(victim!, 'SIGKILL');
    await eventually(async () => {
      const text = await metrics();
      return (
        metric(text, 'eml_api_processes{component="worker"}') === 2 &&
        metric(text, 'eml_api_process_restarts_total{component="worker"}') === 1
      );
    });
    expect(workerPids()).not.toContain(victim);
    expect(output).toMatch(new RegExp(`worker process ${victim} died \\(signal SIGKILL\\)`));
    const counts = await transport.queue.getJobCounts('active', 'completed', 'waiting', 'prioritized', 'delayed');
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(4);
    // The sum of the sends never goes down: the process that died keeps its count.
    expect(metric(await metrics(), 'eml_api_sends_total{component="worker",outcome="sent"')).toBeGreaterThanOrEqual(
      sent,
    );
    await eventually(async () => (await fetch(`http://127.0.0.1:${opsPort}/readyz`)).status === 200);
  }, 30_000);

  it('SIGTERM to every process at once (systemd, Ctrl-C) lets each finish its send, then exits 0', async () => {
    // The job of the killed process stays active (locked) until BullMQ finds it stalled; the other one ends.
    await eventually(async () => (await active()) === 1);
    emu.setFaults({ latencyMs: 1_500 });
    await Promise.all([send('e@example.test'), send('f@example.test')]);
    await eventually(async () => (await active()) === 3);
    const exit = new Promise<number | null>((resolve) => worker.once('exit', (code) => resolve(code)));
    const pids = workerPids();
    // systemd's KillMode=control-group signals every process of the unit: each counts one signal, not two.
    worker.kill('SIGTERM');
    for (const pid of pids) process.kill(pid, 'SIGTERM');
    expect(await exit).toBe(0);
    expect(output).toContain('Worker stopped (2 processes)');
    const delivered = JSON.stringify(emu.messages());
    expect(delivered).toContain('e@example.test');
    expect(delivered).toContain('f@example.test');
    expect(output.match(/^Worker process \d+ stopped: \d+ sent, 0 failed$/gm)).toHaveLength(2);
    for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
  }, 30_000);
});

describe('eml-api worker --processes 1 without --http-port', () => {
  it('a process killed is replaced: the primary waits for its replacement instead of exiting', async () => {
    const child = spawn(
      process.execPath,
      nodeArgs(['--import', 'tsx', 'src/cli/main.ts', 'worker', '--processes', '1', '--queue', 'alone']),
      {
        cwd: ROOT,
        env: { ...process.env, REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let said = '';
    child.stdout!.on('data', (chunk: Buffer) => (said += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (said += chunk.toString()));
    let exited = false;
    const exit = new Promise<number | null>((resolve) =>
      child.once('exit', (code) => {
        exited = true;
        resolve(code);
      }),
    );
    try {
      await eventually(() => /Worker sending/.test(said), { timeout: 30_000, what: () => said });
      const [victim] = childPids(child.pid!, 'src/cli/main.');
      process.kill(victim!, 'SIGKILL');
      await eventually(() => exited || /worker process \d+ started/.test(said), { timeout: 20_000, what: () => said });
      expect(exited, said).toBe(false);
      child.kill('SIGTERM');
      expect(await exit, said).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        for (const pid of childPids(child.pid!, 'src/cli/main.')) process.kill(pid, 'SIGKILL');
        child.kill('SIGKILL');
      }
    }
  }, 40_000);
});
