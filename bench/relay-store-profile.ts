/**
 * Where store-and-forward's time goes (`eml-api relay --redis`), run by hand:
 *
 *   npx tsx bench/relay-store-profile.ts
 *
 * smtp-source (20 sessions, 10 KB; one connection per message, then
 * connections reused) sends to the relay in its own process, storing in a
 * redis-server made for the run (append-only file, fsync every second, as
 * docs/outbox.md asks). Prints:
 * - the Redis commands per message (INFO commandstats over the run) and the
 *   commands of one message in order (MONITOR);
 * - the relay process's CPU profile (V8's sampling profiler), each sample
 *   charged to the nearest library frame on its stack, and the functions
 *   with the most self time, with their callers;
 * - the acceptance rate with 0, 1 and 2 outbox worker processes draining the
 *   queue to the HTTP sink meanwhile, in interleaved rounds: what the workers
 *   sent, the Redis commands and the CPU time of each process per message.
 * Needs smtp-source (Debian's postfix package), redis-server and Linux's /proc.
 * `RELAY_PROFILE_COUNT` and `RELAY_PROFILE_ROUNDS` change the messages per run and the rounds;
 * `RELAY_PROFILE_KEEP=<file>` keeps the relay's .cpuprofile; `RELAY_PROFILE_ONLY=1` stops after it.
 */
import { readFileSync } from 'node:fs';
import { copyFile, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startWorkerProcess, type WorkerProcess } from '../test/helpers/outbox.js';
import { startRedisServer } from '../test/helpers/redis-server.js';
import { findSmtpSource, smtpSourceRate } from './postfix-bench.js';
import { startRelayProcess, stopRelay } from './relay-bench.js';
import { startSinks } from './sinks.js';

const QUEUE_NAME = 'bench-relay-profile';
const COUNT = Number(process.env.RELAY_PROFILE_COUNT ?? 2000);
const ROUNDS = Number(process.env.RELAY_PROFILE_ROUNDS ?? 3);

const smtpSource = findSmtpSource();
if (!smtpSource) {
  console.log('smtp-source not found (Debian/Ubuntu: apt-get install postfix): nothing to profile');
  process.exit(0);
}
/** Ends the run after the profile (`RELAY_PROFILE_ONLY`), through the cleanup. */
class Skip extends Error {}
const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;

/** CPU time (user + system) of a process, or (`children`) of this process's children that exited, in ms. */
function cpuMs(pid: number | 'children'): number {
  const stat = readFileSync(`/proc/${pid === 'children' ? 'self' : pid}/stat`, 'utf8');
  // The fields after the command name: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [user, system] = pid === 'children' ? [fields[13], fields[14]] : [fields[11], fields[12]];
  // Linux counts in clock ticks of 10 ms (USER_HZ 100).
  return (Number(user) + Number(system)) * 10;
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

/** The library a frame belongs to, or undefined for Node's own code (charged to the caller). */
function categoryOf(frame: ProfileNode['callFrame']): string | undefined {
  const { url, functionName } = frame;
  if (functionName === '(idle)') return 'idle';
  if (functionName === '(garbage collector)') return 'garbage collector';
  if (functionName === '(program)') return 'V8 (program)';
  for (const lib of ['smtp-server', 'bullmq', 'ioredis', 'undici', 'msgpackr', 'tsx']) {
    if (url.includes(`/node_modules/${lib}/`)) return lib;
  }
  if (url.includes('/node_modules/')) return 'other libraries';
  const own = /\/src\/([^/]+)\//.exec(url);
  if (own) return `nodemailer-eml-api src/${own[1]}`;
  return undefined;
}

const frameName = (node: ProfileNode) =>
  `${node.callFrame.functionName || '(anonymous)'} ${node.callFrame.url.replace(/^.*\/(node_modules|src)\//, '$1/')}`.trim();

function summarize(profile: { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] }, messages: number) {
  const parent = new Map<number, number>();
  const byId = new Map<number, ProfileNode>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const categoryCache = new Map<number, string>();
  const categorize = (id: number) => {
    const known = categoryCache.get(id);
    if (known) return known;
    let at: number | undefined = id;
    let category = 'Node core (event loop, streams, sockets)';
    while (at !== undefined) {
      const found = categoryOf(byId.get(at)!.callFrame);
      if (found) {
        category = found;
        break;
      }
      at = parent.get(at);
    }
    categoryCache.set(id, category);
    return category;
  };
  const totals = new Map<string, number>();
  const selfTime = new Map<string, number>();
  let all = 0;
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const delta = profile.timeDeltas[i] ?? 0;
    all += delta;
    const category = categorize(id);
    if (category !== 'idle') busy += delta;
    totals.set(category, (totals.get(category) ?? 0) + delta);
    const name = frameName(byId.get(id)!);
    selfTime.set(name, (selfTime.get(name) ?? 0) + delta);
  });
  console.log(
    `  ${(busy / 1000 / messages).toFixed(3)} ms of CPU per message in the relay process (${((busy / all) * 100).toFixed(0)}% busy)`,
  );
  for (const [category, time] of [...totals].sort((a, b) => b[1] - a[1])) {
    console.log(`    ${((time / all) * 100).toFixed(1).padStart(5)}%  ${category}`);
  }
  console.log('  top functions (self time), with the library frames they were sampled under most:');
  for (const [name, time] of [...selfTime].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
    console.log(`    ${((time / all) * 100).toFixed(1).padStart(5)}%  ${name}`);
    if (name.startsWith('(')) continue;
    const callers = new Map<string, number>();
    profile.samples.forEach((id, i) => {
      if (frameName(byId.get(id)!) !== name) return;
      const chain: string[] = [];
      let at = parent.get(id);
      while (at !== undefined && chain.length < 4) {
        const node = byId.get(at)!;
        if (node.callFrame.url.includes('/node_modules/') || node.callFrame.url.includes('/src/')) {
          chain.push(frameName(node));
        }
        at = parent.get(at);
      }
      const key = chain.join(' < ') || '(no library frame)';
      callers.set(key, (callers.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0));
    });
    for (const [key, t] of [...callers].sort((a, b) => b[1] - a[1]).slice(0, 3)) {
      console.log(`             ${((t / all) * 100).toFixed(1).padStart(5)}% under ${key}`);
    }
  }
}

const sinks = await startSinks();
const redis = await startRedisServer({ appendonly: true, appendfsync: 'everysec' });
const profileDir = await mkdtemp(join(tmpdir(), 'eml-api-relay-profile-'));
// Everything the relay stored (jobs and their content) goes between runs.
const empty = () => redis.client.flushall();
try {
  console.log(
    `Load average at the start: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  const relay = await startRelayProcess(sinks.httpUrl, { redisUrl: redis.url, queueName: QUEUE_NAME }, [
    '--cpu-prof',
    `--cpu-prof-dir=${profileDir}`,
    '--cpu-prof-interval=200',
  ]);
  let messages = 0;
  for (const reuse of [false, true]) {
    await smtpSourceRate(smtpSource, relay.port, 400, reuse);
    await empty();
    await redis.client.config('RESETSTAT');
    const rate = await smtpSourceRate(smtpSource, relay.port, COUNT, reuse);
    messages += COUNT + 400;
    const info = await redis.client.info('commandstats');
    const calls = new Map<string, number>();
    for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      if (match[1] !== 'config|resetstat') calls.set(match[1]!, Number(match[2]));
    }
    const total = [...calls.values()].reduce((a, b) => a + b, 0);
    console.log(
      `\n${reuse ? 'Connections reused' : 'One connection per message'}: ${rate.toFixed(0)} msg/s; Redis commands per message: ${(total / COUNT).toFixed(2)}`,
    );
    for (const [name, n] of [...calls].sort((a, b) => b[1] - a[1])) {
      console.log(`    ${(n / COUNT).toFixed(2).padStart(6)}  ${name}`);
    }
    await empty();
  }

  // One message, command by command.
  const monitorClient = new Redis(redis.url);
  const monitor = await monitorClient.monitor();
  const seen: string[] = [];
  monitor.on('monitor', (_time: string, args: string[]) => {
    const [name, ...rest] = args;
    seen.push(name!.toLowerCase() === 'evalsha' ? `EVALSHA (${rest[1]} keys: ${rest[2]} ...)` : name!.toUpperCase());
  });
  await new Promise((resolve) => setTimeout(resolve, 200));
  await smtpSourceRate(smtpSource, relay.port, 1, false);
  await new Promise((resolve) => setTimeout(resolve, 200));
  monitor.disconnect();
  monitorClient.disconnect();
  console.log(`\nOne message's Redis commands, in order (${seen.length}):\n    ${seen.join('\n    ')}`);
  messages += 1;

  await stopRelay(relay.child);
  const [file] = (await readdir(profileDir)).filter((f) => f.endsWith('.cpuprofile'));
  console.log(`\nRelay process CPU profile (${messages} messages, both shapes, warm-ups included):`);
  summarize(JSON.parse(await readFile(join(profileDir, file!), 'utf8')), messages);
  if (process.env.RELAY_PROFILE_KEEP) {
    await copyFile(join(profileDir, file!), process.env.RELAY_PROFILE_KEEP);
    console.log(`  (profile kept in ${process.env.RELAY_PROFILE_KEEP}: open it in Chrome's DevTools)`);
  }

  // Acceptance while outbox workers drain the queue to the HTTP sink.
  if (process.env.RELAY_PROFILE_ONLY) throw new Skip();
  console.log(`\nAcceptance with outbox workers draining meanwhile (${ROUNDS} interleaved rounds of ${COUNT}):`);
  const plain = await startRelayProcess(sinks.httpUrl, { redisUrl: redis.url, queueName: QUEUE_NAME });
  const redisPid = Number(/process_id:(\d+)/.exec(await redis.client.info('server'))![1]);
  try {
    for (const reuse of [false, true]) {
      const configs = ['0 workers', '1 worker', '2 workers'];
      const results = new Map(
        configs.map((name) => [
          name,
          {
            accepted: [] as number[],
            sent: [] as number[],
            commands: [] as number[],
            byCommand: [] as Record<string, number>[],
            cpu: [] as Record<string, number>[],
          },
        ]),
      );
      for (let round = 0; round < ROUNDS; round++) {
        for (let i = 0; i < configs.length; i++) {
          const name = configs[(round + i) % configs.length]!;
          const result = results.get(name)!;
          const workers: WorkerProcess[] = await Promise.all(
            Array.from({ length: Number(name[0]) }, () =>
              // No sweep of stored content at start (each round starts its workers): it would be counted as their work.
              startWorkerProcess({
                connection: redis.url,
                queueName: QUEUE_NAME,
                apiKey: 'k',
                baseUrl: sinks.httpUrl,
                cleanupInterval: 0,
              }),
            ),
          );
          await redis.client.config('RESETSTAT');
          const pids: Record<string, number[]> = {
            relay: [plain.child.pid!],
            'redis-server': [redisPid],
            workers: workers.map((w) => w.child.pid!),
            'HTTP sink': [sinks.pid],
          };
          const before = Object.fromEntries(Object.entries(pids).map(([k, list]) => [k, list.map((p) => cpuMs(p))]));
          const sourceBefore = cpuMs('children');
          const t0 = performance.now();
          result.accepted.push(await smtpSourceRate(smtpSource, plain.port, COUNT, reuse));
          const seconds = (performance.now() - t0) / 1000;
          const cpu: Record<string, number> = { 'smtp-source': (cpuMs('children') - sourceBefore) / COUNT };
          for (const [k, list] of Object.entries(pids)) {
            cpu[k] = list.reduce((sum, pid, j) => sum + cpuMs(pid) - before[k]![j]!, 0) / COUNT;
          }
          result.cpu.push(cpu);
          result.sent.push(workers.reduce((n, w) => n + w.sent.length, 0) / seconds);
          const info = await redis.client.info('commandstats');
          let commands = 0;
          const byCommand: Record<string, number> = {};
          for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
            if (match[1] === 'config|resetstat' || match[1] === 'info') continue;
            commands += Number(match[2]);
            byCommand[match[1]!] = Number(match[2]) / COUNT;
          }
          result.commands.push(commands / COUNT);
          result.byCommand.push(byCommand);
          await Promise.all(workers.map((w) => w.stop()));
          await empty();
        }
      }
      console.log(`  ${reuse ? 'connections reused' : 'one connection per message'}:`);
      for (const name of configs) {
        const r = results.get(name)!;
        const fmt = (values: number[]) => values.map((v) => v.toFixed(0)).join(' ');
        console.log(
          `    ${name.padEnd(9)} accepted ${fmt(r.accepted)} msg/s (median ${median(r.accepted).toFixed(0)}); sent by the workers meanwhile ${fmt(r.sent)} (median ${median(r.sent).toFixed(0)}); Redis commands per message ${median(r.commands).toFixed(1)}`,
        );
        const perProcess = Object.keys(r.cpu[0]!).map((k) => `${k} ${median(r.cpu.map((c) => c[k]!)).toFixed(2)}`);
        const total = median(r.cpu.map((c) => Object.values(c).reduce((a, b) => a + b, 0)));
        console.log(`              CPU ms per message: ${perProcess.join(', ')}; all ${total.toFixed(2)}`);
        const names = [...new Set(r.byCommand.flatMap((c) => Object.keys(c)))];
        const perCommand = names
          .map((n) => [n, median(r.byCommand.map((c) => c[n] ?? 0))] as const)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 10);
        console.log(
          `              Redis commands per message: ${perCommand.map(([n, v]) => `${n} ${v.toFixed(1)}`).join(', ')}`,
        );
      }
    }
  } finally {
    await stopRelay(plain.child);
  }
  console.log(
    `Load average at the end: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
} finally {
  await redis.stop();
  await sinks.stop();
  await rm(profileDir, { recursive: true, force: true });
}
