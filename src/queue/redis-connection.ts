import type { Redis, RedisOptions } from 'ioredis';
import { EmlApiError } from '../shared/eml-api-error.js';
import { loadRedis } from './queue-peers.js';

/**
 * Where the outbox's Redis is: a `redis://` or `rediss://` URL, ioredis
 * options, or an ioredis instance you made (you then close it yourself).
 *
 * @example
 * const connection: RedisConnectionInput = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
 */
export type RedisConnectionInput = string | RedisOptions | Redis;

/**
 * A Redis client of the outbox, and whether the outbox made it (and so closes it).
 * @example
 * const client: OutboxRedis = openOutboxRedis('redis://127.0.0.1:6379', 'producer');
 * await closeOutboxRedis(client);
 */
export interface OutboxRedis {
  readonly redis: Redis;
  readonly owned: boolean;
  /** Host and port for messages; never the password. */
  readonly where: string;
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
 * come back, as BullMQ requires of its workers.
 *
 * @param option the option's name in errors @default 'connection'
 * @throws {EmlApiError} `ECONFIG` when the option is not a Redis URL, options or an ioredis instance
 * @example
 * const { redis, owned } = openOutboxRedis(options.connection, 'producer');
 */
export function openOutboxRedis(connection: unknown, role: RedisRole, option = 'connection'): OutboxRedis {
  if (isRedisInstance(connection)) {
    if (connection.options.keyPrefix) {
      throw configError(
        `${option}: an ioredis instance with a keyPrefix cannot be used; use the prefix option instead`,
      );
    }
    return { redis: connection, owned: false, where: describe(connection.options) };
  }
  const Redis = loadRedis();
  const roleOptions: RedisOptions = role === 'worker' ? { maxRetriesPerRequest: null } : { maxRetriesPerRequest: 3 };
  if (typeof connection === 'string') {
    let url: URL;
    try {
      url = new URL(connection);
    } catch {
      throw configError(`${option}: expected a redis:// or rediss:// URL, ioredis options or an ioredis instance`);
    }
    if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
      throw configError(`${option}: expected a redis:// or rediss:// URL, got a ${url.protocol} URL`);
    }
    const redis = new Redis(connection, { ...roleOptions, lazyConnect: false });
    return { redis, owned: true, where: `${url.hostname}:${url.port || '6379'}` };
  }
  if (typeof connection === 'object' && connection !== null && !Array.isArray(connection)) {
    const options = connection as RedisOptions;
    if (options.keyPrefix) {
      throw configError(`${option}: keyPrefix is not supported (BullMQ refuses it); use the prefix option instead`);
    }
    return { redis: new Redis({ ...roleOptions, ...options }), owned: true, where: describe(options) };
  }
  throw configError(`${option}: expected a redis:// or rediss:// URL, ioredis options or an ioredis instance`);
}

/**
 * Closes a client the outbox made; leaves one it was given open.
 * @example
 * await closeOutboxRedis(client);
 */
export async function closeOutboxRedis(client: OutboxRedis): Promise<void> {
  if (!client.owned) return;
  try {
    await client.redis.quit();
  } catch {
    // Not connected (Redis is down): drop the connection attempts instead.
    client.redis.disconnect();
  }
}

function isRedisInstance(value: unknown): value is Redis {
  if (typeof value !== 'object' || value === null) return false;
  const o = value as Record<string, unknown>;
  return typeof o.duplicate === 'function' && typeof o.connect === 'function' && typeof o.options === 'object';
}

function describe(options: RedisOptions | undefined): string {
  if (options?.path) return options.path;
  return `${options?.host ?? '127.0.0.1'}:${options?.port ?? 6379}`;
}

function configError(message: string): EmlApiError {
  return new EmlApiError('ECONFIG', message, { permanent: true });
}
