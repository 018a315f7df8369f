import type { Cluster, ClusterOptions, RedisOptions } from 'ioredis';
import { configError, describe } from '../shared/options-kit.js';
import type { QueueLocation } from './queue-location.js';
import { loadRedisCluster } from './queue-peers.js';

/**
 * The outbox on a Redis Cluster: how it connects (the nodes it is given, with
 * defaults that ride a master's failover), how it names the cluster in
 * messages (by its nodes, never a password), and what it asks of the queue's
 * keys (one hash slot: BullMQ's scripts touch several keys of the queue at
 * once, and so do the outbox's).
 */

/**
 * A Redis Cluster to connect to: some of its nodes (one is enough; the client
 * learns the others from it), and ioredis `Cluster` options over the outbox's.
 * A password, user name or `rediss://` in the URLs applies to every node.
 * @example
 * const connection: OutboxClusterConnection = {
 *   cluster: ['redis://10.0.0.1:7000', 'redis://10.0.0.2:7000'],
 *   clusterOptions: { redisOptions: { password: process.env.REDIS_PASSWORD } },
 * };
 */
export interface OutboxClusterConnection {
  /** Nodes of the cluster: `redis://` or `rediss://` URLs, or `{ host, port }`. */
  cluster: readonly (string | { host: string; port: number })[];
  /**
   * ioredis `Cluster` options over the outbox's (`redisOptions` for what every node connection needs:
   * `password`, `username`, `tls`...).
   * @default the outbox's failover defaults, see {@link clusterDefaults}
   */
  clusterOptions?: ClusterOptions;
}

/**
 * What a connection is for: producers fail sends when Redis stays away, workers wait for it.
 * @example
 * const role: ClusterRole = 'worker';
 */
export type ClusterRole = 'producer' | 'worker';

/** How long a retry waits after a failover's error (a closed connection, `CLUSTERDOWN`, `TRYAGAIN`), in ms. */
const RETRY_DELAY = 250;

/**
 * The ioredis Cluster options the outbox starts from, for a producer or a
 * worker, measured against a master killed mid-traffic (the figures are in
 * docs/outbox.md, "Redis Cluster"; test/queue/failover.test.ts keeps them).
 * ioredis gives a command up after 16 redirections 100 ms apart (1.6 s),
 * while a failover takes
 * `cluster-node-timeout` (15 s by Redis's default) plus an election: sends
 * failed for the whole failover, and a worker's completions failed with
 * them, leaving their jobs to the lock's expiry (30 s) and the next stall
 * check (30 s more). Here a command that meets a failover (its master's
 * connection closed, `CLUSTERDOWN` while no master serves its slot,
 * `TRYAGAIN` while a slot moves) is tried again every 250 ms, the slot map
 * read again each time: a producer's for as long as its send may take
 * (`rideMs`, its `timeouts.store`), a worker's until Redis is back (as BullMQ
 * asks of its workers). The slot map is also read every second, so that
 * commands waiting on a master that hangs (rather than dies) move to its
 * successor soon after it takes over.
 *
 * @param rideMs how long a producer's command keeps trying @default 30000
 * @example
 * new Cluster(nodes, { ...clusterDefaults('producer', 30_000), ...yourOptions });
 */
export function clusterDefaults(role: ClusterRole, rideMs = 30_000): ClusterOptions {
  return {
    retryDelayOnFailover: RETRY_DELAY,
    retryDelayOnClusterDown: RETRY_DELAY,
    retryDelayOnTryAgain: RETRY_DELAY,
    retryDelayOnMoved: 0,
    maxRedirections: role === 'producer' ? Math.ceil(rideMs / RETRY_DELAY) + 1 : Number.MAX_SAFE_INTEGER,
    slotsRefreshInterval: 1_000,
    slotsRefreshTimeout: 1_000,
    redisOptions: {
      // A node that does not answer a connection attempt within this is given up for the next try.
      connectTimeout: 2_000,
      maxRetriesPerRequest: role === 'worker' ? null : 3,
    },
  };
}

/**
 * Whether `connection` is a Redis Cluster: an {@link OutboxClusterConnection}
 * or an ioredis `Cluster` instance.
 * @example
 * if (isClusterConnection(options.connection)) checkClusterLocation(location);
 */
export function isClusterConnection(connection: unknown): connection is OutboxClusterConnection | Cluster {
  if (typeof connection !== 'object' || connection === null) return false;
  return 'cluster' in connection || (connection as { isCluster?: unknown }).isCluster === true;
}

/**
 * Checks that every key of the queue falls in one hash slot of a cluster:
 * the prefix (or the queue name) must hold a hash tag, `{...}`, since every
 * key of the queue starts with `{prefix}:{queueName}`. BullMQ's scripts and
 * the outbox's touch several keys of a queue at once, which a cluster
 * refuses (`CROSSSLOT`) unless they share a slot.
 *
 * @throws {EmlApiError} `ECONFIG` naming `prefix`
 * @example
 * checkClusterLocation(resolveQueueLocation('eml-api', '{eml-api}')); // fine
 */
export function checkClusterLocation(location: QueueLocation): void {
  const base = `${location.prefix}:${location.queueName}`;
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

/**
 * Opens a Redis Cluster client with the outbox's defaults for `role` and the
 * caller's `clusterOptions` over them.
 *
 * @param option the option's name in errors
 * @param rideMs how long a producer's command keeps trying through a failover @default 30000
 * @throws {EmlApiError} `ECONFIG` naming the option when a node is not a Redis URL or `{ host, port }`
 * @example
 * const { redis, where } = openCluster({ cluster: ['redis://10.0.0.1:7000'] }, 'producer', 'connection');
 */
export function openCluster(
  connection: OutboxClusterConnection,
  role: ClusterRole,
  option: string,
  rideMs?: number,
): { redis: Cluster; where: string } {
  const { nodes, credentials } = clusterNodes(connection.cluster, `${option}.cluster`);
  const defaults = clusterDefaults(role, rideMs);
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
  const Cluster = loadRedisCluster();
  const redis = new Cluster(nodes, {
    ...defaults,
    ...given,
    redisOptions: { ...defaults.redisOptions, ...credentials, ...given.redisOptions },
  });
  return { redis, where: describeNodes(nodes) };
}

/**
 * Names a cluster in messages by the nodes it was given (never a password).
 * @example
 * describeNodes([{ host: '10.0.0.1', port: 7000 }]); // 'Redis Cluster 10.0.0.1:7000'
 */
export function describeNodes(nodes: readonly { host?: string | undefined; port?: number | undefined }[]): string {
  const named = nodes.map((n) => `${n.host ?? '127.0.0.1'}:${n.port ?? 6379}`);
  const shown = named.length > 3 ? `${named.slice(0, 3).join(', ')} and ${named.length - 3} more` : named.join(', ');
  return `Redis Cluster ${shown}`;
}

/**
 * The nodes as `{ host, port }`, and the credentials and TLS their URLs
 * carry, which ioredis would otherwise use for the nodes given only, not for
 * those it discovers.
 */
function clusterNodes(
  given: unknown,
  option: string,
): { nodes: { host: string; port: number }[]; credentials: RedisOptions } {
  if (!Array.isArray(given) || given.length === 0) {
    // A string is described, never shown: a URL may hold a password.
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
    let url: URL;
    try {
      url = new URL(node);
    } catch {
      // Never the value: it may hold a password.
      throw configError(name, 'expected a redis:// or rediss:// URL');
    }
    if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
      throw configError(name, `expected a redis:// or rediss:// URL, got a ${url.protocol} URL`);
    }
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

function sameCredentials(a: RedisOptions, b: RedisOptions): boolean {
  return a.username === b.username && a.password === b.password && (a.tls === undefined) === (b.tls === undefined);
}
