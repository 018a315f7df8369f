/**
 * The relay against Postfix, for `npm run bench` (section `postfix`): Postfix's
 * own load generator, `smtp-source` (20 sessions, 10 KB messages), sends to a
 * Postfix instance made for the run (its own `main.cf` and `master.cf` in a
 * temporary folder, `smtpd` on a free loopback port, relaying to `smtp-sink`)
 * and to the relay, in interleaved rounds. Two shapes of client: one
 * connection per message (smtp-source's default, and what cron, PHP's
 * `mail()` and most scripts do) and connections reused (`-d`). Two relay
 * modes: direct (250 once the HTTP sink took the message) and
 * store-and-forward (250 once Redis holds it; acceptance only, no worker
 * draining). Each ratio is the median of the per-round ratios relay / Postfix.
 *
 * Needs Debian's `postfix` package (it ships smtp-source and smtp-sink) and
 * root (Postfix's master starts as root and drops to `mail_owner`); without
 * them the section says why and is skipped. It leaves no process and no
 * folder behind, also when the run is interrupted (SIGINT, SIGTERM).
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync, rmSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startRedisServer, type RedisServer } from '../test/helpers/redis-server.js';
import type { BenchRow } from './bench-row.js';
import type { Sinks } from './sinks.js';

const run = promisify(execFile);

/** smtp-source's load: as measured in issue 19. */
const SESSIONS = 20;
const MESSAGE_BYTES = 10 * 1024;
/** Rounds and messages per round; `RELAY_POSTFIX_ROUNDS` and `RELAY_POSTFIX_COUNT` override them for a quick look. */
const ROUNDS = Number(process.env.RELAY_POSTFIX_ROUNDS ?? 5);
const COUNT = Number(process.env.RELAY_POSTFIX_COUNT ?? 2000);
const WARM_UP = Math.ceil(COUNT / 5);
const QUEUE_NAME = 'bench-relay';

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Where Debian puts Postfix's programs, besides the PATH. */
const SEARCH = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/lib/postfix/sbin', '/usr/local/sbin'];

function findTool(name: string): string | undefined {
  for (const dir of SEARCH) {
    if (!dir) continue;
    const path = join(dir, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // not here
    }
  }
  return undefined;
}

interface Tools {
  postfix: string;
  postconf: string;
  smtpSource: string;
  smtpSink: string;
  owner: { name: string; uid: number; gid: number };
  version: string;
}

/** The tools, or why the section cannot run here. */
function findTools(): Tools | string {
  const paths = {
    postfix: findTool('postfix'),
    postconf: findTool('postconf'),
    smtpSource: findTool('smtp-source'),
    smtpSink: findTool('smtp-sink'),
  };
  const missing = Object.entries({
    postfix: paths.postfix,
    postconf: paths.postconf,
    'smtp-source': paths.smtpSource,
    'smtp-sink': paths.smtpSink,
  })
    .filter(([, path]) => path === undefined)
    .map(([name]) => name);
  if (missing.length > 0) {
    return `${missing.join(', ')} not found (Debian/Ubuntu: apt-get install postfix, which ships smtp-source and smtp-sink)`;
  }
  if (process.getuid?.() !== 0) return "Postfix's master process must be started as root; run the benchmark as root";
  const postconf = (name: string) => spawnSync(paths.postconf!, ['-h', name], { encoding: 'utf8' }).stdout.trim();
  const ownerName = postconf('mail_owner');
  const id = (flag: string) => spawnSync('id', [flag, ownerName], { encoding: 'utf8' });
  const uid = id('-u');
  const gid = id('-g');
  if (!ownerName || uid.status !== 0 || gid.status !== 0) {
    return `Postfix's mail_owner (${ownerName || 'unset'}) is not a user of this machine`;
  }
  return {
    postfix: paths.postfix!,
    postconf: paths.postconf!,
    smtpSource: paths.smtpSource!,
    smtpSink: paths.smtpSink!,
    owner: { name: ownerName, uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) },
    version: postconf('mail_version'),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Resolves once something on the port answers with a line starting `220`. */
async function untilGreeting(port: number, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const greeted = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.setTimeout(2000, () => socket.destroy());
      socket.once('data', (chunk: Buffer) => {
        socket.end('QUIT\r\n');
        resolve(chunk.toString('latin1').startsWith('220'));
      });
      socket.once('error', () => resolve(false));
      socket.once('close', () => resolve(false));
    });
    if (greeted) return;
    if (Date.now() > deadline) throw new Error(`${what} did not greet on port ${port} within 20 s`);
    await sleep(50);
  }
}

/** Everything the section started that must go, whatever happens (also on SIGINT or SIGTERM). */
class Cleanup {
  readonly #steps: { name: string; sync: () => void }[] = [];

  add(name: string, sync: () => void): void {
    this.#steps.push({ name, sync });
  }

  /** Runs the steps, newest first; each one once. */
  run(): void {
    for (const step of this.#steps.splice(0).reverse()) {
      try {
        step.sync();
      } catch (err) {
        console.error(`  cleanup (${step.name}) failed: ${(err as Error).message}`);
      }
    }
  }
}

interface PostfixInstance {
  readonly port: number;
  /** Messages in Postfix's queue (not yet delivered to smtp-sink). */
  queued(): Promise<number>;
  /** The master process's pid: every Postfix process runs under it. */
  masterPid(): Promise<number>;
  sinkPid: number;
}

/**
 * A Postfix instance of its own: configuration, queue and data folders in a
 * temporary folder (the system's Postfix configuration is not read or
 * touched), `smtpd` on a free loopback port without chroot, every message
 * relayed to `smtp-sink` on another. Stopped by the cleanup.
 */
async function startPostfix(tools: Tools, cleanup: Cleanup): Promise<PostfixInstance> {
  const dir = await mkdtemp(join(tmpdir(), 'eml-api-postfix-'));
  cleanup.add('remove the Postfix folder', () => rmSync(dir, { recursive: true, force: true }));
  // Postfix's daemons run as mail_owner and must reach the queue through this folder.
  await chmod(dir, 0o755);
  const etc = join(dir, 'etc');
  const data = join(dir, 'data');
  await mkdir(etc);
  await mkdir(join(dir, 'queue'));
  await mkdir(data);
  await chown(data, tools.owner.uid, tools.owner.gid);
  const [port, sinkPort] = [await freePort(), await freePort()];

  const sink = spawn(tools.smtpSink, ['-u', tools.owner.name, `127.0.0.1:${sinkPort}`, '1000'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  cleanup.add('stop smtp-sink', () => {
    if (sink.exitCode === null && sink.signalCode === null) sink.kill('SIGKILL');
  });
  await untilGreeting(sinkPort, 'smtp-sink');

  await writeFile(
    join(etc, 'main.cf'),
    [
      'compatibility_level = 3.6',
      `queue_directory = ${join(dir, 'queue')}`,
      `data_directory = ${data}`,
      'myhostname = postfix-bench.example.test',
      'mydomain = example.test',
      'mydestination =',
      `relayhost = [127.0.0.1]:${sinkPort}`,
      'inet_interfaces = 127.0.0.1',
      'inet_protocols = ipv4',
      'mynetworks = 127.0.0.0/8',
      'smtpd_relay_restrictions = permit_mynetworks, reject',
      'alias_maps =',
      'alias_database =',
      'local_recipient_maps =',
      'biff = no',
      // Logs to a file in the folder rather than the machine's syslog.
      `maillog_file = ${join(dir, 'maillog')}`,
      `maillog_file_prefixes = ${dir}`,
      '',
    ].join('\n'),
  );
  // Debian's master.cf without chroot (a chroot would need a copy of /etc in the queue folder), smtpd on our port.
  const service = (name: string, type: string, priv: string, limit: string, command: string) =>
    `${name.padEnd(18)} ${type.padEnd(10)} ${priv} - n - ${limit} ${command}`;
  await writeFile(
    join(etc, 'master.cf'),
    [
      service(`127.0.0.1:${port}`, 'inet', 'n', '-', 'smtpd'),
      service('pickup', 'unix', 'n', '1', 'pickup'),
      service('cleanup', 'unix', 'n', '0', 'cleanup'),
      service('qmgr', 'unix', 'n', '1', 'qmgr'),
      service('rewrite', 'unix', '-', '-', 'trivial-rewrite'),
      service('bounce', 'unix', '-', '0', 'bounce'),
      service('defer', 'unix', '-', '0', 'bounce'),
      service('trace', 'unix', '-', '0', 'bounce'),
      service('verify', 'unix', '-', '1', 'verify'),
      service('flush', 'unix', 'n', '0', 'flush'),
      service('proxymap', 'unix', '-', '-', 'proxymap'),
      service('smtp', 'unix', '-', '-', 'smtp'),
      service('relay', 'unix', '-', '-', 'smtp'),
      service('showq', 'unix', 'n', '-', 'showq'),
      service('error', 'unix', '-', '-', 'error'),
      service('retry', 'unix', '-', '-', 'error'),
      service('discard', 'unix', '-', '-', 'discard'),
      service('anvil', 'unix', '-', '1', 'anvil'),
      service('scache', 'unix', '-', '1', 'scache'),
      service('postlog', 'unix-dgram', 'n', '1', 'postlogd'),
      '',
    ].join('\n'),
  );
  const postfix = (command: string) => spawnSync(tools.postfix, ['-c', etc, command], { encoding: 'utf8' });
  const pidFile = join(dir, 'queue', 'pid', 'master.pid');
  cleanup.add('stop Postfix', () => {
    let pid: number | undefined;
    try {
      pid = Number(readFileSync(pidFile, 'utf8').trim());
    } catch {
      return; // never started
    }
    postfix('stop');
    // `postfix stop` signals the master and returns; wait for it (and so its daemons) to be gone.
    const deadline = Date.now() + 10_000;
    while (alive(pid) && Date.now() < deadline) spawnSync('sleep', ['0.05']);
    if (alive(pid)) process.kill(pid, 'SIGKILL');
  });
  const started = postfix('start');
  if (started.status !== 0) {
    const log = await readFile(join(dir, 'maillog'), 'utf8').catch(() => '');
    throw new Error(`postfix -c ${etc} start failed (${started.status}):\n${started.stderr}${log.slice(-2000)}`);
  }
  await untilGreeting(port, 'Postfix');
  const queueDirs = ['maildrop', 'incoming', 'active', 'deferred', 'hold'].map((d) => join(dir, 'queue', d));
  return {
    port,
    sinkPid: sink.pid!,
    masterPid: async () => Number((await readFile(pidFile, 'utf8')).trim()),
    async queued() {
      let files = 0;
      for (const queueDir of queueDirs) {
        const entries = await readdir(queueDir, { recursive: true, withFileTypes: true }).catch(() => []);
        files += entries.filter((e) => e.isFile()).length;
      }
      return files;
    },
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Messages a second through `port`: smtp-source's whole run, `count` messages of 10 KB in 20
 * sessions, a connection per message or (`reuse`) connections reused.
 */
export async function smtpSourceRate(smtpSource: string, port: number, count: number, reuse: boolean): Promise<number> {
  const args = [
    '-s',
    String(SESSIONS),
    '-m',
    String(count),
    '-l',
    String(MESSAGE_BYTES),
    '-f',
    'bench@example.test',
    '-t',
    'rcpt@example.test',
    '-M',
    'client.example.test',
    ...(reuse ? ['-d'] : []),
    `127.0.0.1:${port}`,
  ];
  const started = performance.now();
  try {
    await run(smtpSource, args, { maxBuffer: 1024 * 1024 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`smtp-source ${args.join(' ')} failed: ${e.stderr?.trim() || e.message}`);
  }
  return count / ((performance.now() - started) / 1000);
}

/** smtp-source's path, or undefined where Postfix's test programs are not installed. */
export const findSmtpSource = (): string | undefined => findTool('smtp-source');

/** CPU time (user + system) of a process and every process under it, the ones that ended included, in ms. */
export function treeCpuMs(root: number): number {
  const parents = new Map<number, number>();
  const cpu = new Map<number, number>();
  for (const entry of readdirSyncSafe('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parents.set(Number(entry), Number(fields[1]));
      // utime, stime, and cutime, cstime: the CPU of the children it reaped (Linux counts in 10 ms ticks).
      cpu.set(Number(entry), (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * 10);
    } catch {
      // it ended while read
    }
  }
  let total = 0;
  for (const [pid, ms] of cpu) {
    for (let at: number | undefined = pid; at !== undefined && at > 1; at = parents.get(at)) {
      if (at === root) {
        total += ms;
        break;
      }
    }
  }
  return total;
}

function readdirSyncSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Resident memory of a process and each process under it, in MB: RSS each, and PSS of all together. */
export function treeMemory(root: number): { rssMb: number[]; pssMb: number } {
  const rss: number[] = [];
  let pss = 0;
  for (const entry of readdirSyncSafe('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const pid = Number(entry);
      let ours = pid === root;
      for (let at = pid; !ours && at > 1;) {
        const stat = readFileSync(`/proc/${at}/stat`, 'utf8');
        at = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        ours = at === root;
      }
      if (!ours) continue;
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      rss.push(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024);
      const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      pss += Number(/^Pss:\s+(\d+)/m.exec(rollup)?.[1] ?? 0) / 1024;
    } catch {
      // it ended while read
    }
  }
  return { rssMb: rss.sort((a, b) => b - a), pssMb: pss };
}

/** A process of the built CLI (`node dist/cli.js ...`) and what it printed. */
interface CliProcess {
  child: ChildProcess;
  output: () => string;
}

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

function startCli(args: string[], env: Record<string, string>, cleanup: Cleanup, name: string): CliProcess {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  // The start-up lines are what is read; a worker logs a line per message sent after them.
  const keep = (chunk: Buffer) => {
    if (output.length < 65_536) output += chunk.toString();
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  cleanup.add(`stop ${name}`, () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    // The cluster's processes too: they are the primary's children.
    for (const pid of descendants(child.pid!)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    child.kill('SIGKILL');
  });
  return { child, output: () => output };
}

function descendants(root: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSyncSafe('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === root) found.push(Number(entry));
    } catch {
      // gone
    }
  }
  return found;
}

async function until<T>(what: string, check: () => T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs / 1000} s`);
    await sleep(50);
  }
}

/** Stops a CLI process with SIGTERM (it drains) and waits for it. */
async function stopCli(cli: CliProcess): Promise<void> {
  if (cli.child.exitCode !== null || cli.child.signalCode !== null) return;
  const exited = new Promise((resolve) => cli.child.once('exit', resolve));
  cli.child.kill('SIGTERM');
  await exited;
}

/** A relay of the built CLI, `processes` processes, direct to `baseUrl` or (`redisUrl`) store-and-forward. */
async function startCliRelay(
  baseUrl: string,
  processes: number,
  cleanup: Cleanup,
  redisUrl?: string,
): Promise<CliProcess & { port: number }> {
  const args = ['relay', '--port', '0', '--url', baseUrl, '--max-clients', '1000'];
  // One process is the relay as it runs without the flag: no primary.
  if (processes > 1) args.push('--processes', String(processes));
  if (redisUrl) args.push('--outbox', '--queue', QUEUE_NAME);
  const env = { EML_API_KEY: 'k', ...(redisUrl ? { REDIS_URL: redisUrl } : {}) };
  const cli = startCli(args, env, cleanup, `the relay (${processes} processes${redisUrl ? ', outbox' : ''})`);
  const port = await until(`the relay (${args.join(' ')}) did not say where it listens`, () => {
    const match = /listening on 127\.0\.0\.1:(\d+)/.exec(cli.output());
    if (cli.child.exitCode !== null) throw new Error(`the relay exited: ${cli.output()}`);
    return match ? Number(match[1]) : undefined;
  });
  // With several processes, every one of them listens before the primary reports them ready.
  await untilGreeting(port, 'the relay');
  return { ...cli, port };
}

/** One runner's figures in one round. */
interface RunFigures {
  rate: number;
  /** CPU ms per message, by process group. */
  cpu: Record<string, number>;
  /** Peak RSS of each process of the server under test while it ran, MB (largest first). */
  peakRssMb: number[];
}

type RunnerName = 'postfix' | 'direct1' | 'direct2' | 'stored1' | 'stored2' | 'held1' | 'held2';
const RUNNER_LABELS: Record<RunnerName, string> = {
  postfix: 'Postfix',
  direct1: 'direct relay, 1 process',
  direct2: 'direct relay, 2 processes',
  stored1: 'store-and-forward relay, 1 process (+ 1 outbox worker draining)',
  stored2: 'store-and-forward relay, 2 processes (+ 1 outbox worker draining)',
  held1: 'store-and-forward relay, 1 process, its worker stopped (SIGSTOP) until the relay accepted all',
  held2: 'store-and-forward relay, 2 processes, its worker stopped (SIGSTOP) until the relay accepted all',
};

/** The relay-vs-Postfix rows, or why the section was skipped. */
export async function postfixBenchmarks(
  sinks: Sinks,
): Promise<{ rows: BenchRow[]; notes: string[] } | { skipped: string }> {
  const tools = findTools();
  if (typeof tools === 'string') {
    console.log(`\nRelay vs Postfix: SKIPPED, ${tools}`);
    return { skipped: tools };
  }
  const cleanup = new Cleanup();
  let redis: RedisServer | undefined;
  // Postfix's master runs detached from this process group: an interrupted run must stop it itself.
  const onSignal = () => {
    void (async () => {
      await redis?.stop().catch(() => undefined);
      cleanup.run();
      process.exit(130);
    })();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    console.log(
      `\nRelay vs Postfix ${tools.version}: smtp-source, ${SESSIONS} sessions, ${MESSAGE_BYTES / 1024} KB messages, ${ROUNDS} interleaved rounds of ${COUNT}; the relay is the built CLI (node dist/cli.js relay)`,
    );
    await run('npm', ['run', 'build'], { cwd: fileURLToPath(new URL('..', import.meta.url)), maxBuffer: 16 << 20 });
    const postfix = await startPostfix(tools, cleanup);
    redis = await startRedisServer({ appendonly: true, appendfsync: 'everysec' });
    const redisServer = redis;
    const redisPid = Number(/process_id:(\d+)/.exec(await redis.client.info('server'))![1]);
    const idle: string[] = [];
    const relays = {
      direct1: await startCliRelay(sinks.httpUrl, 1, cleanup),
      direct2: await startCliRelay(sinks.httpUrl, 2, cleanup),
      stored1: await startCliRelay(sinks.httpUrl, 1, cleanup, redis.url),
      stored2: await startCliRelay(sinks.httpUrl, 2, cleanup, redis.url),
    };
    const worker = startCli(
      ['worker', '--url', sinks.httpUrl, '--queue', QUEUE_NAME, '--concurrency', '20'],
      { EML_API_KEY: 'k', REDIS_URL: redis.url },
      cleanup,
      'the outbox worker',
    );
    await until('the outbox worker did not start', () => {
      if (worker.child.exitCode !== null) throw new Error(`the worker exited: ${worker.output()}`);
      return /Worker sending from queue/.test(worker.output()) ? true : undefined;
    });
    const workerPid = worker.child.pid!;
    await sleep(1000);
    for (const [name, relay] of Object.entries(relays)) {
      const memory = treeMemory(relay.child.pid!);
      idle.push(`${name}: ${memory.rssMb.map((r) => r.toFixed(0)).join(' + ')} MB RSS`);
    }
    console.log(`  idle RSS per process (primary first when several): ${idle.join('; ')}`);
    const load = [loadavg()[0]!];
    const rows: BenchRow[] = [];
    const notes: string[] = [`Idle RSS of the relays, per process: ${idle.join('; ')}.`];
    const postfixPid = await postfix.masterPid();
    try {
      for (const reuse of [false, true]) {
        const shape = reuse ? 'connections reused (-d)' : 'one connection per message';
        // Samples RSS of `pids` every 100 ms while `work` runs.
        const sampled = async (root: number, work: () => Promise<number>) => {
          let peak: number[] = [];
          const timer = setInterval(() => {
            const now = treeMemory(root).rssMb;
            if (now.reduce((a, b) => a + b, 0) > peak.reduce((a, b) => a + b, 0)) peak = now;
          }, 100);
          try {
            return { rate: await work(), peak };
          } finally {
            clearInterval(timer);
          }
        };
        const delivered = async (before: number, count: number, what: string) => {
          const deadline = Date.now() + 120_000;
          while ((await sinks.stats()).requests < before + count) {
            if (Date.now() > deadline) throw new Error(`${what} did not deliver within 120 s`);
            await sleep(20);
          }
        };
        const runners: Record<RunnerName, (count: number) => Promise<RunFigures>> = {
          postfix: async (count: number) => {
            const cpu0 = { postfix: treeCpuMs(postfixPid), sink: treeCpuMs(postfix.sinkPid) };
            const { rate, peak } = await sampled(postfixPid, () =>
              smtpSourceRate(tools.smtpSource, postfix.port, count, reuse),
            );
            // Postfix accepted them; it delivers them to smtp-sink, and its CPU counts until it has.
            const deadline = Date.now() + 120_000;
            while ((await postfix.queued()) > 0) {
              if (Date.now() > deadline) throw new Error("Postfix's queue did not drain within 120 s");
              await sleep(20);
            }
            return {
              rate,
              cpu: {
                postfix: (treeCpuMs(postfixPid) - cpu0.postfix) / count,
                'smtp-sink': (treeCpuMs(postfix.sinkPid) - cpu0.sink) / count,
              },
              peakRssMb: peak,
            };
          },
          ...Object.fromEntries(
            (['direct1', 'direct2', 'stored1', 'stored2', 'held1', 'held2'] as const).map((name) => [
              name,
              async (count: number): Promise<RunFigures> => {
                // The held runners are the store-and-forward relays with the worker stopped while they accept: the
                // relay's own CPU without the worker's competing for the same 2 cores.
                const held = name.startsWith('held');
                const relay = relays[held ? (name === 'held1' ? 'stored1' : 'stored2') : (name as keyof typeof relays)];
                const stored = name.startsWith('stored') || held;
                const before = (await sinks.stats()).requests;
                const cpu0 = {
                  relay: treeCpuMs(relay.child.pid!),
                  worker: treeCpuMs(workerPid),
                  redis: treeCpuMs(redisPid),
                  sink: treeCpuMs(sinks.pid),
                };
                if (held) process.kill(workerPid, 'SIGSTOP');
                let accepted: { rate: number; peak: number[] };
                let relayCpu: number;
                try {
                  accepted = await sampled(relay.child.pid!, () =>
                    smtpSourceRate(tools.smtpSource, relay.port, count, reuse),
                  );
                  relayCpu = (treeCpuMs(relay.child.pid!) - cpu0.relay) / count;
                } finally {
                  if (held) process.kill(workerPid, 'SIGCONT');
                }
                const { rate, peak } = accepted;
                // Store-and-forward: the worker sends meanwhile, and its CPU counts until it sent them all.
                if (stored) await delivered(before, count, 'the outbox worker');
                // Held, the relay's CPU counts while it accepts (it does nothing after).
                const cpu: Record<string, number> = {
                  relay: held ? relayCpu : (treeCpuMs(relay.child.pid!) - cpu0.relay) / count,
                };
                if (stored) {
                  cpu.worker = (treeCpuMs(workerPid) - cpu0.worker) / count;
                  cpu.redis = (treeCpuMs(redisPid) - cpu0.redis) / count;
                }
                cpu['HTTP sink'] = (treeCpuMs(sinks.pid) - cpu0.sink) / count;
                if (stored) {
                  // Finished jobs go, for the next round (the worker removes nothing itself here).
                  await redisServer.client.flushall();
                }
                return { rate, cpu, peakRssMb: peak };
              },
            ]),
          ),
        } as unknown as Record<RunnerName, (count: number) => Promise<RunFigures>>;
        const names = Object.keys(runners) as RunnerName[];
        for (const name of names) await runners[name](WARM_UP);
        const figures = Object.fromEntries(names.map((n) => [n, [] as RunFigures[]])) as Record<
          RunnerName,
          RunFigures[]
        >;
        for (let round = 0; round < ROUNDS; round++) {
          for (let i = 0; i < names.length; i++) {
            const name = names[(round + i) % names.length]!;
            figures[name].push(await runners[name](COUNT));
          }
        }
        load.push(loadavg()[0]!);
        console.log(`  ${shape}:`);
        const cpuOf = (name: RunnerName, key?: string) =>
          figures[name].map((f) => (key ? (f.cpu[key] ?? 0) : serverCpu(name, f.cpu)));
        for (const name of names) {
          const keys = Object.keys(figures[name][0]!.cpu);
          console.log(
            `    ${name.padEnd(8)} msg/s ${figures[name].map((f) => f.rate.toFixed(0)).join(' ')} | CPU ms/msg ${keys
              .map((k) => `${k} ${median(cpuOf(name, k)).toFixed(2)}`)
              .join(
                ', ',
              )} | peak RSS MB ${median(figures[name].map((f) => f.peakRssMb[0] ?? 0)).toFixed(0)} (largest process; processes ${figures[
              name
            ]
              .at(-1)!
              .peakRssMb.map((r) => r.toFixed(0))
              .join(' + ')})`,
          );
        }
        for (const name of names.filter((n) => n !== 'postfix' && !n.startsWith('held'))) {
          const ratios = figures[name].map((f, i) => f.rate / figures.postfix[i]!.rate);
          const cpuRatios = figures[name].map((f, i) => serverCpu(name, f.cpu) / figures.postfix[i]!.cpu.postfix!);
          const stored = name.startsWith('stored');
          console.log(
            `    ${name} / postfix per round: accept rate ${ratios.map((r) => r.toFixed(2)).join(' ')}; CPU ${cpuRatios.map((r) => r.toFixed(2)).join(' ')}`,
          );
          rows.push({
            benchmark: 'relay vs Postfix',
            case: `smtp-source ${SESSIONS} sessions, ${MESSAGE_BYTES / 1024} KB, ${shape}, ${RUNNER_LABELS[name]}: accept rate (per-round ratios ${ratios.map((r) => r.toFixed(2)).join(' ')})`,
            value: median(figures[name].map((f) => f.rate)),
            unit: 'msg/s',
            reference: `Postfix ${tools.version} smtpd → smtp-sink, same run`,
            referenceValue: median(figures.postfix.map((f) => f.rate)),
            ratio: median(ratios),
            target: '>= 1',
            met: median(ratios) >= 1,
          });
          const parts = Object.keys(figures[name][0]!.cpu)
            .filter((k) => k !== 'HTTP sink')
            .map((k) => `${k} ${median(cpuOf(name, k)).toFixed(2)}`)
            .join(' + ');
          rows.push({
            benchmark: stored ? 'relay vs Postfix, CPU' : 'relay vs Postfix, CPU (reference)',
            case: `${shape}, ${RUNNER_LABELS[name]}: CPU ms per message, ${stored ? 'the whole path until sent' : 'the relay'} (${parts}; per-round ratios ${cpuRatios.map((r) => r.toFixed(2)).join(' ')})`,
            value: median(cpuOf(name)),
            unit: 'ms',
            reference: "all of Postfix's processes until delivered to smtp-sink",
            referenceValue: median(cpuOf('postfix', 'postfix')),
            ratio: median(cpuRatios),
            target: stored ? '<= 0.8' : '-',
            met: stored ? median(cpuRatios) <= 0.8 : true,
          });
        }
        const relayCpu = (name: RunnerName) => median(cpuOf(name, 'relay'));
        // The relay with its worker draining is held to the target; with the worker stopped it is the reference.
        const against = [
          { runner: 'stored', benchmark: 'relay CPU per message', what: 'store-and-forward relay' },
          {
            runner: 'held',
            benchmark: 'relay CPU per message (reference)',
            what: 'store-and-forward relay with its worker stopped while it accepts,',
          },
        ] as const;
        for (const processes of [1, 2]) {
          const direct = `direct${processes}` as RunnerName;
          for (const { runner, benchmark, what } of against) {
            const name = `${runner}${processes}` as RunnerName;
            const ratios = figures[name].map((f, i) => f.cpu.relay! / figures[direct][i]!.cpu.relay!);
            const held = runner === 'held';
            rows.push({
              benchmark,
              case: `${shape}, ${processes} process${processes > 1 ? 'es' : ''}: ${what} against the direct relay (per-round ratios ${ratios.map((r) => r.toFixed(2)).join(' ')})`,
              value: relayCpu(name),
              unit: 'ms',
              reference: 'direct relay',
              referenceValue: relayCpu(direct),
              ratio: median(ratios),
              target: held ? '-' : '< 1',
              met: held || median(ratios) < 1,
            });
          }
        }
        const postfixPeak = median(figures.postfix.map((f) => f.peakRssMb[0] ?? 0));
        notes.push(
          `${shape}: peak RSS under load, largest process: Postfix ${postfixPeak.toFixed(0)} MB; ${(
            ['direct1', 'direct2', 'stored1', 'stored2'] as const
          )
            .map(
              (n) =>
                `${n} ${figures[n]
                  .at(-1)!
                  .peakRssMb.map((r) => r.toFixed(0))
                  .join(' + ')} MB`,
            )
            .join('; ')}.`,
        );
      }
    } finally {
      await Promise.all([...Object.values(relays), worker].map((cli) => stopCli(cli)));
    }
    const loadNote = `1-min load average ${load.map((l) => l.toFixed(1)).join(' → ')} on ${cpus().length} cores`;
    console.log(`  ${loadNote}`);
    for (const row of rows) row.case += ` (${loadNote})`;
    for (const row of rows) {
      console.log(
        `${row.benchmark} | ${row.case}: ${row.value.toFixed(2)} ${row.unit} vs ${row.referenceValue.toFixed(2)} → median ratio ${row.ratio.toFixed(2)} (target ${row.target}) ${row.met ? 'MET' : 'NOT MET'}`,
      );
    }
    for (const note of notes) console.log(`  ${note}`);
    return { rows, notes };
  } finally {
    const started = redis;
    redis = undefined;
    await started?.stop();
    cleanup.run();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** The server's CPU per message: Postfix's processes, or the relay with (store-and-forward) its worker and Redis. */
function serverCpu(name: RunnerName, cpu: Record<string, number>): number {
  if (name === 'postfix') return cpu.postfix!;
  return (cpu.relay ?? 0) + (cpu.worker ?? 0) + (cpu.redis ?? 0);
}
