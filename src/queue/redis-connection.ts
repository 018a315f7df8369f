import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { configError } from '../shared/options-kit.js';
import { withDeadline } from './deadline.js';
import { outboxWaits } from './outbox-waits.js';
import { loadRedis } from './queue-peers.js';
import type { QueueLocation } from './queue-location.js';
import {
  checkClusterLocation,
  describeNodes,
  isClusterConnection,
  openCluster,
  type OutboxClusterConnection,
} from './redis-cluster.js';

/**
 * Where the outbox's Redis is: a `redis://` or `rediss://` URL, ioredis
 * options, or an ioredis instance you made (you then close it yourself); or a
 * Redis Cluster: `{ cluster: [node URLs], clusterOptions? }`, or an ioredis
 * `Cluster` you made. On a cluster the queue's `prefix` needs a hash tag
 * (`'{eml-api}'`).
 *
 * @example
 * const connection: RedisConnectionInput = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
 * const cluster: RedisConnectionInput = { cluster: ['redis://10.0.0.1:7000', 'redis://10.0.0.2:7000'] };
 */
export type RedisConnectionInput = string | RedisOptions | Redis | Cluster | OutboxClusterConnection;

/**
 * The client the outbox talks to Redis through: one server, or a cluster.
 * @example
 * const client: OutboxRedisClient = openOutboxRedis(connection, 'producer', location).redis;
 */
export type OutboxRedisClient = Redis | Cluster;

/**
 * Whether a client of the outbox is a Redis Cluster's.
 * @example
 * const servers = isClusterClient(redis) ? redis.nodes('master') : [redis];
 */
export function isClusterClient(redis: OutboxRedisClient): redis is Cluster {
  return (redis as { isCluster?: boolean }).isCluster === true;
}

/**
 * A Redis client of the outbox, and whether the outbox made it (and so closes it).
 * @example
 * const client: OutboxRedis = openOutboxRedis('redis://127.0.0.1:6379', 'producer', location);
 * await closeOutboxRedis(client);
 */
export interface OutboxRedis {
  readonly redis: OutboxRedisClient;
  readonly owned: boolean;
  /** Host and port for messages (a cluster: the nodes it was given); never the password. */
  readonly where: string;
  /** Whether it is a Redis Cluster. */
  readonly cluster: boolean;
}

/**
 * What the connection is for: producers fail sends after a few reconnect tries, workers wait for Redis.
 * @example
 * const role: RedisRole = 'worker';
 */
export type RedisRole = 'producer' | 'worker';

/**
 * Opens (or adopts) the Redis client of a producer or a worker.
 *
 * A producer's commands fail after 3 reconnect attempts instead of waiting
 * (so `sendMail` rejects while Redis is down); a worker's wait for Redis to
 * come back, as BullMQ requires of its workers. A cluster's commands ride a
 * failover (see `clusterDefaults`), and the queue's keys must share a hash
 * slot there.
 *
 * @param location where the queue's keys are (checked for a hash tag on a cluster)
 * @param option the option's name in errors @default 'connection'
 * @param rideMs how long a producer's command keeps trying through a cluster's failover (its `timeouts.store`)
 *   @default 30000
 * @throws {EmlApiError} `ECONFIG` when the option is not a Redis URL, options, cluster nodes or an
 *   ioredis instance, or when the prefix of a queue on a cluster has no hash tag
 * @example
 * const { redis, owned } = openOutboxRedis(options.connection, 'producer', location);
 */
export function openOutboxRedis(
  connection: unknown,
  role: RedisRole,
  location: QueueLocation,
  option = 'connection',
  rideMs?: number,
): OutboxRedis {
  if (isClusterConnection(connection)) {
    checkClusterLocation(location);
    if (isRedisInstance(connection)) {
      const given = connection as Cluster;
      if (given.options.keyPrefix || given.options.redisOptions?.keyPrefix) {
        throw configError(option, `an ioredis Cluster with a keyPrefix cannot be used; use the prefix option instead`);
      }
      return { redis: given, owned: false, where: describeClusterInstance(given), cluster: true };
    }
    return { ...openCluster(connection as OutboxClusterConnection, role, option, rideMs), owned: true, cluster: true };
  }
  if (isRedisInstance(connection)) {
    const given = connection as Redis;
    if (given.options.keyPrefix) {
      throw configError(option, `an ioredis instance with a keyPrefix cannot be used; use the prefix option instead`);
    }
    return { redis: given, owned: false, where: describe(given.options), cluster: false };
  }
  const Redis = loadRedis();
  const roleOptions: RedisOptions = role === 'worker' ? { maxRetriesPerRequest: null } : { maxRetriesPerRequest: 3 };
  if (typeof connection === 'string') {
    let url: URL;
    try {
      url = new URL(connection);
    } catch {
      throw configError(option, `expected a redis:// or rediss:// URL, ioredis options or an ioredis instance`);
    }
    if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
      throw configError(option, `expected a redis:// or rediss:// URL, got a ${url.protocol} URL`);
    }
    const redis = new Redis(connection, { ...roleOptions, lazyConnect: false });
    return { redis, owned: true, where: `${url.hostname}:${url.port || '6379'}`, cluster: false };
  }
  if (typeof connection === 'object' && connection !== null && !Array.isArray(connection)) {
    const options = connection as RedisOptions;
    if (options.keyPrefix) {
      throw configError(option, `keyPrefix is not supported (BullMQ refuses it); use the prefix option instead`);
    }
    return { redis: new Redis({ ...roleOptions, ...options }), owned: true, where: describe(options), cluster: false };
  }
  throw configError(
    option,
    `expected a redis:// or rediss:// URL, ioredis options, { cluster: [node URLs] } or an ioredis instance`,
  );
}

/**
 * Closes a client the outbox made; leaves one it was given open. Never waits
 * longer than `wait` for Redis: a QUIT that gets no answer (Redis down, and
 * a worker's client queues commands until it is back; or a network
 * partition, where the socket stays open) would otherwise keep close(), and
 * the process, waiting for ever.
 *
 * @param wait ms to wait for the answer to QUIT @default outboxWaits.quit (2 s)
 * @example
 * await closeOutboxRedis(client);
 */
export async function closeOutboxRedis(client: OutboxRedis, wait = outboxWaits.quit): Promise<void> {
  if (!client.owned) return;
  const { redis } = client;
  if (redis.status !== 'ready') {
    // Not connected: nothing to say goodbye to; stop the reconnection attempts.
    redis.disconnect();
    return;
  }
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

/** An ioredis Cluster made by the app, named by the nodes it was made with (never a password). */
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

function describe(options: RedisOptions | undefined): string {
  if (options?.path) return options.path;
  return `${options?.host ?? '127.0.0.1'}:${options?.port ?? 6379}`;
}
