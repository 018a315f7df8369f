import type { Queue } from 'bullmq';
import type { OutboxRedisClient } from './redis-connection.js';
import { escapeGlob, scannableServers } from './cluster-nodes.js';
import { outboxKeys } from './content-keys.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { queueRedis } from './outbox-queue.js';
import { OUTBOX_STATES } from './outbox-inspection.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';

/**
 * Removing queued mail for good, now: the jobs and the stored messages. The
 * outbox keeps each message beside its BullMQ job (content keys, the content
 * index), so BullMQ's own removals (`queue.obliterate()`, `remove`, `clean`,
 * `drain`, a dashboard's delete) leave the messages in Redis, in clear
 * unless encrypted: removed by the workers' sweeper an hour later at the
 * soonest (it cannot tell content whose job was removed from content whose
 * job is being added at this moment), and never when no worker runs.
 * {@link purgeOutbox} removes both at once, for a spam run to stop, or
 * personal data to erase.
 */

/**
 * Options of {@link purgeOutbox}.
 * @example
 * const options: PurgeOptions = { ids: ['order-1042'] };
 */
export interface PurgeOptions {
  /**
   * The jobs to remove, with their content. Without it, the whole queue:
   * every job, every stored message, and every key of the outbox.
   * @default undefined (the whole queue)
   */
  ids?: readonly string[];
  /**
   * Also what workers are sending right now: the whole queue is otherwise
   * left as it is while any job is being sent (its worker would record the
   * send on a job that is gone). Named jobs being sent are always left
   * (BullMQ does not remove a locked job).
   * @default false
   */
  force?: boolean;
}

/**
 * What {@link purgeOutbox} removed, and left.
 * @example
 * const { jobs, content, busy } = await purgeOutbox(queue);
 */
export interface PurgeResult {
  /** Jobs removed. */
  jobs: number;
  /** Stored messages removed (with the whole queue, content no job pointed at included). */
  content: number;
  /** Jobs left because a worker is sending them (the whole queue: then nothing was removed). */
  busy: string[];
  /** Named jobs that do not exist. */
  notFound: string[];
  /**
   * Masters of a Redis Cluster that were down (flagged failed, or not
   * answering) and so not scanned for stored messages, with why; absent when
   * none was. The queue's keys share one slot, on a master that answered: a
   * master down holds none of them.
   */
  skippedNodes?: string[];
}

/** Keys deleted per command. */
const BATCH = 500;

/**
 * Removes queued mail now: the jobs named, with their stored message, or the
 * whole queue (BullMQ's `obliterate`, then every stored message and every key
 * of the outbox: its content index, the sweeper's lock and marker, the
 * encryption keys' check values). Stop the producers first: a message
 * queued while the queue is purged may be kept.
 *
 * @returns what was removed and left
 * @example
 * await purgeOutbox(admin.queue); // everything
 * await purgeOutbox(admin.queue, { ids: ['order-1042'] });
 */
export async function purgeOutbox(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  { ids, force = false }: PurgeOptions = {},
): Promise<PurgeResult> {
  const redis = await queueRedis(queue);
  const location = resolveQueueLocation(queue.name, queue.opts.prefix);
  if (ids) return purgeJobs(queue, redis, location, ids);
  if (!force) {
    const active = await queue.getActive();
    if (active.length > 0) return { jobs: 0, content: 0, busy: active.map((job) => String(job.id)), notFound: [] };
  }
  const counts = await queue.getJobCounts(...OUTBOX_STATES);
  await queue.obliterate({ force: true });
  // Every content key: those the index names, then any other (written before the index, or a tombstone).
  let content = 0;
  const index = outboxKeys(location).contentIndex;
  for (;;) {
    const keys = await redis.zrange(index, 0, BATCH - 1);
    if (keys.length === 0) break;
    content += await redis.del(...keys);
    await redis.zrem(index, ...keys);
  }
  const skipped = new Map<string, string>();
  const skip = (node: string, why: string) => skipped.set(node, why);
  content += await deleteMatching(redis, `${location.contentKeyPrefix}*`, skip);
  await deleteMatching(redis, `${location.prefix}:${location.queueName}:outbox:*`, skip);
  const jobs = Object.values(counts).reduce((sum, n) => sum + n, 0);
  if (skipped.size > 0) {
    const skippedNodes = [...skipped].map(([node, why]) => `${node}: ${why}`);
    return { jobs, content, busy: [], notFound: [], skippedNodes };
  }
  return { jobs, content, busy: [], notFound: [] };
}

async function purgeJobs(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  redis: OutboxRedisClient,
  location: QueueLocation,
  ids: readonly string[],
): Promise<PurgeResult> {
  const result: PurgeResult = { jobs: 0, content: 0, busy: [], notFound: [] };
  const index = outboxKeys(location).contentIndex;
  for (const id of ids) {
    const job = await queue.getJob(id);
    if (!job) {
      result.notFound.push(id);
      continue;
    }
    const contentKey = (job.data as Partial<OutboxJobData> | undefined)?.contentKey;
    if ((await queue.remove(id)) !== 1) {
      result.busy.push(id);
      continue;
    }
    result.jobs++;
    // Only a key of this queue's content: a forged job must not make this delete another key.
    if (typeof contentKey === 'string' && contentKey.startsWith(location.contentKeyPrefix)) {
      const [[, deleted]] = (await redis.multi().del(contentKey).zrem(index, contentKey).exec()) as [[unknown, number]];
      result.content += deleted;
    }
  }
  return result;
}

/**
 * Deletes every key matching `pattern` (a SCAN, fine once for an operator's purge); returns how many.
 * A cluster's SCAN sees one node's keys: every master that answers is scanned (the queue's keys, under a
 * hash-tagged prefix, are on one of them, whichever a failover made it; a master down is skipped and
 * named to `skipped`), and the keys are deleted through the cluster client, which sends them to their
 * slot's master.
 */
async function deleteMatching(
  redis: OutboxRedisClient,
  pattern: string,
  skipped: (node: string, why: string) => void,
): Promise<number> {
  let deleted = 0;
  for (const server of await scannableServers(redis, skipped)) {
    let cursor = '0';
    do {
      const [next, keys] = await server.scan(cursor, 'MATCH', escapeGlob(pattern), 'COUNT', BATCH);
      cursor = next;
      if (keys.length > 0) deleted += await redis.del(...keys);
    } while (cursor !== '0');
  }
  return deleted;
}
