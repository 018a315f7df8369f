import type { Redis, RedisOptions } from 'ioredis';
import { EmlApiError } from '../shared/eml-api-error.js';
import { withDeadline } from './deadline.js';
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
 * How long closing waits for Redis to answer QUIT before dropping the connection, in ms.
 * @example
 * await closeOutboxRedis(client, QUIT_WAIT);
 */
export const QUIT_WAIT = 2_000;

/**
 * Closes a client the outbox made; leaves one it was given open. Never waits
 * longer than `wait` for Redis: a QUIT that gets no answer (Redis down, and
 * a worker's client queues commands until it is back; or a network
 * partition, where the socket stays open) would otherwise keep close(), and
 * the process, waiting for ever.
 *
 * @param wait ms to wait for the answer to QUIT @default QUIT_WAIT
 * @example
 * await closeOutboxRedis(client);
 */
export async function closeOutboxRedis(client: OutboxRedis, wait = QUIT_WAIT): Promise<void> {
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
