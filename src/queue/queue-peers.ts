import type * as Bullmq from 'bullmq';
import type * as Ioredis from 'ioredis';
import { requirePeer } from '../shared/optional-peer.js';

/** What to install for the outbox, in the error when a peer is missing. */
const INSTALL = 'bullmq ioredis';
const USER = 'The outbox (nodemailer-eml-api/queue)';

/**
 * The BullMQ module, as {@link loadBullmq} returns it.
 * @example
 * const { Queue }: BullmqModule = loadBullmq();
 */
export type BullmqModule = typeof Bullmq;

/**
 * The ioredis client class, as {@link loadRedis} returns it.
 * @example
 * const Redis: RedisConstructor = loadRedis();
 */
export type RedisConstructor = typeof Ioredis.Redis;

/**
 * The ioredis Redis Cluster client class, as {@link loadRedisCluster} returns it.
 * @example
 * const Cluster: ClusterConstructor = loadRedisCluster();
 */
export type ClusterConstructor = typeof Ioredis.Cluster;

/**
 * Versions of the peers the outbox runs on.
 * @example
 * const peers: OutboxPeerVersions = requireQueuePeers(); // { bullmq: '6.7.0', ioredis: '5.11.1' }
 */
export interface OutboxPeerVersions {
  bullmq: string;
  ioredis: string;
}

let bullmq: BullmqModule | undefined;
let redis: RedisConstructor | undefined;
let cluster: ClusterConstructor | undefined;

/**
 * Loads `bullmq`, the queue engine of the outbox, on first use, so that the
 * CLI and the rest of the package run without it.
 *
 * @throws {EmlApiError} `ECONFIG` saying what to install when it is missing
 * @example
 * const { Queue, Worker } = loadBullmq();
 */
export function loadBullmq(): BullmqModule {
  return (bullmq ??= requirePeer<BullmqModule>('bullmq', INSTALL, USER));
}

/**
 * Loads the `ioredis` client on first use. The outbox writes and reads
 * message bytes as binary Redis strings in chunks, which needs a client that
 * answers with Buffers; BullMQ 6 made ioredis an optional peer of its own.
 *
 * @throws {EmlApiError} `ECONFIG` saying what to install when it is missing
 * @example
 * const redis = new (loadRedis())('redis://127.0.0.1:6379');
 */
export function loadRedis(): RedisConstructor {
  if (!redis) {
    const mod = requirePeer<typeof Ioredis & { default?: RedisConstructor }>('ioredis', INSTALL, USER);
    redis = mod.Redis ?? mod.default!;
  }
  return redis;
}

/**
 * Loads ioredis's Redis Cluster client on first use.
 *
 * @throws {EmlApiError} `ECONFIG` saying what to install when ioredis is missing
 * @example
 * const cluster = new (loadRedisCluster())([{ host: '10.0.0.1', port: 7000 }]);
 */
export function loadRedisCluster(): ClusterConstructor {
  if (!cluster) {
    const mod = requirePeer<typeof Ioredis & { default?: { Cluster?: ClusterConstructor } }>('ioredis', INSTALL, USER);
    cluster = mod.Cluster ?? mod.default!.Cluster!;
  }
  return cluster;
}

/**
 * Checks that both peers of the outbox are installed (the
 * `nodemailer-eml-api/queue` entry point and the CLI's queue commands call it
 * first) and tells their versions.
 *
 * @throws {EmlApiError} `ECONFIG` saying what to install
 * @example
 * requireQueuePeers(); // throws 'The outbox ... needs the package "bullmq" ...: run npm install bullmq ioredis'
 */
export function requireQueuePeers(): OutboxPeerVersions {
  loadBullmq();
  loadRedis();
  return { bullmq: versionOf('bullmq'), ioredis: versionOf('ioredis') };
}

function versionOf(name: string): string {
  try {
    return requirePeer<{ version: string }>(`${name}/package.json`, INSTALL, USER).version;
  } catch {
    // A package whose exports hide its package.json: installed all the same.
    return 'unknown';
  }
}
