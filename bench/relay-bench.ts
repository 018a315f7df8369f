/**
 * The relay's benchmarks, run by bench/run.ts: messages per second through
 * Nodemailer's SMTP pool → the relay (its own process) → the HTTP sink,
 * against the direct transport to the same sink in the same run; and the
 * relay process's peak extra RSS while it relays one 25 MB message.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { EmlApiTransport } from '../src/index.js';
import { benchMessage } from './bench-message.js';
import type { Sinks } from './sinks.js';

/** Measures runners in interleaved rounds; returns each one's rate per round. */
export type Interleaved = (
  runners: Record<string, (count: number) => Promise<number>>,
  rounds: number,
  count: number,
) => Promise<Record<string, number[]>>;

export interface RelayFigures {
  concurrency: number;
  relay: number[];
  direct: number[];
  memoryRuns: number[];
  smallRuns: number[];
}

function ask<T>(child: ChildProcess, message: object): Promise<T> {
  return new Promise((resolve) => {
    child.once('message', (answer) => resolve(answer as T));
    child.send(message);
  });
}

/**
 * Starts the relay in its own process (bench/relay-process.ts), relaying to `baseUrl`, or with
 * `queue` storing in that Redis (store-and-forward). `execArgv` adds Node flags (e.g. `--cpu-prof`).
 */
export async function startRelayProcess(
  baseUrl: string,
  queue?: { redisUrl: string; queueName: string },
  execArgv: string[] = [],
): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(fileURLToPath(new URL('./relay-process.ts', import.meta.url)), [], {
    execArgv: ['--expose-gc', '--import', 'tsx', ...execArgv],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const { port } = await ask<{ port: number }>(child, { cmd: 'start', baseUrl, ...queue });
  return { child, port };
}

/** Stops a relay process started by {@link startRelayProcess} (its close() first, then it exits). */
export const stopRelay = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.send({ cmd: 'stop' });
  });

export async function relayBenchmarks(
  sinks: Sinks,
  interleaved: Interleaved,
  rate: (count: number, concurrency: number, task: (n: number) => Promise<unknown>) => Promise<number>,
  rounds: number,
  count: number,
): Promise<RelayFigures> {
  const concurrency = 5;
  console.log(
    `\nRelay throughput: Nodemailer SMTP pool (${concurrency}) → relay process → HTTP sink, vs the direct transport`,
  );
  const { child, port } = await startRelayProcess(sinks.httpUrl);
  const viaRelay = nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    ignoreTLS: true,
    pool: true,
    maxConnections: concurrency,
    maxMessages: Infinity,
  });
  const transport = new EmlApiTransport({
    apiKey: 'k',
    baseUrl: sinks.httpUrl,
    maxConnections: concurrency,
    retry: false,
  });
  const direct = nodemailer.createTransport(transport);
  const rates = await interleaved(
    {
      relay: (n) => rate(n, concurrency, (i) => viaRelay.sendMail(benchMessage(i))),
      direct: (n) => rate(n, concurrency, (i) => direct.sendMail(benchMessage(i))),
    },
    rounds,
    count,
  );
  viaRelay.close();
  await transport.close();
  await stopRelay(child);
  console.log(`    relay  ${rates.relay!.map((r) => r.toFixed(0)).join(' ')} msg/s`);
  console.log(`    direct ${rates.direct!.map((r) => r.toFixed(0)).join(' ')} msg/s`);

  const memoryRuns = await relayMemory(sinks.httpUrl, 25);
  const smallRuns = await relayMemory(sinks.httpUrl, 8);
  return { concurrency, relay: rates.relay!, direct: rates.direct!, memoryRuns, smallRuns };
}

/** Peak extra RSS of a fresh relay process relaying one message with a `mb` MB attachment, over 5 runs. */
async function relayMemory(baseUrl: string, mb: number): Promise<number[]> {
  console.log(`\nRelay memory: one ${mb} MB message through the relay (a fresh relay process per run)`);
  const file = join(tmpdir(), `eml-api-relay-bench-${process.pid}.bin`);
  await writeFile(file, randomBytes(mb * 1024 * 1024));
  const runs: number[] = [];
  try {
    for (let i = 0; i < 5; i++) {
      const relay = await startRelayProcess(baseUrl);
      const client = nodemailer.createTransport({ host: '127.0.0.1', port: relay.port, ignoreTLS: true });
      // Warm-up: every module and path of the relay loaded before the baseline.
      await client.sendMail({ from: 'a@example.test', to: 'b@example.test', subject: 'warm', text: 'up' });
      await ask(relay.child, { cmd: 'mark' });
      await client.sendMail({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'big',
        text: 'see attachment',
        attachments: [{ filename: 'big.bin', path: file }],
      });
      const { baselineRss, peakRss } = await ask<{ baselineRss: number; peakRss: number }>(relay.child, {
        cmd: 'peak',
      });
      client.close();
      await stopRelay(relay.child);
      runs.push((peakRss - baselineRss) / 1024 / 1024);
    }
  } finally {
    await rm(file, { force: true });
  }
  console.log(`    peak extra RSS of the relay: ${runs.map((r) => r.toFixed(1)).join(', ')} MB`);
  return runs;
}
