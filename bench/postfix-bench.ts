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
import { execFile, spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, readFileSync, rmSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startRedisServer, type RedisServer } from '../test/helpers/redis-server.js';
import type { BenchRow } from './bench-row.js';
import { startRelayProcess, stopRelay } from './relay-bench.js';
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

/** The relay-vs-Postfix rows, or why the section was skipped. */
export async function postfixBenchmarks(sinks: Sinks): Promise<{ rows: BenchRow[] } | { skipped: string }> {
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
      `\nRelay vs Postfix ${tools.version}: smtp-source, ${SESSIONS} sessions, ${MESSAGE_BYTES / 1024} KB messages, ${ROUNDS} interleaved rounds of ${COUNT}`,
    );
    const postfix = await startPostfix(tools, cleanup);
    redis = await startRedisServer({ appendonly: true, appendfsync: 'everysec' });
    const direct = await startRelayProcess(sinks.httpUrl);
    cleanup.add('stop the direct relay', () => direct.child.kill('SIGKILL'));
    const redisServer = redis;
    const stored = await startRelayProcess(sinks.httpUrl, { redisUrl: redis.url, queueName: QUEUE_NAME });
    cleanup.add('stop the store-and-forward relay', () => stored.child.kill('SIGKILL'));
    const load = [loadavg()[0]!];
    const rows: BenchRow[] = [];
    try {
      for (const reuse of [false, true]) {
        const shape = reuse ? 'connections reused (-d)' : 'one connection per message';
        const runners: Record<'postfix' | 'direct' | 'stored', (count: number) => Promise<number>> = {
          postfix: async (count) => {
            const rate = await smtpSourceRate(tools.smtpSource, postfix.port, count, reuse);
            // Postfix accepted them; let it deliver them to smtp-sink before the next runner measures.
            const deadline = Date.now() + 120_000;
            while ((await postfix.queued()) > 0) {
              if (Date.now() > deadline) throw new Error("Postfix's queue did not drain within 120 s");
              await sleep(50);
            }
            return rate;
          },
          direct: (count) => smtpSourceRate(tools.smtpSource, direct.port, count, reuse),
          stored: async (count) => {
            const rate = await smtpSourceRate(tools.smtpSource, stored.port, count, reuse);
            // Empty, for the next round: what the relay stored (jobs and their content) goes.
            await redisServer.client.flushall();
            return rate;
          },
        };
        const names = Object.keys(runners) as (keyof typeof runners)[];
        for (const name of names) await runners[name](WARM_UP);
        const rates: Record<keyof typeof runners, number[]> = { postfix: [], direct: [], stored: [] };
        for (let round = 0; round < ROUNDS; round++) {
          for (let i = 0; i < names.length; i++) {
            const name = names[(round + i) % names.length]!;
            rates[name].push(await runners[name](COUNT));
          }
        }
        load.push(loadavg()[0]!);
        console.log(`  ${shape} (msg/s):`);
        for (const name of names)
          console.log(`    ${name.padEnd(8)} ${rates[name].map((r) => r.toFixed(0)).join(' ')}`);
        for (const [mode, label] of [
          ['direct', 'direct (relay → HTTP sink, 250 once the sink took it)'],
          ['stored', 'store-and-forward (relay --redis, 250 once Redis holds it; acceptance only)'],
        ] as const) {
          const ratios = rates[mode].map((r, i) => r / rates.postfix[i]!);
          const ratio = median(ratios);
          console.log(`    ${mode} / postfix per round: ${ratios.map((r) => r.toFixed(2)).join(' ')}`);
          rows.push({
            benchmark: 'relay vs Postfix',
            case: `smtp-source ${SESSIONS} sessions, ${MESSAGE_BYTES / 1024} KB, ${shape}, ${label}`,
            value: median(rates[mode]),
            unit: 'msg/s',
            reference: `Postfix ${tools.version} smtpd → smtp-sink, same run`,
            referenceValue: median(rates.postfix),
            ratio,
            target: '>= 1',
            met: ratio >= 1,
          });
        }
      }
    } finally {
      await stopRelay(direct.child);
      await stopRelay(stored.child);
    }
    const loadNote = `1-min load average ${load.map((l) => l.toFixed(1)).join(' → ')} on ${cpus().length} cores`;
    console.log(`  ${loadNote}`);
    for (const row of rows) row.case += ` (${loadNote})`;
    for (const row of rows) {
      console.log(
        `${row.benchmark} | ${row.case}: ${row.value.toFixed(1)} msg/s vs Postfix ${row.referenceValue.toFixed(1)} → median ratio ${row.ratio.toFixed(2)} (target ${row.target}) ${row.met ? 'MET' : 'NOT MET'}`,
      );
    }
    return { rows };
  } finally {
    const started = redis;
    redis = undefined;
    await started?.stop();
    cleanup.run();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
