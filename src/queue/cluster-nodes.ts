import type { Cluster, Redis } from 'ioredis';
import { withDeadline } from './deadline.js';
import { isClusterClient, type OutboxRedisClient } from './redis-connection.js';

/**
 * Which nodes of a Redis Cluster the outbox talks to beyond the cluster
 * client's routing: the nodes that serve the queue's hash slot (whose
 * settings decide whether queued mail survives), and every master that
 * answers (for the SCANs of the sweeper's legacy look and of the whole
 * queue's purge). A cluster may run with a master down and its slots
 * uncovered (`cluster-require-full-coverage no`), or with a replica lost:
 * a node that does not serve the queue's slot must not stop the outbox
 * (review, cluster finding 2).
 */

/**
 * How long a node other than the queue's master may take to answer, in ms:
 * longer, and it is skipped as down (its connection may wait for it for ever).
 */
export const NODE_ANSWER_MS = 2_000;

const SLOTS = 16384;

/**
 * The hash slot of a key, as Redis Cluster computes it: CRC16 (XMODEM) of the
 * key, or of its hash tag (what lies between the first `{` and the next `}`,
 * when not empty), modulo 16384.
 * @example
 * keySlot('{eml-api}:eml-api:meta') === keySlot('eml-api'); // true
 */
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

/**
 * A SCAN pattern matching `literal` followed by anything (when it ends with
 * `*`): the glob characters of the prefix and queue name (`*`, `?`, `[`, `]`,
 * `\`, all legal in a prefix) escaped, or a prefix such as `{a[1]}` would
 * match other keys than its own, and not its own.
 * @example
 * escapeGlob('{a[1]}:eml-api:content:*'); // '{a\\[1\\]}:eml-api:content:*'
 */
export function escapeGlob(pattern: string): string {
  const star = pattern.endsWith('*');
  const literal = star ? pattern.slice(0, -1) : pattern;
  return `${literal.replace(/[\\*?[\]]/g, '\\$&')}${star ? '*' : ''}`;
}

/**
 * `host:port` of a node connection of a cluster client, as its slot map names it.
 * @example
 * cluster.nodes('master').map(nodeName); // ['10.0.0.1:7000', '10.0.0.2:7000', '10.0.0.3:7000']
 */
export function nodeName(node: Redis): string {
  return `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`;
}

/**
 * The nodes that serve the slot of `key`, its master first, then its replicas,
 * as the cluster client's slot map has them (read from `CLUSTER SLOTS`, which
 * leaves out replicas flagged failed); every node when the map does not have
 * the slot yet.
 * @example
 * const [master, ...replicas] = slotNodes(cluster, '{eml-api}:eml-api:meta');
 */
export function slotNodes(cluster: Cluster, key: string): Redis[] {
  const names = cluster.slots[keySlot(key)];
  const all = cluster.nodes('all');
  if (!names || names.length === 0) return all;
  return names.map((name) => all.find((node) => nodeName(node) === name)).filter((n): n is Redis => n !== undefined);
}

/**
 * The servers whose keyspace a SCAN must cover to find a queue's keys: the
 * server itself, or every master of a cluster that answers. A master the
 * cluster flags as failed (`fail` in `CLUSTER NODES`), or that does not answer
 * a PING within {@link NODE_ANSWER_MS}, is left out and named to `skipped`:
 * the queue's keys share one slot, served by a master that answers (or
 * nothing of the queue works), so a master down holds none of them.
 * @param skipped called with each master left out, and why
 * @example
 * for (const server of await scannableServers(redis, (node, why) => log.warn({ node }, why))) await server.scan('0');
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

/**
 * The `host:port` of the nodes the cluster flags as failed, as one node that
 * answers sees them; none when no node answers in time (the PING of each
 * master then decides).
 */
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
