import type { Redis } from 'ioredis';
import { EmlApiError } from '../shared/eml-api-error.js';
import {
  isClusterClient,
  type OutboxRedisClient,
  NODE_ANSWER_MS,
  nodeName,
  outboxWaits,
  slotNodes,
  withDeadline,
} from './redis-connection.js';
import { configError } from '../shared/options-kit.js';
import type { OutboxKeyring } from './content-cipher.js';
import { outboxKeys, queueKey, type QueueLocation } from './queue-location.js';
import type { ReadinessCheck } from '../observability/ops-server.js';

/**
 * How durable Redis must be before a producer queues mail:
 * - `'warn'`: queue in any case; warn when the append-only file is off (mail survives no restart)
 * - `'aof'`: refuse (`ECONFIG`) unless `appendonly yes`
 * - `'aof-always'`: also `appendfsync always`, as Postfix fsyncs a message before its `250`
 * @example
 * new EmlApiQueueTransport({ connection, durability: 'aof' });
 */
export type OutboxDurability = 'warn' | 'aof' | 'aof-always';

export const OUTBOX_DURABILITIES: readonly OutboxDurability[] = ['warn', 'aof', 'aof-always'];

/** Redis's settings that decide whether queued mail survives; `undefined` where this connection may not read them. */
export interface RedisSettings {
  evictionPolicy: string | undefined;
  appendOnly: boolean | undefined;
  /** `appendfsync` (`INFO` does not tell it). */
  appendFsync: string | undefined;
  clusterEnabled: boolean | undefined;
}

/** Reads the settings with `CONFIG GET`, or from `INFO` where a managed Redis forbids `CONFIG`. */
export async function readRedisSettings(redis: Redis): Promise<RedisSettings> {
  try {
    const [policy, aof, fsync, cluster] = await Promise.all(
      ['maxmemory-policy', 'appendonly', 'appendfsync', 'cluster-enabled'].map(
        async (name) => ((await redis.call('CONFIG', 'GET', name)) as string[])[1],
      ),
    );
    return {
      evictionPolicy: policy,
      appendOnly: aof === undefined ? undefined : aof === 'yes',
      appendFsync: fsync,
      clusterEnabled: cluster === undefined ? undefined : cluster === 'yes',
    };
  } catch (err) {
    if (!refused(err)) throw err;
  }
  const info = async (section: string): Promise<string> => {
    try {
      return (await redis.call('INFO', section)) as string;
    } catch (err) {
      if (!refused(err)) throw err;
      return '';
    }
  };
  const field = (text: string, name: string) => new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(text)?.[1];
  const aof = field(await info('persistence'), 'aof_enabled');
  const cluster = field(await info('cluster'), 'cluster_enabled');
  return {
    evictionPolicy: field(await info('memory'), 'maxmemory_policy'),
    appendOnly: aof === undefined ? undefined : aof === '1',
    appendFsync: undefined,
    clusterEnabled: cluster === undefined ? undefined : cluster === '1',
  };
}

/**
 * Checks that Redis keeps what the outbox stores: refuses an eviction policy other than `noeviction` (queued mail would
 * be evicted silently) and missing persistence `durability` asks for; warns where persistence is off or unreadable.
 * On a cluster the nodes serving the queue's slot are checked, as a failover makes a replica the master (a silent one
 * is skipped with a warning); a cluster node reached as a single server is refused: the queue's keys answer `MOVED`.
 * @param location where the queue's keys are @default undefined (every node of a cluster)
 * @throws {EmlApiError} `ECONFIG` (permanent) naming the setting and the command that fixes it
 */
export async function checkRedisSettings(
  redis: OutboxRedisClient,
  where: string,
  durability: OutboxDurability,
  warn: (message: string) => void,
  location?: { prefix: string; queueName: string },
  verified = false,
): Promise<void> {
  if (!isClusterClient(redis)) {
    await checkServer(redis, where, durability, false, (_kind, message) => warn(message), verified);
    return;
  }
  if (redis.status !== 'ready') await redis.ping();
  // Nothing of the queue works without its slot's master; any other node may be down.
  const serving = location ? slotNodes(redis, queueKey(location, 'meta')) : [];
  const master: Redis | undefined = serving[0];
  const others = location ? serving.slice(1) : redis.nodes('all');
  const warnings = new Map<string, { message: string; nodes: number }>();
  const collect = (kind: string, message: string) => {
    const seen = warnings.get(kind);
    if (seen) seen.nodes++;
    else warnings.set(kind, { message, nodes: 1 });
  };
  const named = (node: Redis) => `${where} (node ${nodeName(node)})`;
  await Promise.all([
    master && checkServer(master, named(master), durability, true, collect, verified),
    ...others.map(async (node) => {
      try {
        await withDeadline(checkServer(node, named(node), durability, true, collect, verified), NODE_ANSWER_MS);
      } catch (err) {
        if (err instanceof EmlApiError) throw err;
        collect(
          'unanswered',
          `Could not read the settings of Redis at ${named(node)}: it did not answer (${(err as Error).message}); ` +
            'skipped: a node down serves none of the queue, but a replica of its master down cannot take over from it',
        );
      }
    }),
  ]);
  for (const { message, nodes: count } of warnings.values()) {
    warn(count > 1 ? `${message} (and ${count - 1} more node${count > 2 ? 's' : ''} alike)` : message);
  }
}

async function checkServer(
  redis: Redis,
  where: string,
  durability: OutboxDurability,
  asCluster: boolean,
  warn: (kind: string, message: string) => void,
  verified: boolean,
): Promise<void> {
  const { evictionPolicy, appendOnly, appendFsync, clusterEnabled } = await readRedisSettings(redis);
  if (clusterEnabled && !asCluster) {
    throw new EmlApiError(
      'ECONFIG',
      `Redis at ${where} is a node of a Redis Cluster: connect to it as a cluster (connection: { cluster: [its nodes' URLs] }, ` +
        "eml-api --redis-cluster), with a hash-tagged prefix such as '{eml-api}'",
      { permanent: true, command: 'CONFIG GET cluster-enabled', response: 'yes' },
    );
  }
  if (evictionPolicy === undefined) {
    warn(
      'policy',
      `Could not read maxmemory-policy of Redis at ${where} (CONFIG and INFO are refused to this connection): ` +
        'it must be noeviction, or Redis drops queued mail silently when memory runs short',
    );
  } else if (evictionPolicy !== 'noeviction') {
    throw new EmlApiError(
      'ECONFIG',
      `Redis at ${where} evicts keys when memory runs short (maxmemory-policy ${evictionPolicy}): queued mail ` +
        'would be lost silently, jobs and content alike. The outbox needs maxmemory-policy noeviction: ' +
        'CONFIG SET maxmemory-policy noeviction (and set it in redis.conf, or your provider’s parameter group)',
      { permanent: true, command: 'CONFIG GET maxmemory-policy', response: evictionPolicy },
    );
  }
  const needsAof = durability !== 'warn';
  if (appendOnly === undefined) {
    const message =
      `Could not read whether Redis at ${where} persists writes (CONFIG and INFO are refused to this connection): ` +
      'without appendonly yes, a queued message survives no restart of Redis';
    if (needsAof && !verified) throw unverifiable(message, durability, 'CONFIG GET appendonly');
    warn('persistence', message);
  } else if (!appendOnly) {
    const message =
      `Redis at ${where} runs without its append-only file (appendonly no): a queued message survives no ` +
      'restart of Redis. CONFIG SET appendonly yes (and set it in redis.conf), with appendfsync everysec at least';
    if (needsAof) {
      throw new EmlApiError('ECONFIG', `${message} (durability: '${durability}')`, {
        permanent: true,
        command: 'CONFIG GET appendonly',
        response: 'no',
      });
    }
    warn('no-aof', message);
  }
  if (durability === 'aof-always' && appendOnly === true) {
    if (appendFsync === undefined) {
      const message =
        `Could not read appendfsync of Redis at ${where} (CONFIG is refused to this connection, and INFO does not ` +
        "tell it): durability 'aof-always' needs appendfsync always";
      if (!verified) throw unverifiable(message, durability, 'CONFIG GET appendfsync');
      warn('fsync', message);
    } else if (appendFsync !== 'always') {
      throw new EmlApiError(
        'ECONFIG',
        `Redis at ${where} writes its append-only file to disk ${appendFsync === 'everysec' ? 'every second' : 'when the system decides'} ` +
          `(appendfsync ${appendFsync}): a crash loses what was acknowledged since. durability: 'aof-always' needs ` +
          'CONFIG SET appendfsync always (and set it in redis.conf)',
        { permanent: true, command: 'CONFIG GET appendfsync', response: appendFsync },
      );
    }
  }
}

/** Queueing on a guess would give the `250` a promise nobody checked. */
function unverifiable(message: string, durability: OutboxDurability, command: string): EmlApiError {
  return new EmlApiError(
    'ECONFIG',
    `${message}. durability: '${durability}' is refused where it cannot be checked: give this connection CONFIG ` +
      "(or INFO), or, when the setting is verified another way (your provider's console or parameter group), " +
      'say so with durabilityVerified: true',
    { permanent: true, command, response: 'unreadable' },
  );
}

/** Renamed, unknown, or not allowed to this user, as opposed to failing. */
function refused(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError';
}

/**
 * Records the check value of the producer's current key (the first producer of an id writes it), then compares every
 * key held with Redis's: other bytes under an id would queue mail no worker can read.
 */
export async function registerKeyChecks(
  redis: OutboxRedisClient,
  location: QueueLocation,
  keyring: OutboxKeyring,
): Promise<void> {
  const { keyChecks } = outboxKeys(location);
  if (keyring.keyId !== undefined) await redis.hsetnx(keyChecks, keyring.keyId, keyring.checkValue(keyring.keyId));
  await compareKeyChecks(redis, location, keyring, 'producers');
}

/**
 * Compares every key held with the check values in Redis, so a worker with other bytes under an id refuses to start
 * instead of failing every encrypted job. Ids Redis has none for pass.
 * @throws {EmlApiError} `ECONFIG` naming `encryption.keys.<id>` on a mismatch
 */
export async function compareKeyChecks(
  redis: OutboxRedisClient,
  location: QueueLocation,
  keyring: OutboxKeyring,
  others = 'producers',
): Promise<void> {
  const ids = keyring.keyIds;
  if (ids.length === 0) return;
  const stored = await redis.hmget(outboxKeys(location).keyChecks, ...ids);
  ids.forEach((id, i) => {
    const check = stored[i];
    if (check !== null && check !== undefined && check !== keyring.checkValue(id)) {
      throw keyMismatch(location, id, others);
    }
  });
}

/** `unknown` when Redis has no check value for `keyId`. */
export async function keyVerdict(
  redis: OutboxRedisClient,
  location: QueueLocation,
  keyring: OutboxKeyring,
  keyId: string,
): Promise<'right' | 'wrong' | 'unknown'> {
  const check = await redis.hget(outboxKeys(location).keyChecks, keyId);
  if (check === null) return 'unknown';
  return check === keyring.checkValue(keyId) ? 'right' : 'wrong';
}

function keyMismatch(location: QueueLocation, id: string, others: string): EmlApiError {
  return configError(
    `encryption.keys.${id}`,
    `these are not the bytes the ${others} of queue "${location.queueName}" use under the key id "${id}" ` +
      `(its check value in Redis, ${outboxKeys(location).keyChecks}, differs): mail encrypted with one could not be ` +
      'read with the other. Give every producer and worker the same key under an id (EML_API_OUTBOX_KEYS), and a ' +
      'new key a new id',
  );
}

/** What a {@link RedisSettingsWatch} tells as it finds the settings. */
export interface SettingsReports {
  /** Keeps mail less safely than it should, or cannot be read (each said once). */
  warn(message: string): void;
  /** Said when they become wrong, or wrong another way. */
  wrong(message: string): void;
  fixed(message: string): void;
}

/**
 * Redis's settings, checked again after every reconnect (a restarted Redis may evict or lose acknowledged mail), when
 * the queue's slot gets another master, and on an interval (`CONFIG SET`). Producers acknowledge only once the settings
 * were found right since the last (re)connection.
 */
export class RedisSettingsWatch {
  readonly #redis: OutboxRedisClient;
  readonly #where: string;
  readonly #options: SettingsWatchOptions;
  /** Bumped at each (re)connect, and when the queue's master changes. */
  #epoch = 0;
  /** The epoch the last check that found the settings right started in. */
  #confirmed = -1;
  #wrong: EmlApiError | undefined;
  #running: Promise<void> | undefined;
  #warned = new Set<string>();
  #stops: (() => void)[] = [];
  #timer: NodeJS.Timeout | undefined;
  #master: string | undefined;

  constructor(endpoint: { redis: OutboxRedisClient; where: string }, options: SettingsWatchOptions) {
    this.#redis = endpoint.redis;
    this.#where = endpoint.where;
    this.#options = options;
  }

  get problem(): EmlApiError | undefined {
    return this.#wrong;
  }

  get confirmed(): boolean {
    return this.#wrong === undefined && this.#confirmed === this.#epoch;
  }

  /** Resolves once the settings were found right since the last (re)connection: at once when they were. */
  async confirm(): Promise<void> {
    this.start();
    while (!this.confirmed) await this.check();
  }

  /** Calls made meanwhile share the check. */
  check(): Promise<void> {
    this.#running ??= this.#check().finally(() => (this.#running = undefined));
    return this.#running;
  }

  start(): void {
    if (this.#stops.length > 0 || this.#timer) return;
    const bump = () => {
      this.#epoch++;
      // Said at once: a worker's log and /readyz, a producer's refusals.
      void this.check().catch(() => undefined);
    };
    const redis = this.#redis;
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- ioredis's listeners take any arguments
    type Listener = (...args: any[]) => void;
    type Emitter = { on(event: string, l: Listener): unknown; off(event: string, l: Listener): unknown };
    const on = (emitter: Emitter, event: string, listener: Listener) => {
      emitter.on(event, listener);
      this.#stops.push(() => emitter.off(event, listener));
    };
    on(redis, 'ready', bump);
    if (isClusterClient(redis)) {
      // A restarted node comes back on its own connection; a failover gives the slot another master.
      for (const node of redis.nodes('all')) on(node, 'ready', bump);
      on(redis, '+node', (node: Redis) => on(node, 'ready', bump));
      const location = this.#options.location;
      if (location) {
        on(redis, 'refresh', () => {
          const master = slotNodes(redis, queueKey(location, 'meta'))[0];
          const name = master && nodeName(master);
          if (this.#master !== undefined && name !== this.#master) bump();
          this.#master = name;
        });
      }
    }
    this.#timer = setInterval(() => void this.check().catch(() => undefined), outboxWaits.settingsCheck);
    this.#timer.unref();
    let set = watches.get(redis.options);
    if (!set) watches.set(redis.options, (set = new Set()));
    set.add(this);
    this.#stops.push(() => set.delete(this));
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    for (const stop of this.#stops.splice(0)) stop();
  }

  async #check(): Promise<void> {
    const epoch = this.#epoch;
    const { durability, location, reports, verified, more } = this.#options;
    try {
      await checkRedisSettings(this.#redis, this.#where, durability, (m) => this.#warn(m), location, verified);
      await more?.();
    } catch (err) {
      if (err instanceof EmlApiError && err.code === 'ECONFIG') {
        if (this.#wrong?.message !== err.message) reports.wrong(err.message);
        this.#wrong = err;
      }
      throw err;
    }
    if (this.#wrong) {
      reports.fixed(
        `Redis at ${this.#where} keeps queued mail as the outbox needs again (${this.#wrong.command ?? 'its settings'} fixed)`,
      );
    }
    this.#wrong = undefined;
    this.#confirmed = epoch;
  }

  #warn(message: string): void {
    if (this.#warned.has(message)) return;
    this.#warned.add(message);
    this.#options.reports.warn(message);
  }
}

export interface SettingsWatchOptions {
  durability: OutboxDurability;
  /** Take persistence the settings cannot tell as the operator's word (`durabilityVerified`). */
  verified?: boolean;
  location?: { prefix: string; queueName: string };
  reports: SettingsReports;
  /** More checks made with the settings' (encryption keys, the queue's owner). */
  more?: () => Promise<void>;
}

/** By the client's options object: BullMQ 6 hands out its own proxy of a client, which reads the same one. */
const watches = new WeakMap<object, Set<RedisSettingsWatch>>();

/**
 * The readiness of the outbox's Redis for `/readyz`: it answers and keeps what is queued. A watched client is checked
 * as its watch checks it, any other for `noeviction` only, without warnings: a frequent probe must not fill logs.
 * @param location where the queue's keys are @default undefined (every node of a cluster)
 */
export function outboxRedisReadiness(
  redis: () => OutboxRedisClient | Promise<OutboxRedisClient>,
  location?: { prefix: string; queueName: string },
): ReadinessCheck {
  return {
    name: 'redis',
    async check() {
      const client = await redis();
      // A cluster's PING may go to a node that is down; a key of the queue goes to its slot's master.
      if (location && isClusterClient(client)) await client.exists(queueKey(location, 'meta'));
      else await client.ping();
      const watching = [...(watches.get(client.options) ?? [])];
      if (watching.length > 0) {
        for (const watch of watching) await watch.check();
        return;
      }
      const { host, port } = (isClusterClient(client) ? undefined : client.options) ?? {};
      const where = isClusterClient(client) ? 'the Redis Cluster' : `${host ?? '?'}:${port ?? '?'}`;
      await checkRedisSettings(client, where, 'warn', () => undefined, location);
    },
  };
}

/** The password of a Redis connection given as a URL or options, which a health reason never shows. */
export function redisPassword(connection: unknown): string | undefined {
  if (typeof connection === 'string') {
    try {
      return decodeURIComponent(new URL(connection).password) || undefined;
    } catch {
      return undefined;
    }
  }
  const password = (connection as { password?: unknown; options?: { password?: unknown } } | null)?.password;
  return typeof password === 'string' && password !== '' ? password : undefined;
}
