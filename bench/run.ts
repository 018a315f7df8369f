/**
 * npm run bench: throughput, latency-bound throughput, memory and connections,
 * each against a reference measured in the same run. Prints every figure with
 * its reference and ratio, and writes bench/results.json and BENCHMARKS.md.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { EmlApiTransport } from '../src/index.js';
import { benchMessage } from './bench-message.js';
import { postfixBenchmarks } from './postfix-bench.js';
import { queueBenchmarks } from './queue-cases.js';
import { relayBenchmarks } from './relay-bench.js';
import { scrapeBenchmarks } from './outbox-scrape-case.js';
import {
  RUNNERS,
  throughputRounds,
  type RoundFigures,
  type RunnerName,
  type ThroughputFigures,
} from './throughput-case.js';
import { startSinks, type Sinks } from './sinks.js';
import type { BenchRow } from './bench-row.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const machine = {
  cpu: cpus()[0]?.model ?? 'unknown',
  cores: cpus().length,
  memoryGb: Math.round(totalmem() / 2 ** 30),
  node: process.version,
};

const rows: BenchRow[] = [];
function record(row: Omit<BenchRow, 'ratio' | 'met'> & { better: 'higher' | 'lower'; targetRatio: number }): void {
  const ratio = row.value / row.referenceValue;
  const met = row.better === 'higher' ? ratio >= row.targetRatio : ratio <= row.targetRatio;
  const { better: _b, targetRatio: _t, ...rest } = row;
  rows.push({ ...rest, ratio, met });
  console.log(
    `${row.benchmark} | ${row.case}: ${row.value.toFixed(1)} ${row.unit} vs ${row.reference} ${row.referenceValue.toFixed(1)} → ratio ${ratio.toFixed(2)} (target ${row.target}) ${met ? 'MET' : 'NOT MET'}`,
  );
}

const message = benchMessage;

/** Runs `count` tasks with `concurrency` in flight; returns tasks per second. */
async function rate(count: number, concurrency: number, task: (n: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await task(next++);
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/**
 * Measures several runners in interleaved rounds (the order rotates each
 * round) after a warm-up of each. The machine's speed drifts by tens of
 * percent over seconds; measuring a case and its reference back to back in
 * every round and comparing them round by round cancels most of that drift.
 * @returns each runner's rate in every round
 */
async function interleaved(
  runners: Record<string, (count: number) => Promise<number>>,
  rounds: number,
  count: number,
): Promise<Record<string, number[]>> {
  const names = Object.keys(runners);
  for (const name of names) await runners[name]!(Math.ceil(count / 5));
  const rates: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < names.length; i++) {
      const name = names[(round + i) % names.length]!;
      rates[name]!.push(await runners[name]!(count));
    }
  }
  return rates;
}

const THROUGHPUT_ROUNDS = Number(process.env.THROUGHPUT_ROUNDS ?? 7);
const THROUGHPUT_COUNT = Number(process.env.THROUGHPUT_COUNT ?? 1500);
/** Per concurrency: every runner's figures in every round (the model of build threads reads concurrency 5). */
const throughputFigures = new Map<number, ThroughputFigures>();

async function throughput(sinks: Sinks): Promise<void> {
  await run('npm', ['run', 'build'], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
  const sample = message(0);
  const built = await nodemailer.createTransport({ streamTransport: true, buffer: true }).sendMail(sample);
  console.log(
    `\nThroughput: the ideal sender beside the transport (built package), ${(built.message as Buffer).length} byte message`,
  );
  for (const concurrency of [5, 20]) {
    const figures = await throughputRounds(sinks, concurrency, THROUGHPUT_ROUNDS, THROUGHPUT_COUNT);
    throughputFigures.set(concurrency, figures);
    const of = (name: RunnerName, key: keyof RoundFigures) => figures[name]!.map((round) => round[key]);
    const perRound = (name: RunnerName, reference: RunnerName, key: keyof RoundFigures) =>
      figures[name]!.map((round, i) => round[key] / figures[reference]![i]![key]);
    const fmt = (values: number[], digits = 0) => values.map((v) => v.toFixed(digits)).join(' ');
    const loads = of('transport', 'load');
    const loadText = `load ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)}`;
    console.log(
      `  concurrency ${concurrency}, ${THROUGHPUT_ROUNDS} interleaved rounds of ${THROUGHPUT_COUNT}, ${loadText}:`,
    );
    for (const name of RUNNERS) {
      console.log(
        `    ${name.padEnd(9)} msg/s ${fmt(of(name, 'rate'))} | CPU µs/msg ${fmt(of(name, 'cpuUs'))} | main busy µs/msg ${fmt(of(name, 'busyUs'))} | main CPU µs/msg ${fmt(of(name, 'mainCpuUs'))} | threads CPU µs/msg ${fmt(of(name, 'threadsCpuUs'))}`,
      );
    }
    const add = (
      benchmark: string,
      name: string,
      unit: string,
      value: number[],
      reference: string,
      referenceValue: number[],
      ratios: number[],
      target?: { text: string; met: (ratio: number) => boolean },
    ) => {
      const row: BenchRow = {
        benchmark: target ? benchmark : `${benchmark} (reference)`,
        case: `${name}, concurrency ${concurrency} (${loadText}; per-round ratios ${fmt(ratios, 2)})`,
        value: median(value),
        unit,
        reference,
        referenceValue: median(referenceValue),
        ratio: median(ratios),
        target: target?.text ?? '-',
        met: target ? target.met(median(ratios)) : true,
      };
      rows.push(row);
      console.log(
        `${row.benchmark} | ${name}, concurrency ${concurrency}: ${row.value.toFixed(1)} ${unit} vs ${reference} ${row.referenceValue.toFixed(1)} → median ratio ${row.ratio.toFixed(2)}${target ? ` (target ${target.text}) ${row.met ? 'MET' : 'NOT MET'}` : ''}`,
      );
    };
    const atLeast = (x: number) => ({ text: `>= ${x}`, met: (r: number) => r >= x });
    const atMost = (x: number) => ({ text: `<= ${x}`, met: (r: number) => r <= x });
    add(
      'throughput',
      'transport',
      'msg/s',
      of('transport', 'rate'),
      'ideal sender',
      of('ideal', 'rate'),
      perRound('transport', 'ideal', 'rate'),
      atLeast(0.95),
    );
    add(
      'CPU per message',
      'transport (whole process)',
      'µs',
      of('transport', 'cpuUs'),
      'ideal sender',
      of('ideal', 'cpuUs'),
      perRound('transport', 'ideal', 'cpuUs'),
      atMost(1.05),
    );
    for (const threads of [1, 2] as const) {
      const name = `threads${threads}` as const;
      add(
        'sending thread per message',
        `event-loop busy time, buildThreads: ${threads}`,
        'µs',
        of(name, 'busyUs'),
        'transport without build threads',
        of('transport', 'busyUs'),
        perRound(name, 'transport', 'busyUs'),
        atMost(0.35),
      );
      add(
        'sending thread per message',
        `CPU (/proc), buildThreads: ${threads}`,
        'µs',
        of(name, 'mainCpuUs'),
        'transport without build threads',
        of('transport', 'mainCpuUs'),
        perRound(name, 'transport', 'mainCpuUs'),
      );
      add(
        'sending thread per message',
        `time waiting for a core (schedstat run-queue delay), buildThreads: ${threads}`,
        'µs',
        of(name, 'mainWaitUs'),
        'transport without build threads',
        of('transport', 'mainWaitUs'),
        perRound(name, 'transport', 'mainWaitUs'),
      );
      add(
        'throughput',
        `transport, buildThreads: ${threads}`,
        'msg/s',
        of(name, 'rate'),
        'ideal sender',
        of('ideal', 'rate'),
        perRound(name, 'ideal', 'rate'),
      );
    }
    // What stays on the sending thread whatever builds the message: Nodemailer's sendMail and one request.
    const stays = figures.sendMail!.map((r, i) => r.mainCpuUs + figures.post![i]!.mainCpuUs);
    add(
      'sending thread per message',
      "what must stay on it: Nodemailer's sendMail to a transport that does nothing + the ideal sender's request, CPU (/proc)",
      'µs',
      stays,
      'transport without build threads',
      of('transport', 'mainCpuUs'),
      stays.map((v, i) => v / figures.transport![i]!.mainCpuUs),
    );
    add(
      'sending thread per message',
      'CPU (/proc), buildThreads: 2, against what must stay on it',
      'µs',
      of('threads2', 'mainCpuUs'),
      "Nodemailer's sendMail + the ideal sender's request",
      stays,
      figures.threads2!.map((r, i) => r.mainCpuUs / stays[i]!),
    );
    add(
      'throughput',
      'transport vs SMTP',
      'msg/s',
      of('transport', 'rate'),
      'Nodemailer pooled SMTP to smtp-server',
      of('smtp', 'rate'),
      perRound('transport', 'smtp', 'rate'),
    );
    add(
      'throughput',
      'transport, buildThreads: 2, vs SMTP',
      'msg/s',
      of('threads2', 'rate'),
      'Nodemailer pooled SMTP to smtp-server',
      of('smtp', 'rate'),
      perRound('threads2', 'smtp', 'rate'),
      atLeast(1.4),
    );
    if (concurrency === 5) threadModel(figures);
  }
}

/** What build threads give on more cores, from the per-message times measured at concurrency 5. */
interface ThreadModel {
  /** Per message, µs: the sending thread, the build threads together, the rest of the process, the sink. */
  main: number;
  threads: number;
  rest: number;
  sink: number;
  /** The same without build threads. */
  defaultMain: number;
  defaultProcess: number;
  /** Predicted and measured msg/s on this machine (2 cores shared with the sink). */
  check: { threads: number; predicted: number; measured: number }[];
}
let model: ThreadModel | undefined;

/**
 * msg/s with `cores` free cores and `threads` build threads: bounded by the
 * sending thread (one core), the build threads (one core each) and the
 * process's CPU per message over the cores it has.
 */
function modelRate(m: { main: number; threads: number; rest: number }, cores: number, threads: number): number {
  return Math.min(1e6 / m.main, (threads * 1e6) / m.threads, (cores * 1e6) / (m.main + m.threads + m.rest));
}

function threadModel(figures: ThroughputFigures): void {
  const med = (name: RunnerName, key: keyof RoundFigures) => median(figures[name]!.map((r) => r[key]));
  const perThreads = (name: 'threads1' | 'threads2') => ({
    main: med(name, 'mainCpuUs'),
    threads: med(name, 'threadsCpuUs'),
    rest: Math.max(0, med(name, 'cpuUs') - med(name, 'mainCpuUs') - med(name, 'threadsCpuUs')),
  });
  const two = perThreads('threads2');
  const sink = med('threads2', 'sinkCpuUs');
  // Here the sink shares the 2 cores: it takes its CPU per message out of them.
  const check = ([1, 2] as const).map((threads) => {
    const m = perThreads(`threads${threads}`);
    const predicted = Math.min(
      1e6 / m.main,
      (threads * 1e6) / m.threads,
      (2 * 1e6) / (m.main + m.threads + m.rest + med(`threads${threads}`, 'sinkCpuUs')),
    );
    return { threads, predicted, measured: med(`threads${threads}`, 'rate') };
  });
  model = {
    ...two,
    sink,
    defaultMain: med('transport', 'mainCpuUs'),
    defaultProcess: med('transport', 'cpuUs'),
    check,
  };
  console.log(
    `  model (concurrency 5, buildThreads: 2): sending thread ${two.main.toFixed(0)} µs, build threads ${two.threads.toFixed(0)} µs, rest of the process ${two.rest.toFixed(0)} µs, sink ${sink.toFixed(0)} µs per message`,
  );
  for (const c of check) {
    console.log(
      `    here, buildThreads: ${c.threads}: predicted ${c.predicted.toFixed(0)} msg/s, measured ${c.measured.toFixed(0)} msg/s`,
    );
    rows.push({
      benchmark: 'build-thread model (reference)',
      case: `buildThreads: ${c.threads} on this machine (2 cores, the sink on them too): measured against the model's prediction`,
      value: c.measured,
      unit: 'msg/s',
      reference: 'model',
      referenceValue: c.predicted,
      ratio: c.measured / c.predicted,
      target: '-',
      met: true,
    });
  }
  for (const cores of [1, 2, 4, 8, 16]) {
    console.log(
      `    ${String(cores).padStart(2)} free cores: default ${Math.min(1e6 / model.defaultMain, (cores * 1e6) / model.defaultProcess).toFixed(0)} msg/s, buildThreads: 'auto' (${cores}) ${modelRate(two, cores, cores).toFixed(0)} msg/s`,
    );
  }
}

async function latencyBound(sinks: Sinks): Promise<void> {
  console.log('\nLatency-bound throughput: the sink answers after 50 ms');
  for (const [maxConnections, count] of [
    [5, 300],
    [50, 2500],
  ] as const) {
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: sinks.httpUrl, maxConnections, retry: false });
    const transporter = nodemailer.createTransport(transport);
    // Enough sends queued at once that the limit, not the caller, bounds the rate.
    const send = (sends: number) => rate(sends, maxConnections * 4, (n) => transporter.sendMail(message(n)));
    const rates = await interleaved(
      {
        delayed: async (sends) => {
          await sinks.setDelay(50);
          return send(sends);
        },
        // The same transport with no added latency: what the sender's CPU allows at all.
        ceiling: async (sends) => {
          await sinks.setDelay(0);
          return send(sends);
        },
      },
      3,
      count,
    );
    await sinks.setDelay(0);
    await transport.close();
    const ideal = maxConnections / 0.05;
    const measured = median(rates.delayed!);
    const ceiling = median(rates.ceiling!);
    console.log(
      `  maxConnections ${maxConnections}: with 50 ms ${rates.delayed!.map((r) => r.toFixed(0)).join(' ')} msg/s; without ${rates.ceiling!.map((r) => r.toFixed(0)).join(' ')} msg/s`,
    );
    record({
      benchmark: 'latency-bound',
      case: `maxConnections ${maxConnections}`,
      value: measured,
      unit: 'msg/s',
      reference: 'ideal maxConnections / 0.05 s',
      referenceValue: ideal,
      target: '>= 0.9',
      better: 'higher',
      targetRatio: 0.9,
    });
    rows.push({
      benchmark: 'latency-bound (reference)',
      case: `maxConnections ${maxConnections}, vs the same transport with no added latency`,
      value: measured,
      unit: 'msg/s',
      reference: 'CPU-bound ceiling min(ideal, transport at 0 ms)',
      referenceValue: Math.min(ideal, ceiling),
      ratio: measured / Math.min(ideal, ceiling),
      target: '-',
      met: true,
    });
  }
}

async function connections(sinks: Sinks): Promise<void> {
  console.log('\nConnections for 1,000 sends');
  await sinks.reset();
  const maxConnections = 5;
  const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: sinks.httpUrl, maxConnections, retry: false });
  const transporter = nodemailer.createTransport(transport);
  await rate(1000, 20, (n) => transporter.sendMail(message(n)));
  await transport.close();
  const stats = await sinks.stats();
  record({
    benchmark: 'connections',
    case: `1,000 sends, 20 callers, maxConnections ${maxConnections}`,
    value: stats.connections,
    unit: 'TCP connections',
    reference: 'maxConnections',
    referenceValue: maxConnections,
    target: '<= 1',
    better: 'lower',
    targetRatio: 1,
  });
}

const MEMORY_RUNS = 7;
/** Range of the single runs of each memory case, shown next to its median. */
const spread = new Map<string, string>();

async function memory(sinks: Sinks): Promise<void> {
  console.log(
    '\nMemory: one message with a 25 MB attachment (each case in a fresh process; the Buffer is allocated after the baseline)',
  );
  const file = join(tmpdir(), `eml-api-bench-${process.pid}.bin`);
  await writeFile(file, randomBytes(25 * 1024 * 1024));
  // Peak RSS of one run depends on when the garbage collector runs and how freed memory is reused: take the median.
  const once = async (source: string, mode: string) => {
    const { stdout } = await run(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', 'bench/memory-case.ts', sinks.httpUrl, source, mode, file],
      { cwd: ROOT, maxBuffer: 1024 * 1024 },
    );
    return (JSON.parse(stdout.trim().split('\n').at(-1)!) as { extraMb: number }).extraMb;
  };
  const measure = async (source: string, mode: string) => {
    const runs: number[] = [];
    for (let i = 0; i < MEMORY_RUNS; i++) runs.push(await once(source, mode));
    console.log(`    ${source}, ${mode}: ${runs.map((r) => r.toFixed(1)).join(', ')} MB`);
    spread.set(`${source} ${mode}`, `${Math.min(...runs).toFixed(0)}-${Math.max(...runs).toFixed(0)} MB`);
    return median(runs);
  };
  try {
    for (const [source, budget] of [
      ['buffer', 60],
      ['path', 24],
    ] as const) {
      const ours = await measure(source, 'transport');
      const floor = await measure(source, 'compile-only');
      const naive = await measure(source, 'naive');
      const inMemory = await measure(source, 'transport-no-spool');
      const onThread = await measure(source, 'transport-threads');
      console.log(
        `  ${source} (medians): transport ${ours.toFixed(1)} MB, Nodemailer build alone ${floor.toFixed(1)} MB, transport without spool ${inMemory.toFixed(1)} MB, naive build-then-encode ${naive.toFixed(1)} MB`,
      );
      record({
        benchmark: 'memory',
        case: `25 MB attachment from a ${source === 'buffer' ? 'Buffer' : 'file path'}, peak extra RSS (runs ${spread.get(`${source} transport`)})`,
        value: ours,
        unit: 'MB',
        reference: `budget ${budget} MB`,
        referenceValue: budget,
        target: '<= 1',
        better: 'lower',
        targetRatio: 1,
      });
      rows.push({
        benchmark: 'memory (reference)',
        case: `Nodemailer build alone (stream read and dropped), ${source} (runs ${spread.get(`${source} compile-only`)})`,
        value: floor,
        unit: 'MB',
        reference: 'transport',
        referenceValue: ours,
        ratio: floor / ours,
        target: '-',
        met: true,
      });
      rows.push({
        benchmark: 'memory (reference)',
        case: `naive build-then-encode, ${source}`,
        value: naive,
        unit: 'MB',
        reference: 'transport',
        referenceValue: ours,
        ratio: naive / ours,
        target: '-',
        met: true,
      });
      rows.push({
        benchmark: 'memory (reference)',
        case: `transport with spooling off, ${source}`,
        value: inMemory,
        unit: 'MB',
        reference: 'transport',
        referenceValue: ours,
        ratio: inMemory / ours,
        target: '-',
        met: true,
      });
      rows.push({
        benchmark: 'memory (reference)',
        case: `transport with buildThreads: 1 (${source === 'buffer' ? 'over 2 MiB in memory: built on the sending thread' : 'built on the thread'}), ${source} (runs ${spread.get(`${source} transport-threads`)})`,
        value: onThread,
        unit: 'MB',
        reference: 'transport',
        referenceValue: ours,
        ratio: onThread / ours,
        target: '-',
        met: true,
      });
    }
  } finally {
    await rm(file, { force: true });
  }
}

const RELAY_ROUNDS = 5;
const RELAY_COUNT = 800;

async function relay(sinks: Sinks): Promise<void> {
  const figures = await relayBenchmarks(sinks, interleaved, rate, RELAY_ROUNDS, RELAY_COUNT);
  const ratios = figures.relay.map((r, i) => r / figures.direct[i]!);
  const ratio = median(ratios);
  console.log(`    relay / direct per round: ${ratios.map((r) => r.toFixed(2)).join(' ')}`);
  const relayRate = median(figures.relay);
  rows.push({
    benchmark: 'relay throughput',
    case: `Nodemailer SMTP pool (${figures.concurrency}) → relay process → sink, vs the direct transport (${figures.concurrency} connections)`,
    value: relayRate,
    unit: 'msg/s',
    reference: 'direct transport, same run',
    referenceValue: median(figures.direct),
    ratio,
    target: '>= 0.5',
    met: ratio >= 0.5,
  });
  console.log(
    `relay throughput: ${relayRate.toFixed(1)} msg/s vs direct ${median(figures.direct).toFixed(1)} → median ratio ${ratio.toFixed(2)} (target >= 0.5) ${ratio >= 0.5 ? 'MET' : 'NOT MET'}`,
  );
  const runs = figures.memoryRuns;
  spread.set('relay', `${Math.min(...runs).toFixed(0)}-${Math.max(...runs).toFixed(0)} MB`);
  record({
    benchmark: 'relay memory',
    case: `one 25 MB message through the relay, peak extra RSS of the relay process (runs ${spread.get('relay')})`,
    value: median(runs),
    unit: 'MB',
    reference: 'budget 48 MB',
    referenceValue: 48,
    target: '<= 1',
    better: 'lower',
    targetRatio: 1,
  });
  const small = median(figures.smallRuns);
  rows.push({
    benchmark: 'relay memory (reference)',
    case: `one 8 MB message through the relay (runs ${Math.min(...figures.smallRuns).toFixed(0)}-${Math.max(...figures.smallRuns).toFixed(0)} MB): the peak does not grow with the message`,
    value: small,
    unit: 'MB',
    reference: '25 MB message',
    referenceValue: median(runs),
    ratio: small / median(runs),
    target: '-',
    met: true,
  });
}

/** The lean path's crossover, for the analysis. */
let leanCrossover: { size: number; leanUs: number; streamedUs: number; ratio: number }[] | undefined;

/**
 * Where uploading a message as one Buffer stops paying off against
 * streaming it: CPU per upload of each, by message size (a fresh process;
 * see bench/lean-crossover-case.ts). The lean path's limit
 * (LEAN_MESSAGE_BYTES, WHOLE_BODY_BYTES) comes from here.
 */
async function lean(sinks: Sinks): Promise<void> {
  console.log('\nLean uploads: one Buffer, one write, against a streamed upload, by message size (CPU per upload)');
  const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/lean-crossover-case.ts', sinks.httpUrl], {
    cwd: ROOT,
    maxBuffer: 1024 * 1024,
  });
  leanCrossover = JSON.parse(stdout.trim().split('\n').at(-1)!) as typeof leanCrossover;
  for (const r of leanCrossover!) {
    const kb = r.size / 1024;
    console.log(
      `    ${String(kb).padStart(4)} KiB: lean ${r.leanUs.toFixed(0)} µs, streamed ${r.streamedUs.toFixed(0)} µs, per-round ratio ${r.ratio.toFixed(2)}`,
    );
    rows.push({
      benchmark: 'lean upload (reference)',
      case: `${kb} KiB message, one Buffer and one write vs streamed in slices (CPU per upload; ratio: median of 7 paired rounds)`,
      value: r.leanUs,
      unit: 'µs',
      reference: 'streamed',
      referenceValue: r.streamedUs,
      ratio: r.ratio,
      target: '-',
      met: true,
    });
  }
}

/** What build threads cost in memory, idle after work (fresh processes, the built package). */
async function threadMemory(sinks: Sinks): Promise<void> {
  console.log(
    '\nMemory of build threads: RSS after 400 sends, against the same sends without threads (5 fresh processes each)',
  );
  await run('npm', ['run', 'build'], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
  const once = async (threads: number) => {
    const { stdout } = await run(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', 'bench/thread-memory-case.ts', sinks.httpUrl, String(threads)],
      { cwd: ROOT, maxBuffer: 1024 * 1024 },
    );
    return (JSON.parse(stdout.trim().split('\n').at(-1)!) as { extraMb: number }).extraMb;
  };
  const runs: Record<number, number[]> = { 0: [], 1: [], 2: [] };
  for (let i = 0; i < 5; i++) for (const threads of [0, 1, 2]) runs[threads]!.push(await once(threads));
  for (const threads of [0, 1, 2]) {
    console.log(`    ${threads} threads: ${runs[threads]!.map((r) => r.toFixed(1)).join(', ')} MB`);
  }
  const none = median(runs[0]!);
  for (const threads of [1, 2]) {
    rows.push({
      benchmark: 'thread memory (reference)',
      case: `buildThreads: ${threads}, idle after 400 sends, RSS above the same sends without threads (runs ${runs[threads]!.map((r) => (r - none).toFixed(0)).join(', ')} MB)`,
      value: median(runs[threads]!) - none,
      unit: 'MB',
      reference: '-',
      referenceValue: median(runs[threads]!) - none,
      ratio: 1,
      target: '-',
      met: true,
    });
  }
}

/** Why the relay-vs-Postfix section did not run on this machine, when it did not. */
let postfixSkipped: string | undefined;
/** Memory figures of the relay-vs-Postfix section, for BENCHMARKS.md. */
let postfixNotes: string[] = [];

async function relayVsPostfix(sinks: Sinks): Promise<void> {
  const result = await postfixBenchmarks(sinks);
  if ('skipped' in result) postfixSkipped = result.skipped;
  else {
    rows.push(...result.rows);
    postfixNotes = result.notes;
  }
}

let profileShares: { cpuMsPerMessage: number; shares: Record<string, number> } | undefined;

/**
 * Many sends queued at once with a 1.4 MB attachment each and 2 connections:
 * the transport builds a message only once a connection slot is free, as
 * Nodemailer's SMTP pool does, so memory follows maxConnections, not the
 * number of sends waiting.
 */
async function queuedMemory(sinks: Sinks): Promise<void> {
  console.log('\nMemory: 300 sends at once, a 1.4 MB attachment each, maxConnections 2 (fresh process each run)');
  await sinks.setDelay(5);
  const runs: number[] = [];
  try {
    for (let i = 0; i < 5; i++) {
      const { stdout } = await run(
        process.execPath,
        ['--expose-gc', '--import', 'tsx', 'bench/queued-memory-case.ts', sinks.httpUrl, '300', '2'],
        { cwd: ROOT, maxBuffer: 1024 * 1024 },
      );
      runs.push((JSON.parse(stdout.trim().split('\n').at(-1)!) as { extraMb: number }).extraMb);
    }
  } finally {
    await sinks.setDelay(0);
  }
  console.log(`    runs: ${runs.map((r) => r.toFixed(1)).join(', ')} MB`);
  record({
    benchmark: 'memory',
    case: `300 sends queued at once, 1.4 MB attachment each, maxConnections 2, peak extra RSS (runs ${Math.min(...runs).toFixed(0)}-${Math.max(...runs).toFixed(0)} MB)`,
    value: median(runs),
    unit: 'MB',
    reference: 'budget 150 MB',
    referenceValue: 150,
    target: '<= 1',
    better: 'lower',
    targetRatio: 1,
  });
}

/**
 * How the cost of parsing adversarial input grows with its size, for each
 * parser that reads all of its input (in a fresh process): 100 KB against
 * 10 KB of the worst shape found at 10 KB. Linear is about 10, quadratic 100.
 */
async function parseCost(): Promise<void> {
  console.log('\nParsing adversarial input: 100 KB against 10 KB of the worst shape (3 fresh processes, median)');
  const results: { parser: string; shape: string; smallMs: number; largeMs: number; ratio: number }[][] = [];
  for (let i = 0; i < 3; i++) {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/parse-cost-case.ts'], {
      cwd: ROOT,
      maxBuffer: 1024 * 1024,
    });
    results.push(JSON.parse(stdout.trim().split('\n').at(-1)!) as (typeof results)[number]);
  }
  for (const [index, first] of results[0]!.entries()) {
    const ratios = results.map((r) => r[index]!.ratio);
    const small = median(results.map((r) => r[index]!.smallMs));
    const large = median(results.map((r) => r[index]!.largeMs));
    console.log(`    ${first.parser} (${first.shape}): ${ratios.map((r) => r.toFixed(1)).join(', ')}`);
    record({
      benchmark: 'parse cost',
      case: `${first.parser}, adversarial "${first.shape}" input: 100 KB vs 10 KB (per-run ratios ${ratios.map((r) => r.toFixed(1)).join(', ')})`,
      value: large,
      unit: 'ms',
      reference: '10 KB',
      referenceValue: small,
      target: '<= 30 (linear: 10; quadratic: 100)',
      better: 'lower',
      targetRatio: 30,
    });
  }
}

/**
 * The emulator's inbox at size (fresh process): list and search latency over
 * HTTP at 1,000 and 10,000 messages, and RSS from 10,000 to 50,000 sends with
 * the default retention (10,000 messages kept): flat once the inbox is full.
 */
async function inbox(): Promise<void> {
  console.log(
    '\nThe emulator inbox: list and search at 1,000 and 10,000 messages, RSS up to 50,000 sends (fresh process)',
  );
  const { stdout } = await run(process.execPath, ['--expose-gc', '--import', 'tsx', 'bench/inbox-case.ts'], {
    cwd: ROOT,
    maxBuffer: 1024 * 1024,
  });
  const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as {
    emptyRss: number;
    at1k: Record<string, number>;
    at10k: Record<string, number>;
    rssAfter: Record<string, number>;
    kept: number;
    sendSeconds: number;
  };
  for (const name of Object.keys(result.at1k)) {
    console.log(
      `    ${name}: ${result.at1k[name]!.toFixed(2)} ms at 1,000, ${result.at10k[name]!.toFixed(2)} ms at 10,000`,
    );
  }
  console.log(
    `    RSS: ${result.emptyRss.toFixed(0)} MB empty; ${Object.entries(result.rssAfter)
      .map(([n, mb]) => `${mb.toFixed(0)} MB after ${n}`)
      .join(', ')} (${result.kept} kept; sends took ${result.sendSeconds.toFixed(0)} s)`,
  );
  for (const [name, label, target] of [
    ['list', 'list (Mailpit API, newest 50)', 2],
    ['searchSubject', 'search subject:invoice (Mailpit API)', 20],
    ['searchText', 'search a quoted phrase (Mailpit API)', 20],
    ['inboxPage', 'web inbox page', 2],
  ] as const) {
    record({
      benchmark: 'emulator inbox',
      case: `${label}: median latency at 10,000 messages (${result.at10k[name]!.toFixed(2)} ms)`,
      value: result.at10k[name]!,
      unit: 'ms',
      reference: 'at 1,000 messages',
      referenceValue: result.at1k[name]!,
      target: `<= ${target}`,
      better: 'lower',
      targetRatio: target,
    });
  }
  // The first turnover of the inbox grows V8's heap and the allocator's arenas once; from then on RSS stays flat.
  record({
    benchmark: 'emulator inbox',
    case: `RSS after 50,000 sends, default retention (10,000 kept; ${result.emptyRss.toFixed(0)} MB empty, ${result.rssAfter[10000]!.toFixed(0)} MB after 10,000)`,
    value: result.rssAfter[50000]!,
    unit: 'MB',
    reference: 'after 20,000 sends',
    referenceValue: result.rssAfter[20000]!,
    target: '<= 1.2 (flat)',
    better: 'lower',
    targetRatio: 1.2,
  });
}

async function profile(sinks: Sinks): Promise<void> {
  console.log("\nProfile: where the sender's CPU goes (transport, concurrency 5, 3,000 messages, fresh process)");
  await run('npm', ['run', 'build'], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
  const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/profile-case.ts', sinks.httpUrl], {
    cwd: ROOT,
    maxBuffer: 1024 * 1024,
  });
  profileShares = JSON.parse(stdout.trim().split('\n').at(-1)!) as typeof profileShares;
  console.log(`  ${profileShares!.cpuMsPerMessage.toFixed(2)} ms of sampled time per message`);
  for (const [category, share] of Object.entries(profileShares!.shares)) {
    console.log(`  ${(share * 100).toFixed(1).padStart(5)}%  ${category}`);
  }
}

/** One decimal, two below 10 (CPU ms per message). */
const fixed = (value: number) => value.toFixed(Math.abs(value) < 10 ? 2 : 1);

function markdown(): string {
  const lines = [
    '# Benchmarks',
    '',
    `Latest run: ${new Date().toISOString()} on ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGb} GiB, Node ${machine.node}.`,
    '',
    'Reproduce with `npm ci && npm run bench` (14-20 minutes on 2 cores; `npm run bench -- --only <section>` runs one section (throughput, latency, connections, memory, queued, parsing, lean, threads, profile, relay, postfix, inbox, queue, scrape) and prints it).',
    'Sinks run in a separate process; each memory case runs in a fresh process; the outbox cases use a redis-server started for the run.',
    'Every figure is compared with a reference measured in the same run. Throughput: the transport (the built package, as apps run it) and its references run in',
    `${THROUGHPUT_ROUNDS} interleaved rounds of ${THROUGHPUT_COUNT} messages (10 KB HTML and a 2 KB attachment) after a warm-up; values are medians and`,
    'each ratio is the median of the per-round ratios, because the speed of a shared machine drifts by tens of percent between',
    'seconds. Latency-bound figures are medians of 3 rounds, interleaved with the same transport and no added latency.',
    'Memory figures are the median over 7 fresh processes of the peak RSS (sampled every millisecond) above a warmed-up baseline; for the Buffer case the 25 MB',
    'Buffer itself is allocated after the baseline and counts.',
    '',
    '| benchmark | case | value | reference | ratio | target | met |',
    '|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.benchmark} | ${r.case} | ${fixed(r.value)} ${r.unit} | ${r.reference}${r.reference === '-' ? '' : `: ${fixed(r.referenceValue)}`} | ${r.ratio.toFixed(2)} | ${r.target} | ${r.target === '-' ? '' : r.met ? 'yes' : '**no**'} |`,
    ),
    '',
    ...(postfixSkipped === undefined ? [] : [`Relay vs Postfix: skipped on this machine (${postfixSkipped}).`, '']),
    ...(postfixNotes.length === 0 ? [] : ['Relay vs Postfix, memory:', '', ...postfixNotes.map((n) => `- ${n}`), '']),
  ];
  if (profileShares) {
    lines.push(
      "## Where the sender's CPU goes",
      '',
      `The throughput case (transport, concurrency 5, 3,000 messages) under V8's sampling profiler in a fresh process:`,
      `${profileShares.cpuMsPerMessage.toFixed(2)} ms of sampled time per message. Each sample is charged to the nearest library frame`,
      "on its stack (Node internals called by Nodemailer count as Nodemailer; Node's native socket writes count apart, as",
      "the kernel's loopback work: the request's one write goes through this package's connector, which made it look like",
      'its own in earlier runs).',
      '',
      '| where | share |',
      '|---|---|',
      ...Object.entries(profileShares.shares).map(([k, v]) => `| ${k} | ${(v * 100).toFixed(1)}% |`),
      '',
    );
  }
  lines.push(...ANALYSIS, ...threadsAndLeanAnalysis());
  return lines.join('\n');
}

/** What the build-thread and lean-path figures of this run say, with the numbers of this run. */
function threadsAndLeanAnalysis(): string[] {
  const lines = ['## Build threads and the lean path', ''];
  if (model) {
    const m = model;
    const defaultRate = (cores: number) => Math.min(1e6 / m.defaultMain, (cores * 1e6) / m.defaultProcess);
    lines.push(
      '- **A model of msg/s against cores.** Per message, with `buildThreads: 2` at concurrency 5 (medians of the rounds',
      `  above; CPU read from /proc, so waiting for a core on a loaded machine does not count): the sending thread ${m.main.toFixed(0)} µs,`,
      `  the build threads ${m.threads.toFixed(0)} µs together, the rest of the process (V8's collector helpers, libuv) ${m.rest.toFixed(0)} µs; without`,
      `  threads the sending thread spends ${m.defaultMain.toFixed(0)} µs and the process ${m.defaultProcess.toFixed(0)} µs. With \`c\` free cores and \`t\``,
      '  build threads the rate is bounded by the sending thread (one core), the threads (one core each) and the',
      '  process over its cores: `min(1/main, t/threads, c/(main + threads + rest))`, with the service elsewhere:',
      '',
      "  | free cores | without build threads | `buildThreads: 'auto'` (one per core) |",
      '  |---|---|---|',
      ...[1, 2, 4, 8, 16].map(
        (cores) =>
          `  | ${cores} | ${defaultRate(cores).toFixed(0)} msg/s | ${modelRate(m, cores, cores).toFixed(0)} msg/s |`,
      ),
      '',
      `  Checked here, where the sink (${m.sink.toFixed(0)} µs a message) shares the 2 cores, so the process bound is`,
      `  \`2/(main + threads + rest + sink)\`: ${m.check.map((c) => `\`buildThreads: ${c.threads}\` predicted ${c.predicted.toFixed(0)}, measured ${c.measured.toFixed(0)} msg/s`).join('; ')}.`,
      '  Other jobs on the machine take cores too (the load is given with each row), so the measured rates fall below',
      '  the 2-core prediction by about their share.',
      '- **What the sending thread keeps with build threads.** On these 2 cores the build threads, the sink and the',
      '  sending thread take turns, and the sending thread waits for a core (the schedstat rows) for a good part of its',
      "  busy time. Run by hand with the build thread's work taken away (a build thread changed to answer every message",
      "  with the first one's bytes at once), the sending thread spent 413-418 µs of CPU per message against 1,235-1,290",
      "  without threads (0.33-0.34), and was busy 463-479 µs (0.36-0.37): Nodemailer's `sendMail` (100-170 µs here,",
      '  ten `randomBytes` calls of 3-5 µs among it), the request (120-160 µs), the post to the thread and its answer',
      '  (posting a message with a 10 KB body costs 11-14 µs in a loop, more when it wakes the thread), and the',
      "  transport's own bookkeeping. The 0.35 target needs cores the build threads do not take from the sending thread.",
    );
  }
  if (leanCrossover) {
    const wins = leanCrossover.filter((r) => r.ratio < 1).map((r) => r.size / 1024);
    const loses = leanCrossover.filter((r) => r.ratio >= 1).map((r) => r.size / 1024);
    lines.push(
      '- **The lean path.** Uploading a message as one Buffer (encoded at once, one write) against streaming it in',
      `  slices, CPU per upload, round by round: one Buffer was cheaper at ${wins.join(', ') || 'no'} KiB and not at`,
      `  ${loses.join(', ') || 'no'} KiB (see the lean upload rows). In the runs made for this change it saved 15-30% up to 96 KiB,`,
      '  broke even at 112 KiB and cost 5-20% more from 128 KiB on. Messages up to 96 KiB (`LEAN_MESSAGE_BYTES`, a',
      '  128 KiB body: `WHOLE_BODY_BYTES`) take the lean path; larger ones stream, as before, and keep their memory flat.',
      '  Single sizes are noisy on a shared machine (a run can flip one of them), hence the paired rounds.',
    );
  }
  const memory = rows.filter((r) => r.benchmark === 'thread memory (reference)');
  if (memory.length > 0) {
    lines.push(
      `- **A thread's memory.** ${memory.map((r) => `${r.case.split(',')[0]}: ${r.value.toFixed(0)} MB`).join('; ')} of RSS above the`,
      '  same sends without threads: a worker thread is a V8 isolate with its own heap (about 10 MB bare), Nodemailer',
      '  loaded in it and the young generation it grew while building. A 25 MB file attachment built on a thread peaks',
      "  higher than on the sending thread (the memory reference rows): the thread's heap grows for that build on top of",
      "  the sending thread's, so very large messages from files cost more memory with threads (a Buffer that large stays",
      '  on the sending thread anyway).',
    );
  }
  lines.push(`- **Load.** \`uptime\` when the run ended: ${loadAtEnd}.`, '');
  return lines;
}

/** Fixed text: what the figures mean and what bounds the targets that are not met. */
const ANALYSIS = [
  '## Reading the figures',
  '',
  '- **The transport against the ideal sender.** The ideal sender (bench/ideal-sender.ts) is what the transport does',
  '  at its least: Nodemailer builds the message to a Buffer (its stream transport), then Base64, `JSON.stringify` and',
  "  one undici request. The transport keeps Nodemailer's build as it is (plugins, DKIM) and adds what the ideal",
  '  leaves out: the connection slot taken before the build, `timeouts.total`, retries, the idempotency key, the envelope',
  '  checks, spans and metrics when enabled, spooling past `spool.threshold`. It saves where the ideal pays: the tree is',
  '  written straight into the spool (no stream pipeline), the body is framed without `JSON.stringify` (Base64 needs no',
  "  escaping) and goes to undici's dispatcher as one Buffer, the answer is read without a body stream.",
  '- **Against SMTP.** Nodemailer builds the message for SMTP too, so both transports share the same dominant cost;',
  '  the difference is the protocol work per message, which is a small part of the total on a loopback connection.',
  '  The 1.4 target is held by the transport with build threads, which takes the build off the sending thread (see',
  '  "Build threads and the lean path" below).',
  '- **Latency-bound, 50 connections.** The sender builds 1,400-1,500 msg/s at 0 ms (the reference row), above the',
  '  ideal of 1,000, yet sent about 600 msg/s against the 50 ms sink: builds started together shared the thread turn by',
  '  turn (Nodemailer builds over several turns of the event loop), each ending about when the last did while its',
  '  connection slot waited. The sending thread now builds at most 8 at once, in slot order (770-850 msg/s in the runs',
  '  made for the change); what remains is the answers arriving in bursts (the 50 sends of a round go out close together',
  '  and their answers come back together), each burst served one build after another.',
  '- **Memory.** Spooling keeps the Base64 and JSON framing out of memory; the remaining peak is mostly',
  "  Nodemailer's own encoding buffers (see the 'build alone' rows) and V8's young generation growing to its default",
  '  size while chunks stream through (with `--max-semi-space-size=2` the build alone drops from ~16 MB to ~3 MB).',
  '  Peak RSS depends on when the garbage collector runs and how freed memory is reused, so single runs vary by',
  '  tens of MB (the range is shown next to each median; a run near 0 reused memory the process already held after',
  '  its warm-up).',
  '- **Memory of queued sends.** A send takes its connection slot before its message is built, so with',
  '  `maxConnections: 2` at most two of the 300 messages exist built at a time; the peak is those two (their Base64',
  "  upload bodies included), Nodemailer's working memory and V8's young generation. The code before this change built",
  '  every queued message first: the same case measured +1,171 and +1,188 MB in two runs against the same sink.',
  '- **Parse cost.** For each parser that reads all of its input, the worst of nine adversarial shapes at 10 KB is timed',
  '  again at 100 KB (median of many calls, in 3 fresh processes). A linear parser costs about 10 times more, a quadratic',
  '  one 100 times, the cubic regular expressions this replaced 1,000 times (3 KB took 11.8 s). Single calls of a few ms',
  '  are noisy on a shared machine, hence the per-run ratios beside each figure.',
  '- **Outbox enqueue.** `sendMail` through `EmlApiQueueTransport` builds the message exactly as the direct transport',
  "  does, then writes it to Redis and adds a job, without waiting for the service. Both are bound by Nodemailer's build,",
  '  so the rates are close (a direct send spends the time the producer spends on Redis on the HTTP request).',
  '- **Outbox drain.** Each worker process runs `concurrency` sends at once; the ideal is linear in workers × concurrency',
  '  over the 50 ms latency. Per job a worker makes a few Redis round trips (take the job, check and read its content,',
  '  complete it, delete the content) besides the request; on 2 cores the worker processes, Redis, the sink and the',
  '  benchmark share the CPU.',
  "- **Outbox memory.** The message is 34 MiB as EML (the 25 MB attachment Base64-encoded inside). The producer's figure",
  "  includes the 25 MB Buffer the caller allocates after the baseline and Nodemailer's build; the message goes to a",
  '  spool file and from there to Redis in 1 MiB chunks, and the worker reads it back in 1 MiB chunks and encodes it as it',
  '  uploads, so neither holds the message whole; what remains of the peak is chunks V8 has not collected yet. V8',
  "  collects Buffers' memory when it has grown by about 64 MiB since its last full collection, and the worker allocates",
  "  about 4 bytes per byte of the message (Redis's socket reads, the reply parser's copy, the Base64 text and its bytes):",
  '  a 34 MiB message reaches that limit, so its peak sits near 64 MB unless a collection happens to run mid-send (the',
  '  low runs: the figures are bimodal, and a median of 5 runs moves by 10-15 MB between runs of the same code; an',
  '  11 MiB message peaks at about 44 MB).',
  '- **Relay.** The relay is a separate process between Nodemailer and the sink: each message is built by Nodemailer,',
  '  sent over SMTP, parsed by smtp-server, spooled and hashed, then uploaded, so it costs a second protocol hop on the',
  '  same two cores the direct transport has to itself. Its memory stays flat: the message streams to the spool file',
  '  (past 512 KiB) and is uploaded from it in Base64 slices; the peak above the baseline is the same for 8 MB and 25 MB',
  "  (V8's heap and buffer pools growing while chunks pass through), not a copy of the message.",
  "- **Relay vs Postfix.** Postfix's own load generator, `smtp-source` (20 sessions, 10 KB messages), sends to a Postfix",
  '  instance made for the run (its own `main.cf` and `master.cf` in a temporary folder, `smtpd` on a loopback port, every',
  '  message relayed to `smtp-sink`) and to the relay, one after the other in every round; each ratio is the median of the',
  "  per-round ratios. Two client shapes: a connection per message (smtp-source's default; cron, PHP's `mail()` and most",
  '  scripts send this way) and connections reused (`-d`). The relay is the built CLI as operators run it (`node',
  '  dist/cli.js relay`), one process (no `--processes`) and `--processes 2` (a primary and two relay processes). A',
  "  `250` does not promise the same thing everywhere: Postfix's says the message is in its queue on disk (written and",
  "  fsynced); the direct relay's that the HTTP sink took it; store-and-forward's that Redis holds it (append-only file,",
  '  fsync every second). Postfix delivers to smtp-sink while it accepts, and one `eml-api worker` (concurrency 20)',
  '  sends the outbox to the HTTP sink while the relay accepts; each runner waits until everything it accepted is',
  '  delivered before the next one runs, and its CPU counts until then. CPU per message is read from /proc for each',
  "  process tree (a process and all under it, the ones that ended included): all of Postfix's processes (master,",
  '  smtpd, cleanup, qmgr, smtp...), the relay (with `--processes`, the primary and its processes), the worker, Redis;',
  '  the sinks are the destinations and are shown apart. The whole store-and-forward path (relay + worker + Redis) is',
  "  held to 0.8 of Postfix's. On 2 cores smtp-source, the server under test and the sink share the machine, so a",
  '  second relay process adds cost (the primary hands each connection to a process in turn, and the two processes',
  '  compete with the load generator) and no capacity; it is measured to show what a process costs, and for hosts',
  '  with the cores to use it.',
  "- **The relay's own CPU with the outbox.** With the worker draining, the store-and-forward relay shares the 2 cores",
  '  with the worker and Redis, which the direct relay does not (the sinks run in both), and its CPU per message counts',
  '  that competition (more switches between processes, colder caches). The reference rows "with its worker stopped',
  '  while it accepts" stop the worker (SIGSTOP) until the relay has accepted every message, then let it drain: the',
  "  relay's own work against the direct relay's. Per message the outbox path makes one Redis command where the direct",
  "  relay makes one HTTP request; BullMQ's add command is made once per queue, options and job name and filled in for",
  "  each job (building a BullMQ Job and packing its arguments for every job took about 58 µs of the relay's CPU per",
  '  message, by a profile of `eml-api relay --outbox` under smtp-source). With 2 processes and connections reused the',
  '  outbox relay still costs more than the direct one, worker stopped or not; with `NODE_CLUSTER_SCHED_POLICY=none`',
  "  (each process accepting on the shared socket instead of the primary handing connections over) the relay's CPU per",
  '  message fell by 15-18% with 2 processes in runs made by hand (its primary from 180-195 µs to 8-18 µs a message),',
  '  but the kernel shared connections out unevenly: 200 idle connections opened 5 ms apart went 166, 20, 10 and 4 to',
  "  4 processes (100 at 20 ms to 2: 98 and 2), where each process has its own `--max-clients`; the primary's turns",
  '  gave 50 each. The primary still hands connections over.',
  "- **Where store-and-forward's time goes** (`npx tsx bench/relay-store-profile.ts`; the relay, the worker and Redis",
  '  each under a profiler or MONITOR, run by hand). Per message the relay sends Redis one command: a script that',
  "  checks the content, runs BullMQ's add script and reads the job back (content up to 64 KiB inline in the job),",
  '  15 commands with those inside it. The worker takes the job, then records the send in the script that completes',
  "  it and takes the next, or waits on the queue's marker: about 51-57 commands per message in all. In the relay,",
  "  replies and Redis writes are one socket write each (mostly the kernel's loopback work), smtp-server's parsing",
  "  and Node's streams most of the rest; the relay's own code is spread thin (header reading, the envelope plan,",
  "  the identity's HMAC and SHA-256, the spool). In the worker the socket writes",
  "  to Redis and to the service lead, then BullMQ's job (de)serialisation. With a connection per message a worker",
  '  that waits for each job costs more per job than one that finds the next job waiting (its slots wake on the',
  "  queue's marker; a busy worker gets the next job from the script that completes the last one).",
  '',
];

// `npm run bench -- --only queue` runs one section and prints it, leaving results.json and BENCHMARKS.md as they are.
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : undefined;
const sections: Record<string, (sinks: Sinks) => Promise<void>> = {
  throughput,
  latency: latencyBound,
  connections,
  memory,
  queued: queuedMemory,
  parsing: parseCost,
  lean,
  threads: threadMemory,
  profile,
  relay,
  postfix: relayVsPostfix,
  inbox,
  queue: async (sinks) => {
    const queueRows = await queueBenchmarks(sinks);
    rows.push(...queueRows);
    for (const row of queueRows) {
      console.log(
        `${row.benchmark} | ${row.case}: ${row.value.toFixed(1)} ${row.unit} vs ${row.reference} ${row.referenceValue.toFixed(1)} → ratio ${row.ratio.toFixed(2)}`,
      );
    }
  },
  scrape: async () => {
    const scrapeRows = await scrapeBenchmarks();
    rows.push(...scrapeRows);
    for (const row of scrapeRows) {
      console.log(
        `${row.benchmark} | ${row.case}: ${row.value.toFixed(2)} ${row.unit} vs ${row.referenceValue.toFixed(2)} → ratio ${row.ratio.toFixed(4)}`,
      );
    }
  },
};
if (only !== undefined && !Object.hasOwn(sections, only)) {
  throw new Error(`--only: expected one of ${Object.keys(sections).join(', ')}`);
}

const started = performance.now();
console.log(`Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGb} GiB, Node ${machine.node}`);
const sinks = await startSinks();
try {
  for (const [name, section] of Object.entries(sections)) {
    if (only === undefined || only === name) await section(sinks);
  }
} finally {
  await sinks.stop();
}
const loadAtEnd = loadavg()
  .map((l) => l.toFixed(2))
  .join(', ');
console.log(`Load average (1, 5, 15 min) at the end: ${loadAtEnd}`);
if (only !== undefined) process.exit(0);
await writeFile(
  join(ROOT, 'bench', 'results.json'),
  `${JSON.stringify({ machine, date: new Date().toISOString(), rows }, null, 2)}\n`,
);
await writeFile(join(ROOT, 'BENCHMARKS.md'), markdown());
console.log(
  `\nDone in ${((performance.now() - started) / 1000).toFixed(0)} s; wrote bench/results.json and BENCHMARKS.md`,
);
