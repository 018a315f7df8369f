/**
 * The transport against the ideal sender (bench/ideal-sender.ts), and what
 * build threads leave on the sending thread: each runner in interleaved
 * rounds, measured per message as msg/s, CPU of the whole process, the
 * sending thread's event-loop busy time and CPU, and the build threads' CPU.
 * The transport is the built package (dist/), as apps run it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import nodemailer from 'nodemailer';
import type * as Package from '../src/index.js';
import { benchMessage } from './bench-message.js';
import { idealSender } from './ideal-sender.js';
import type { Sinks } from './sinks.js';

// Loaded by path so that type-checking a fresh clone (no dist/ yet) does not depend on a build.
const builtEntry = new URL('../dist/index.js', import.meta.url).href;

/** One runner's figures in one round, per message where it says so. */
export interface RoundFigures {
  rate: number;
  /** CPU of the whole process (all its threads). */
  cpuUs: number;
  /** The sending thread's event-loop busy time (wall time spent in callbacks). */
  busyUs: number;
  /** The sending thread's own CPU (/proc, 10 ms ticks). */
  mainCpuUs: number;
  /** Time the sending thread was ready to run but waited for a core (/proc schedstat, run-queue delay). */
  mainWaitUs: number;
  /** CPU of this runner's build threads, all together. */
  threadsCpuUs: number;
  /** CPU of the sink process. */
  sinkCpuUs: number;
  /** 1-minute load average at the end of the round. */
  load: number;
}

/** Figures of every runner in every round, at one concurrency. */
export type ThroughputFigures = Record<string, RoundFigures[]>;

/**
 * The runners: the ideal sender, the transport without and with 1 or 2 build
 * threads, Nodemailer's pooled SMTP transport, and the two parts of a send
 * that stay on the sending thread whatever builds the message: Nodemailer's
 * `sendMail` to a transport that does nothing, and the ideal sender's request
 * of a message built once.
 */
export const RUNNERS = ['ideal', 'transport', 'threads1', 'threads2', 'smtp', 'sendMail', 'post'] as const;
export type RunnerName = (typeof RUNNERS)[number];

/** utime + stime of a task of this process, or of another process, in µs. */
function cpuOf(statPath: string): number {
  try {
    const stat = readFileSync(statPath, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return 0;
  }
}

const tasks = (): string[] => readdirSync('/proc/self/task');

/** Run-queue delay of a task in µs: the time it was ready to run and waited for a core (0 without schedstats). */
function waitOf(schedstatPath: string): number {
  try {
    return Number(readFileSync(schedstatPath, 'utf8').split(' ')[1]) / 1000;
  } catch {
    return 0;
  }
}

/**
 * Runs every runner `rounds` times, `count` messages each, `concurrency` in
 * flight, the order rotating each round, after a warm-up of each.
 */
export async function throughputRounds(
  sinks: Sinks,
  concurrency: number,
  rounds: number,
  count: number,
): Promise<ThroughputFigures> {
  const { EmlApiTransport } = (await import(builtEntry)) as typeof Package;
  const ideal = idealSender(sinks.httpUrl, concurrency);
  const transport = (buildThreads?: number) =>
    new EmlApiTransport({
      apiKey: 'k',
      baseUrl: sinks.httpUrl,
      maxConnections: concurrency,
      ...(buildThreads ? { buildThreads } : {}),
    });
  const transports = { transport: transport(), threads1: transport(1), threads2: transport(2) };
  const smtp = nodemailer.createTransport({
    host: '127.0.0.1',
    port: sinks.smtpPort,
    secure: false,
    ignoreTLS: true,
    pool: true,
    maxConnections: concurrency,
    maxMessages: Infinity,
  });
  const idle = nodemailer.createTransport({
    name: 'nothing',
    version: '1',
    send: (mail: { message: { messageId(): string } }, callback: (err: null, info: object) => void) =>
      setImmediate(() => callback(null, { messageId: mail.message.messageId() })),
  } as never);
  const built = await nodemailer.createTransport({ streamTransport: true, buffer: true }).sendMail(benchMessage(0));
  const senders: Record<RunnerName, (n: number) => Promise<unknown>> = {
    ideal: (n) => ideal.send(benchMessage(n)),
    transport: sendWith(transports.transport),
    threads1: sendWith(transports.threads1),
    threads2: sendWith(transports.threads2),
    smtp: (n) => smtp.sendMail(benchMessage(n)),
    sendMail: (n) => idle.sendMail(benchMessage(n)),
    post: () => ideal.post(built.message as Buffer),
  };
  // The tasks of the process before any build thread: a task that appears while a runner runs is its build thread.
  const known = new Set(tasks());
  const ownTasks = new Map<RunnerName, Set<string>>(RUNNERS.map((name) => [name, new Set()]));
  const mainStat = `/proc/self/task/${process.pid}/stat`;
  const mainSchedstat = `/proc/self/task/${process.pid}/schedstat`;
  const sinkStat = `/proc/${sinks.pid}/stat`;

  const measure = async (name: RunnerName, messages: number): Promise<RoundFigures> => {
    const own = ownTasks.get(name)!;
    const threadCpu = () => [...own].reduce((sum, tid) => sum + cpuOf(`/proc/self/task/${tid}/stat`), 0);
    const before = { threads: threadCpu(), main: cpuOf(mainStat), wait: waitOf(mainSchedstat), sink: cpuOf(sinkStat) };
    const cpu = process.cpuUsage();
    const elu = performance.eventLoopUtilization();
    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < messages) await senders[name](next++);
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const busy = performance.eventLoopUtilization(elu);
    const used = process.cpuUsage(cpu);
    for (const tid of tasks()) {
      if (known.has(tid)) continue;
      known.add(tid);
      own.add(tid);
    }
    return {
      rate: messages / seconds,
      cpuUs: (used.user + used.system) / messages,
      busyUs: (busy.active * 1000) / messages,
      mainCpuUs: (cpuOf(mainStat) - before.main) / messages,
      mainWaitUs: (waitOf(mainSchedstat) - before.wait) / messages,
      threadsCpuUs: (threadCpu() - before.threads) / messages,
      sinkCpuUs: (cpuOf(sinkStat) - before.sink) / messages,
      load: loadavg()[0]!,
    };
  };

  const figures = Object.fromEntries(RUNNERS.map((name) => [name, [] as RoundFigures[]])) as ThroughputFigures;
  try {
    for (const name of RUNNERS) await measure(name, Math.ceil(count / 5));
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < RUNNERS.length; i++) {
        const name = RUNNERS[(round + i) % RUNNERS.length]!;
        figures[name]!.push(await measure(name, count));
      }
    }
  } finally {
    await ideal.close();
    await Promise.all(Object.values(transports).map((t) => t.close()));
    smtp.close();
  }
  return figures;
}

function sendWith(transport: InstanceType<typeof Package.EmlApiTransport>): (n: number) => Promise<unknown> {
  const transporter = nodemailer.createTransport(transport);
  return (n) => transporter.sendMail(benchMessage(n));
}
