import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/**
 * A real redis-server (Debian's package; `.ci/run` installs it) on a free
 * port in a temporary directory: no Redis mocks in the tests.
 * @example
 * const redis = await startRedisServer();
 * // ... connection: redis.url
 * await redis.stop();
 */
export interface RedisServer {
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** The folder holding its files (the AOF when `appendonly` is on). */
  readonly dir: string;
  /** A client for the test's own checks (closed by stop()). */
  readonly client: Redis;
  /**
   * Stops the server and starts it again on the same port and folder: with
   * SIGKILL (a crash: only what is already in the AOF survives), or SIGTERM.
   * `args` are redis-server arguments added from this start on (e.g. another
   * `--maxmemory-policy`: a restart into other settings).
   */
  restart(how?: 'crash' | 'shutdown', options?: { args?: string[] }): Promise<void>;
  /** Stops the server with SIGSTOP: it hangs, its connections open, until {@link resume}. */
  pause(): void;
  /** Lets a paused server run again (SIGCONT). */
  resume(): void;
  /** Stops the server and removes its folder. */
  stop(): Promise<void>;
}

export interface RedisServerOptions {
  /** Turn on the append-only file, for tests of what survives a crash of Redis. */
  appendonly?: boolean;
  /** How often the AOF is flushed to disk. @default 'everysec' (what docs/outbox.md asks for) */
  appendfsync?: 'always' | 'everysec';
  /** More redis-server arguments, e.g. `['--maxmemory-policy', 'allkeys-lru']`. */
  args?: string[];
  /** Whether the test's client runs ioredis's ready check (an INFO): off for a Redis whose INFO is renamed. @default true */
  readyCheck?: boolean;
}

/** The redis-server to run: `REDIS_SERVER`, or the one on the PATH. */
export function redisServerPath(): string {
  return process.env.REDIS_SERVER ?? 'redis-server';
}

/**
 * Why no redis-server can be started here, or undefined when one can. vitest.config.ts leaves out
 * the test files that start one on a machine without it; a file that needs Redis for some of its
 * tests only names this constant and skips just those (`it.skipIf(redisServerMissing)`).
 */
export const redisServerMissing: string | undefined =
  spawnSync(redisServerPath(), ['--version']).status === 0
    ? undefined
    : `${redisServerPath()} is not installed: apt-get install -y redis-server (or set REDIS_SERVER to its path)`;

export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const dir = await mkdtemp(join(tmpdir(), 'eml-api-redis-'));
  const port = await freePort();
  let args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--daemonize',
    'no',
    ...(options.appendonly
      ? ['--appendonly', 'yes', '--appendfsync', options.appendfsync ?? 'everysec']
      : ['--appendonly', 'no']),
    ...(options.args ?? []),
  ];
  let server = await launch(args, port);
  const url = `redis://127.0.0.1:${port}`;
  const client = new Redis(url, {
    maxRetriesPerRequest: null,
    lazyConnect: true,
    enableReadyCheck: options.readyCheck ?? true,
  });
  client.on('error', () => undefined);
  await client.connect();
  return {
    url,
    port,
    dir,
    client,
    async restart(how = 'crash', more = {}) {
      await terminate(server, how === 'crash' ? 'SIGKILL' : 'SIGTERM');
      args = [...args, ...(more.args ?? [])];
      server = await launch(args, port);
      await client.ping();
    },
    pause() {
      server.kill('SIGSTOP');
    },
    resume() {
      server.kill('SIGCONT');
    },
    async stop() {
      client.disconnect();
      server.kill('SIGCONT');
      await terminate(server);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Starts redis-server with `args` and resolves once it answers PING on `port`. */
export async function launch(args: string[], port: number): Promise<ChildProcess> {
  const child = spawn(redisServerPath(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'ENOENT'
          ? new Error(
              'redis-server is not installed; the outbox tests run a real Redis: apt-get install -y redis-server (or set REDIS_SERVER to its path)',
            )
          : err,
      ),
    );
    child.once('exit', (code) => reject(new Error(`redis-server exited (${code}) before answering:\n${output}`)));
  });
  // Ready once it answers PING.
  const deadline = Date.now() + 10_000;
  const probe = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    // The ready check is an INFO, which a test may have renamed; the PING below is what tells.
    enableReadyCheck: false,
  });
  probe.on('error', () => undefined);
  try {
    for (;;) {
      try {
        await Promise.race([failed, probe.connect().then(() => probe.ping())]);
        return child;
      } catch (err) {
        if (child.exitCode !== null || Date.now() > deadline) throw err;
        probe.disconnect();
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  } finally {
    probe.disconnect();
    failed.catch(() => undefined);
  }
}

/** Stops a redis-server (SIGKILL after 5 s) and resolves once it exited. */
export async function terminate(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

/** A TCP port nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A MONITOR connection beside `client`. ioredis misreads a command Redis runs in the same read as MONITOR's `OK`
 * (before the connection counts as monitoring) and emits "Command queue state error" on it, where no listener is
 * yet: that line is dropped here, since it comes before the caller can have sent what it watches for.
 */
export async function monitorBeside(client: Redis): Promise<Redis> {
  const monitor = client.duplicate({ monitor: true, lazyConnect: false });
  monitor.on('error', (err: Error) => {
    if (err.message.startsWith('Command queue state error')) return;
    queueMicrotask(() => {
      throw err;
    });
  });
  // Not events.once: it rejects on that 'error'.
  await new Promise((resolve) => monitor.once('monitoring', resolve));
  return monitor;
}
