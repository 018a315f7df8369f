import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import { eventually } from './async.js';
import { freePort, launch, terminate } from './redis-server.js';

/**
 * A real Redis Cluster on loopback for the outbox tests: six redis-server
 * processes with `cluster-enabled yes` (three masters, each with a replica),
 * on free ports, in temporary folders. Formed by hand (slots, epochs, MEET,
 * REPLICATE) rather than with `redis-cli --cluster create`, whose waits of a
 * second each made it take several: this takes about one.
 * @example
 * const cluster = await startRedisCluster();
 * // ... connection: { cluster: cluster.urls }, prefix: '{eml-api}'
 * await cluster.kill(await cluster.masterOf('{eml-api}'));
 * await cluster.stop();
 */
export interface RedisCluster {
  /** Every node, masters first as they were formed. */
  readonly nodes: readonly RedisClusterNode[];
  /** `redis://127.0.0.1:<port>` of every node. */
  readonly urls: readonly string[];
  /** A cluster client for the test's own checks (closed by stop()). */
  readonly client: Cluster;
  /** The node serving the slot of `key` as master, as the cluster says now. */
  masterOf(key: string): Promise<RedisClusterNode>;
  /** Kills a node with SIGKILL (a crash) and leaves it down. */
  kill(node: RedisClusterNode): Promise<void>;
  /** Stops a node with SIGSTOP: it hangs, its connections open, until {@link resume}. */
  pause(node: RedisClusterNode): void;
  /** Lets a paused node run again (SIGCONT). */
  resume(node: RedisClusterNode): void;
  /** Resolves once every live node says the cluster is ok and every slot has a live master. */
  healthy(timeout?: number): Promise<void>;
  /** Keys matching `pattern` on every live master (SCAN), sorted. */
  keys(pattern: string): Promise<string[]>;
  /** Stops every node and removes the folders. */
  stop(): Promise<void>;
}

/** A node of a {@link RedisCluster}. */
export interface RedisClusterNode {
  readonly port: number;
  readonly url: string;
  readonly dir: string;
  /** Its cluster node id. */
  readonly id: string;
  /** Whether it is alive (not killed). */
  readonly alive: boolean;
  /** Whether it is paused (SIGSTOP). */
  readonly paused: boolean;
}

export interface RedisClusterOptions {
  /**
   * `cluster-node-timeout`, in ms: how long a master may not answer before its replica takes over.
   * Short in tests, long enough that a loaded machine does not fail a busy node over by mistake.
   * @default 2000
   */
  nodeTimeout?: number;
  /** More redis-server arguments for every node. */
  args?: string[];
}

const MASTERS = 3;
const SLOTS = 16384;

export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const nodeTimeout = options.nodeTimeout ?? 2000;
  const ports = await distinctFreePorts(MASTERS * 4);
  type Started = { port: number; busPort: number; dir: string; child: ChildProcess; admin: Redis; id: string };
  const started: Started[] = await Promise.all(
    Array.from({ length: MASTERS * 2 }, async (_, i) => {
      const port = ports[i * 2]!;
      const busPort = ports[i * 2 + 1]!;
      const dir = await mkdtemp(join(tmpdir(), 'eml-api-cluster-'));
      const args = [
        '--port',
        String(port),
        '--cluster-port',
        String(busPort),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--cluster-node-timeout',
        String(nodeTimeout),
        // A replica takes over however long ago it last heard from its master (the test decides when).
        '--cluster-replica-validity-factor',
        '0',
        '--cluster-allow-replica-migration',
        'no',
        // A replica's first sync starts at once (the default waits 5 s for more replicas to join it).
        '--repl-diskless-sync-delay',
        '0',
        ...(options.args ?? []),
      ];
      const child = await launch(args, port);
      const admin = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => null });
      admin.on('error', () => undefined);
      const id = (await admin.call('CLUSTER', 'MYID')) as string;
      return { port, busPort, dir, child, admin, id };
    }),
  );
  const masters = started.slice(0, MASTERS);
  const replicas = started.slice(MASTERS);
  // Distinct epochs up front, as redis-cli does: no collision for the cluster to resolve first.
  await Promise.all(started.map((n, i) => n.admin.call('CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1))));
  await Promise.all(
    masters.map((n, i) => {
      const first = Math.floor((SLOTS / MASTERS) * i);
      const last = i === MASTERS - 1 ? SLOTS - 1 : Math.floor((SLOTS / MASTERS) * (i + 1)) - 1;
      return n.admin.call('CLUSTER', 'ADDSLOTSRANGE', String(first), String(last));
    }),
  );
  // Every node meets every other: no waiting for gossip to spread the news.
  await Promise.all(
    started.flatMap((a, i) =>
      started.slice(i + 1).map((b) => a.admin.call('CLUSTER', 'MEET', '127.0.0.1', String(b.port), String(b.busPort))),
    ),
  );
  await until(async () => {
    const views = await Promise.all(started.map((n) => n.admin.call('CLUSTER', 'NODES') as Promise<string>));
    // By id: a node still in its handshake is listed under a temporary one.
    return views.every((view) => started.every((n) => view.includes(`${n.id} `) && !view.includes('handshake')));
  }, 'every node to know the others');
  await Promise.all(replicas.map((n, i) => n.admin.call('CLUSTER', 'REPLICATE', masters[i]!.id)));
  await until(async () => {
    const states = await Promise.all(started.map((n) => n.admin.call('CLUSTER', 'INFO') as Promise<string>));
    if (!states.every((s) => s.includes('cluster_state:ok'))) return false;
    const links = await Promise.all(replicas.map((n) => n.admin.info('replication')));
    return links.every((info) => info.includes('master_link_status:up'));
  }, 'the cluster to be ok with its replicas in sync');

  const nodes = started.map((n) => ({
    port: n.port,
    url: `redis://127.0.0.1:${n.port}`,
    dir: n.dir,
    id: n.id,
    alive: true,
    paused: false,
    child: n.child,
    admin: n.admin,
  }));
  const client = new Cluster(
    nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
    { redisOptions: { maxRetriesPerRequest: null }, retryDelayOnFailover: 200, maxRedirections: 200 },
  );
  client.on('error', () => undefined);
  await client.ping();
  // Nodes that answer: neither killed nor paused.
  const live = () => nodes.filter((n) => n.alive && !n.paused);
  const serving = (id: string) => live().some((n) => n.id === id);
  const byId = (id: string) => nodes.find((n) => n.id === id)!;

  const cluster: RedisCluster = {
    nodes,
    urls: nodes.map((n) => n.url),
    client,
    async masterOf(key) {
      const slot = Number(await live()[0]!.admin.call('CLUSTER', 'KEYSLOT', key));
      for (const node of live()) {
        try {
          const master = mastersBySlot(await withTimeout(node.admin.call('CLUSTER', 'NODES'), 1000), slot);
          if (master !== undefined && serving(master)) return byId(master);
        } catch {
          // A paused or dying node: ask the next one.
        }
      }
      throw new Error(`no live master serves the slot of ${key}`);
    },
    async kill(node) {
      const n = nodes.find((x) => x.id === node.id)!;
      n.alive = false;
      n.admin.disconnect();
      await terminate(n.child, 'SIGKILL');
    },
    pause(node) {
      const n = nodes.find((x) => x.id === node.id)!;
      n.paused = true;
      n.child.kill('SIGSTOP');
    },
    resume(node) {
      const n = nodes.find((x) => x.id === node.id)!;
      n.paused = false;
      n.child.kill('SIGCONT');
    },
    async healthy(timeout = 30_000) {
      await until(
        async () => {
          for (const node of live()) {
            const info = (await withTimeout(node.admin.call('CLUSTER', 'INFO'), 1000)) as string;
            if (!info.includes('cluster_state:ok')) return false;
            // Every slot's master alive in this node's view: a dead master is not yet known as failed by all.
            const view = await withTimeout(node.admin.call('CLUSTER', 'NODES'), 1000);
            for (const slot of [0, SLOTS / 2, SLOTS - 1]) {
              const master = mastersBySlot(view, slot);
              if (master === undefined || !serving(master)) return false;
            }
            for (const master of mastersServing(view)) if (!serving(master)) return false;
          }
          return true;
        },
        'the cluster to be ok',
        timeout,
      );
    },
    async keys(pattern) {
      const found = new Set<string>();
      for (const master of client.nodes('master')) {
        let cursor = '0';
        do {
          const [next, batch] = await master.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
          cursor = next;
          for (const key of batch) found.add(key);
        } while (cursor !== '0');
      }
      return [...found].sort();
    },
    async stop() {
      client.disconnect();
      for (const n of nodes) {
        n.admin.disconnect();
        if (n.alive) n.child.kill('SIGCONT');
      }
      await Promise.all(nodes.map((n) => terminate(n.child, 'SIGKILL')));
      await Promise.all(nodes.map((n) => rm(n.dir, { recursive: true, force: true })));
    },
  };
  return cluster;
}

/** The id of the master serving `slot` in a CLUSTER NODES answer (a master flagged failed serves nothing). */
function mastersBySlot(view: unknown, slot: number): string | undefined {
  for (const line of String(view).trim().split('\n')) {
    const [id, , flags, , , , , , ...ranges] = line.split(' ');
    if (!flags!.includes('master') || flags!.includes('fail')) continue;
    for (const range of ranges) {
      const [from, to = from] = range.split('-').map(Number);
      if (slot >= from! && slot <= to!) return id;
    }
  }
  return undefined;
}

/** The ids of the masters serving slots in a CLUSTER NODES answer, failed ones included. */
function mastersServing(view: unknown): string[] {
  return String(view)
    .trim()
    .split('\n')
    .map((line) => line.split(' '))
    .filter((fields) => fields[2]!.includes('master') && fields.length > 8)
    .map((fields) => fields[0]!);
}

/** `count` free ports, all different (a port and its neighbour can both be free and still be handed out twice). */
async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/** {@link eventually}, where a node not answering yet (a rejection) means "not yet". */
function until(condition: () => Promise<boolean>, what: string, timeout = 20_000): Promise<void> {
  return eventually(() => condition().catch(() => false), { what: `Redis Cluster: ${what}`, timeout });
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error('timed out')), ms).unref()),
  ]);
}
