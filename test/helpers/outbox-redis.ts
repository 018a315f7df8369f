import type { Cluster, Redis } from 'ioredis';
import type { RedisConnectionInput } from '../../src/queue/index.js';
import { resolveQueueLocation, type QueueLocation } from '../../src/queue/queue-location.js';
import { startRedisCluster, type RedisCluster } from './redis-cluster.js';
import { startRedisServer, type RedisServer } from './redis-server.js';

/**
 * The Redis an outbox test runs on, one server or a cluster, so that the
 * crash and exactly-once tests run on both without being written twice:
 * `describe.each(REDIS_KINDS)` and `startOutboxRedis(kind)`.
 * @example
 * describe.each(REDIS_KINDS)('on %s Redis', (kind) => {
 *   let redis: OutboxRedisUnderTest;
 *   beforeAll(async () => (redis = await startOutboxRedis(kind)));
 *   // new EmlApiQueueTransport({ connection: redis.connection, prefix: redis.prefix })
 * });
 */
export interface OutboxRedisUnderTest {
  readonly kind: RedisKind;
  /** What producers and workers connect with. */
  readonly connection: RedisConnectionInput;
  /** The queue's prefix: BullMQ's default on one server, hash-tagged on a cluster. */
  readonly prefix: string;
  /** Where the default queue's keys are. */
  readonly location: QueueLocation;
  /** A client for the test's own checks (a cluster client on a cluster). */
  readonly client: Redis | Cluster;
  /** The Redis key of `name` in the default queue, e.g. `key('active')`. */
  key(name: string): string;
  /** Keys matching `pattern`, on every master. */
  keys(pattern: string): Promise<string[]>;
  /** Empties every master. */
  flushall(): Promise<void>;
  /** The server, on one server. */
  readonly server?: RedisServer;
  /** The cluster, on a cluster. */
  readonly cluster?: RedisCluster;
  stop(): Promise<void>;
}

export type RedisKind = 'standalone' | 'cluster';

/** Both kinds, for `describe.each`. */
export const REDIS_KINDS: readonly RedisKind[] = ['standalone', 'cluster'];

export async function startOutboxRedis(kind: RedisKind): Promise<OutboxRedisUnderTest> {
  const prefix = kind === 'cluster' ? '{eml-api}' : 'bull';
  const location = resolveQueueLocation(undefined, prefix);
  const key = (name: string) => `${prefix}:eml-api:${name}`;
  if (kind === 'standalone') {
    const server = await startRedisServer();
    return {
      kind,
      connection: server.url,
      prefix,
      location,
      client: server.client,
      key,
      keys: (pattern) => server.client.keys(pattern).then((found) => found.sort()),
      flushall: async () => {
        await server.client.flushall();
      },
      server,
      stop: () => server.stop(),
    };
  }
  const cluster = await startRedisCluster();
  return {
    kind,
    connection: { cluster: [...cluster.urls] },
    prefix,
    location,
    client: cluster.client,
    key,
    keys: (pattern) => cluster.keys(pattern),
    flushall: async () => {
      await Promise.all(cluster.client.nodes('master').map((node) => node.flushall()));
    },
    cluster,
    stop: () => cluster.stop(),
  };
}
