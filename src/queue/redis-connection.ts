import type * as Ioredis from 'ioredis';
import type { Cluster, Redis, RedisOptions, ClusterOptions } from 'ioredis';
import type * as Bullmq from 'bullmq';
import { configError, describe, requirePeer } from '../shared/options-kit.js';
import { queueKey, type QueueLocation } from './queue-location.js';

/**
 * Where the outbox's Redis is: a `redis://` or `rediss://` URL, ioredis options, an ioredis instance you made (and
 * close), or a Redis Cluster. On a cluster the queue's `prefix` needs a hash tag (`'{eml-api}'`).
 * @example
 * const connection: RedisConnectionInput = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
 * const cluster: RedisConnectionInput = { cluster: ['redis://10.0.0.1:7000', 'redis://10.0.0.2:7000'] };
 */
export type RedisConnectionInput =
  | string
  | RedisOptions
  | Redis
  | Cluster
  | { cluster: readonly (string | { host: string; port: number })[]; clusterOptions?: ClusterOptions };

export type OutboxRedisClient = Redis | Cluster;

export function isClusterClient(redis: OutboxRedisClient): redis is Cluster {
  return (redis as { isCluster?: boolean }).isCluster === true;
}

/** Lua scripts of one module, by the command name ioredis gives each. */
export type LuaCommands = Readonly<Record<string, { numberOfKeys: number; lua: string }>>;

/** The client with `commands` defined on it: once per client (ioredis makes each a method of it). */
export function withCommands<T>(redis: OutboxRedisClient, commands: LuaCommands): OutboxRedisClient & T {
  for (const [name, command] of Object.entries(commands)) if (!(name in redis)) redis.defineCommand(name, command);
  return redis as OutboxRedisClient & T;
}

/** A Redis client of the outbox, and whether the outbox made it (and so closes it). */
export interface OutboxRedis {
  readonly redis: OutboxRedisClient;
  readonly owned: boolean;
  /** Host and port (a cluster: the nodes it was given); never the password. */
  readonly where: string;
  readonly cluster: boolean;
}

/** What the connection is for: producers fail sends after a few reconnect tries, workers wait for Redis. */
export type RedisRole = 'producer' | 'worker';

/**
 * Checks a connection as {@link openOutboxRedis} takes it, without opening anything: a worker refuses a bad one before
 * it checks its key with the service.
 * @param option the option's name in errors @default 'connection'
 * @throws {EmlApiError} `ECONFIG` for a bad connection, or a queue on a cluster whose prefix has no hash tag
 */
export function checkRedisConnection(connection: unknown, location: QueueLocation, option = 'connection'): void {
  if (isClusterConnection(connection)) {
    checkClusterLocation(location);
    if (isRedisInstance(connection)) {
      const given = connection as Cluster;
      if (given.options.keyPrefix || given.options.redisOptions?.keyPrefix) {
        throw configError(option, `an ioredis Cluster with a keyPrefix cannot be used; use the prefix option instead`);
      }
    } else {
      clusterSettings(connection as OutboxClusterConnection, option);
    }
  } else if (isRedisInstance(connection)) {
    if ((connection as Redis).options.keyPrefix) {
      throw configError(option, `an ioredis instance with a keyPrefix cannot be used; use the prefix option instead`);
    }
  } else if (typeof connection === 'string') {
    redisUrl(connection, option, 'expected a redis:// or rediss:// URL, ioredis options or an ioredis instance');
  } else if (typeof connection === 'object' && connection !== null && !Array.isArray(connection)) {
    if ((connection as RedisOptions).keyPrefix) {
      throw configError(option, `keyPrefix is not supported (BullMQ refuses it); use the prefix option instead`);
    }
  } else {
    throw configError(
      option,
      `expected a redis:// or rediss:// URL, ioredis options, { cluster: [node URLs] } or an ioredis instance`,
    );
  }
}

/**
 * Opens (or adopts) the Redis client of a producer or a worker.
 * @param option the option's name in errors @default 'connection'
 * @param rideMs how long a producer's command keeps trying (its `timeouts.store`) @default 30000
 * @throws {EmlApiError} `ECONFIG` as {@link checkRedisConnection}
 */
export function openOutboxRedis(
  connection: unknown,
  role: RedisRole,
  location: QueueLocation,
  option = 'connection',
  rideMs?: number,
): OutboxRedis {
  checkRedisConnection(connection, location, option);
  if (isClusterConnection(connection)) {
    if (isRedisInstance(connection)) {
      return {
        redis: connection as Cluster,
        owned: false,
        where: describeClusterInstance(connection as Cluster),
        cluster: true,
      };
    }
    return { ...openCluster(connection as OutboxClusterConnection, role, option, rideMs), owned: true, cluster: true };
  }
  if (isRedisInstance(connection)) {
    const given = connection as Redis;
    return { redis: given, owned: false, where: describeRedis(given.options), cluster: false };
  }
  const Redis = loadRedis();
  const roleOptions = connectionDefaults(role, rideMs);
  if (typeof connection === 'string') {
    const url = redisUrl(
      connection,
      option,
      'expected a redis:// or rediss:// URL, ioredis options or an ioredis instance',
    );
    const redis = new Redis(connection, { ...roleOptions, lazyConnect: false });
    if (role === 'producer') dropWhenSilent(redis, rideMs ?? 30_000);
    return { redis, owned: true, where: `${url.hostname}:${url.port || '6379'}`, cluster: false };
  }
  const options = connection as RedisOptions;
  const redis = new Redis({ ...roleOptions, ...options });
  if (role === 'producer') dropWhenSilent(redis, rideMs ?? 30_000);
  return { redis, owned: true, where: describeRedis(options), cluster: false };
}

/** Idle time before the first keepalive probe: finds a dead peer while idle. */
const KEEPALIVE_MS = 10_000;

/**
 * How long a disconnect waits for the server to close its side before the socket is dropped. A Redis that answers
 * closes at once; one that does not would keep a stopped process alive for ioredis's 2 s, per connection.
 */
const DISCONNECT_MS = 300;

/**
 * The ioredis options the outbox's own connections start from. A producer's commands fail after 3 reconnect attempts
 * and within `rideMs`, so `sendMail` rejects while Redis is down; a worker waits for Redis, as BullMQ requires.
 */
export function connectionDefaults(role: RedisRole, rideMs = 30_000): RedisOptions {
  return role === 'worker'
    ? { maxRetriesPerRequest: null, keepAlive: KEEPALIVE_MS, disconnectTimeout: DISCONNECT_MS }
    : { maxRetriesPerRequest: 3, commandTimeout: rideMs, keepAlive: KEEPALIVE_MS, disconnectTimeout: DISCONNECT_MS };
}

/**
 * Replaces a producer's connection silent for `silentMs` while commands wait: a silent network keeps the socket open
 * for minutes. ioredis resends the commands; the outbox's writes are safe to run twice.
 */
function dropWhenSilent(redis: Redis, silentMs: number): void {
  let heard = performance.now();
  const hear = () => (heard = performance.now());
  redis.on('connect', () => {
    hear();
    redis.stream?.on('data', hear);
  });
  const waiting = () => (redis as unknown as { commandQueue?: { length?: number } }).commandQueue?.length ?? 0;
  // A WAIT for replicas answers within timeouts.store.
  const limit = silentMs + 1_000;
  const look = setInterval(
    () => {
      if (redis.status !== 'ready' || waiting() === 0 || performance.now() - heard <= limit) return;
      hear();
      redis.disconnect(true);
    },
    Math.max(100, Math.floor(silentMs / 4)),
  );
  look.unref();
  redis.once('end', () => clearInterval(look));
}

/**
 * Closes a client the outbox made; leaves one it was given open. QUIT gets at most `wait`: with Redis down the process
 * would otherwise wait for ever.
 */
export async function closeOutboxRedis(client: OutboxRedis, wait = outboxWaits.quit): Promise<void> {
  if (!client.owned) return;
  const { redis } = client;
  if (redis.status !== 'ready') {
    redis.disconnect();
    // Between two tries to reconnect, disconnect() leaves the commands ioredis queued pending, each holding the
    // process until its commandTimeout (a write's clean-up nobody waits for, sent as Redis went away).
    (redis as unknown as { flushQueue?: (err: Error) => void }).flushQueue?.(new Error('Connection is closed.'));
    return;
  }
  // QUIT is answered once the commands before it have run: it gets the whole wait.
  const options = isClusterClient(redis)
    ? [redis.options.redisOptions, ...redis.nodes('all').map((node) => node.options)]
    : [redis.options];
  for (const o of options)
    if (typeof o?.commandTimeout === 'number') o.commandTimeout = Math.max(o.commandTimeout, wait);
  try {
    await withDeadline(redis.quit(), wait);
  } catch {
    redis.disconnect();
  }
}

function isRedisInstance(value: unknown): value is Redis | Cluster {
  if (typeof value !== 'object' || value === null) return false;
  const o = value as Record<string, unknown>;
  return typeof o.duplicate === 'function' && typeof o.connect === 'function' && typeof o.options === 'object';
}

function describeClusterInstance(cluster: Cluster): string {
  const given = (cluster as unknown as { startupNodes?: unknown[] }).startupNodes ?? [];
  return describeNodes(
    given.map((node) => {
      if (typeof node === 'number') return { port: node };
      if (typeof node === 'string') {
        try {
          const url = new URL(/^\w+:\/\//.test(node) ? node : `redis://${node}`);
          return { host: url.hostname, port: Number(url.port || 6379) };
        } catch {
          return {};
        }
      }
      const { host, port } = (node ?? {}) as { host?: string; port?: number };
      return { host, port };
    }),
  );
}

function describeRedis(options: RedisOptions | undefined): string {
  if (options?.path) return options.path;
  return `${options?.host ?? '127.0.0.1'}:${options?.port ?? 6379}`;
}

/** A Redis Cluster given by some of its nodes (the client learns the others). */
export interface OutboxClusterConnection {
  cluster: readonly (string | { host: string; port: number })[];
  clusterOptions?: ClusterOptions;
}

/** After a failover's error (closed connection, `CLUSTERDOWN`, `TRYAGAIN`), in ms. */
const RETRY_DELAY = 250;

/**
 * The ioredis Cluster options the outbox starts from. ioredis gives a command up after 16 redirections 100 ms apart,
 * far shorter than a failover, so a command that meets one is retried every 250 ms with the slot map read again (a
 * producer's for `rideMs`, a worker's until Redis is back). Reading the slot map every second moves commands off a
 * master that hangs after its successor takes over.
 */
export function clusterDefaults(role: RedisRole, rideMs = 30_000): ClusterOptions {
  return {
    retryDelayOnFailover: RETRY_DELAY,
    retryDelayOnClusterDown: RETRY_DELAY,
    retryDelayOnTryAgain: RETRY_DELAY,
    retryDelayOnMoved: 0,
    maxRedirections: role === 'producer' ? Math.ceil(rideMs / RETRY_DELAY) + 1 : Number.MAX_SAFE_INTEGER,
    slotsRefreshInterval: 1_000,
    slotsRefreshTimeout: 1_000,
    redisOptions: {
      connectTimeout: 2_000,
      ...connectionDefaults(role, rideMs),
    },
  };
}

function isClusterConnection(connection: unknown): connection is OutboxClusterConnection | Cluster {
  if (typeof connection !== 'object' || connection === null) return false;
  return 'cluster' in connection || (connection as { isCluster?: unknown }).isCluster === true;
}

/** BullMQ's scripts touch several keys at once, which a cluster refuses (`CROSSSLOT`) across slots. */
export function checkClusterLocation(location: QueueLocation): void {
  const base = queueKey(location, '');
  const open = base.indexOf('{');
  const close = open === -1 ? -1 : base.indexOf('}', open + 1);
  if (open === -1 || close <= open + 1) {
    throw configError(
      'prefix',
      `on a Redis Cluster every key of the queue must be in one hash slot, so the prefix needs a hash tag, e.g. '{eml-api}' ` +
        `(got ${describe(location.prefix)}: BullMQ's keys would spread over the cluster and fail with CROSSSLOT); ` +
        'give producers, workers and the CLI the same prefix',
    );
  }
}

/** Opens a Redis Cluster client, `clusterOptions` over the outbox's defaults for `role`. */
export function openCluster(
  connection: OutboxClusterConnection,
  role: RedisRole,
  option: string,
  rideMs?: number,
): { redis: Cluster; where: string } {
  const { nodes, credentials, given } = clusterSettings(connection, option);
  const defaults = clusterDefaults(role, rideMs);
  const Cluster = loadRedisCluster();
  const redis = new Cluster(nodes, {
    ...defaults,
    ...given,
    redisOptions: { ...defaults.redisOptions, ...credentials, ...given.redisOptions },
  });
  return { redis, where: describeNodes(nodes) };
}

function clusterSettings(
  connection: OutboxClusterConnection,
  option: string,
): ReturnType<typeof clusterNodes> & { given: ClusterOptions } {
  const { nodes, credentials } = clusterNodes(connection.cluster, `${option}.cluster`);
  const given = connection.clusterOptions ?? {};
  if (typeof given !== 'object' || given === null) {
    throw configError(`${option}.clusterOptions`, `expected ioredis Cluster options, got ${describe(given)}`);
  }
  if ((given.redisOptions as RedisOptions | undefined)?.keyPrefix || (given as { keyPrefix?: string }).keyPrefix) {
    throw configError(
      `${option}.clusterOptions`,
      'keyPrefix is not supported (BullMQ refuses it); use the prefix option',
    );
  }
  return { nodes, credentials, given };
}

export function describeNodes(nodes: readonly { host?: string | undefined; port?: number | undefined }[]): string {
  const named = nodes.map((n) => `${n.host ?? '127.0.0.1'}:${n.port ?? 6379}`);
  const shown = named.length > 3 ? `${named.slice(0, 3).join(', ')} and ${named.length - 3} more` : named.join(', ');
  return `Redis Cluster ${shown}`;
}

/** The nodes, and their URLs' credentials and TLS, which ioredis would apply to the given nodes only. */
function clusterNodes(
  given: unknown,
  option: string,
): { nodes: { host: string; port: number }[]; credentials: RedisOptions } {
  if (!Array.isArray(given) || given.length === 0) {
    // Never shown: a URL may hold a password.
    const got = typeof given === 'string' ? 'a string (one URL: give a list, [url])' : describe(given);
    throw configError(
      option,
      `expected one or more redis:// URLs or { host, port } of the cluster's nodes, got ${got}`,
    );
  }
  const nodes: { host: string; port: number }[] = [];
  let credentials: RedisOptions | undefined;
  given.forEach((node: unknown, i) => {
    const name = `${option}[${i}]`;
    if (typeof node === 'object' && node !== null && !Array.isArray(node)) {
      const { host, port } = node as { host?: unknown; port?: unknown };
      if (
        typeof host !== 'string' ||
        host === '' ||
        !Number.isInteger(port) ||
        (port as number) < 1 ||
        (port as number) > 65535
      ) {
        throw configError(name, 'expected { host, port } with a port from 1 to 65535');
      }
      nodes.push({ host, port: port as number });
      return;
    }
    if (typeof node !== 'string')
      throw configError(name, `expected a redis:// URL or { host, port }, got ${describe(node)}`);
    const url = redisUrl(node, name, 'expected a redis:// or rediss:// URL');
    nodes.push({ host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || 6379) });
    const these: RedisOptions = {
      ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
      ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
      ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
    };
    if (credentials !== undefined && !sameCredentials(credentials, these)) {
      throw configError(
        name,
        'the nodes of a cluster share their user, password and TLS: every URL must give the same',
      );
    }
    credentials = these;
  });
  return { nodes, credentials: credentials ?? {} };
}

function redisUrl(text: string, option: string, unparsable: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw configError(option, unparsable);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw configError(option, `expected a redis:// or rediss:// URL, got a ${url.protocol} URL`);
  }
  return url;
}

function sameCredentials(a: RedisOptions, b: RedisOptions): boolean {
  return a.username === b.username && a.password === b.password && (a.tls === undefined) === (b.tls === undefined);
}

/** How long (ms) a node may take to answer before it is skipped as down: one not serving the queue must not stop it. */
export const NODE_ANSWER_MS = 2_000;

const SLOTS = 16384;

/** CRC16 of the key or its hash tag, modulo 16384. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(key)) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % SLOTS;
}

/** A SCAN pattern matching `literal`: unescaped, a prefix such as `{a[1]}` would match other keys, not its own. */
export function escapeGlob(pattern: string): string {
  const star = pattern.endsWith('*');
  const literal = star ? pattern.slice(0, -1) : pattern;
  return `${literal.replace(/[\\*?[\]]/g, '\\$&')}${star ? '*' : ''}`;
}

export function nodeName(node: Redis): string {
  return `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`;
}

/** Master first, as the slot map has them (failed replicas left out); every node when the map lacks the slot. */
export function slotNodes(cluster: Cluster, key: string): Redis[] {
  const names = cluster.slots[keySlot(key)];
  const all = cluster.nodes('all');
  if (!names || names.length === 0) return all;
  return names.map((name) => all.find((node) => nodeName(node) === name)).filter((n): n is Redis => n !== undefined);
}

/**
 * The servers a SCAN must cover to find a queue's keys. Masters flagged `fail` or silent for {@link NODE_ANSWER_MS} go
 * to `skipped`: the queue's slot is on a master that answers.
 */
export async function scannableServers(
  redis: OutboxRedisClient,
  skipped: (node: string, why: string) => void,
): Promise<Redis[]> {
  if (!isClusterClient(redis)) return [redis];
  if (redis.status !== 'ready') await redis.ping();
  const failed = await failedNodes(redis);
  const answering = await Promise.all(
    redis.nodes('master').map(async (node) => {
      const name = nodeName(node);
      if (failed.has(name)) {
        skipped(name, 'flagged as failed by the cluster');
        return undefined;
      }
      try {
        await withDeadline(node.ping(), NODE_ANSWER_MS);
        return node;
      } catch (err) {
        skipped(name, `did not answer (${(err as Error).message})`);
        return undefined;
      }
    }),
  );
  return answering.filter((node): node is Redis => node !== undefined);
}

/** None when no node answers in time (each master's PING then decides). */
async function failedNodes(cluster: Cluster): Promise<Set<string>> {
  const failed = new Set<string>();
  let view: string;
  try {
    view = String(await withDeadline(cluster.cluster('NODES'), NODE_ANSWER_MS));
  } catch {
    return failed;
  }
  for (const line of view.trim().split('\n')) {
    const [, address, flags] = line.split(' ');
    if (!address || !flags?.split(',').includes('fail')) continue;
    failed.add(address.split('@')[0]!);
  }
  return failed;
}

const INSTALL = 'bullmq ioredis';
const USER = 'The outbox (nodemailer-eml-api/queue)';

export type BullmqModule = typeof Bullmq;
type IoredisModule = typeof Ioredis & { default?: typeof Ioredis.Redis & { Cluster?: typeof Ioredis.Cluster } };

let bullmq: BullmqModule | undefined;
let ioredis: IoredisModule | undefined;

/** Loads `bullmq` on first use, so the CLI and the rest of the package run without it. */
export function loadBullmq(): BullmqModule {
  return (bullmq ??= requirePeer<BullmqModule>('bullmq', INSTALL, USER));
}

/** The outbox needs an ioredis client that answers with Buffers, and BullMQ 6 does not depend on ioredis. */
function loadIoredis(): IoredisModule {
  return (ioredis ??= requirePeer<IoredisModule>('ioredis', INSTALL, USER));
}

function loadRedis(): typeof Ioredis.Redis {
  const mod = loadIoredis();
  return mod.Redis ?? mod.default!;
}

function loadRedisCluster(): typeof Ioredis.Cluster {
  const mod = loadIoredis();
  return mod.Cluster ?? mod.default!.Cluster!;
}

/** @throws {EmlApiError} `ECONFIG` saying what to install when a peer of the outbox is missing */
export function requireQueuePeers(): { bullmq: string; ioredis: string } {
  loadBullmq();
  loadRedis();
  return { bullmq: versionOf('bullmq'), ioredis: versionOf('ioredis') };
}

function versionOf(name: string): string {
  try {
    return requirePeer<{ version: string }>(`${name}/package.json`, INSTALL, USER).version;
  } catch {
    // Its exports hide its package.json: installed all the same.
    return 'unknown';
  }
}

export class DeadlineError extends Error {
  override readonly name = 'DeadlineError';
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`);
  }
}

/** Rejects with a {@link DeadlineError} after `ms` unless `promise` settles; a Redis command cannot be taken back. */
export function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(ms)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

export function resolvesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return withDeadline(promise, ms).then(
    () => true,
    () => false,
  );
}

/** @internal The outbox's fixed waits, in ms: the product's, not options. The test suite lowers them. */
export const outboxWaits = {
  /** A forced close's wait for aborted sends to hand their jobs back (twice this after a graceful close). */
  handBack: 5_000,
  quit: 2_000,
  settingsCheck: 60_000,
};
