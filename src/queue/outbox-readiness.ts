import { isClusterClient, type OutboxRedisClient } from './redis-connection.js';
import type { ReadinessCheck } from '../observability/health.js';
import { checkRedisSettings } from './redis-settings.js';

/**
 * The readiness of the outbox's Redis, for `/readyz` of a worker or a
 * store-and-forward relay: it answers, and keeps what is queued
 * (`maxmemory-policy noeviction`). Its persistence is not checked here: a
 * Redis without its append-only file was warned about at start, and a probe
 * every few seconds must not repeat the warning in the logs.
 *
 * @param redis the connection to check (read when the check runs)
 * @param location where the queue's keys are: on a cluster, only the nodes serving their slot matter
 *   (a master of other slots down does not make the outbox unready) @default undefined (every node)
 * @example
 * const check = outboxRedisReadiness(() => redis, location); // { name: 'redis', check }
 */
export function outboxRedisReadiness(
  redis: () => OutboxRedisClient | Promise<OutboxRedisClient>,
  location?: { prefix: string; queueName: string },
): ReadinessCheck {
  return {
    name: 'redis',
    async check() {
      const client = await redis();
      // On a cluster a PING goes to a node picked at random (which may be one that is down): a read of a key
      // of the queue goes to the master of its slot, the node that must answer.
      if (location && isClusterClient(client)) await client.exists(`${location.prefix}:${location.queueName}:meta`);
      else await client.ping();
      const { host, port } = (isClusterClient(client) ? undefined : client.options) ?? {};
      const where = isClusterClient(client) ? 'the Redis Cluster' : `${host ?? '?'}:${port ?? '?'}`;
      await checkRedisSettings(client, where, 'warn', () => undefined, location);
    },
  };
}

/**
 * The password of a Redis connection given as a URL or ioredis options, if
 * any: one more string a health reason never shows.
 * @example
 * redisPassword('redis://:s3cret@redis:6379'); // 's3cret'
 */
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
