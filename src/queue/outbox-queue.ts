import type { Queue } from 'bullmq';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { resolveQueueLocation } from './queue-location.js';
import { loadBullmq } from './queue-peers.js';
import {
  closeOutboxRedis,
  openOutboxRedis,
  type OutboxRedisClient,
  type RedisConnectionInput,
} from './redis-connection.js';
import { withDeadline } from './deadline.js';
import { redisFailure } from './redis-failure.js';
import { watchRefusal } from './redis-refusal.js';

/**
 * The outbox's BullMQ queue opened for administration (counts, failed jobs,
 * retries, BullMQ's whole API), without a producer.
 *
 * @example
 * const admin = await openOutboxQueue({ connection: process.env.REDIS_URL! });
 * console.log(await readOutboxStatus(admin.queue));
 * await admin.close();
 */
export interface OutboxQueue {
  readonly queue: Queue<OutboxJobData, OutboxSendResult>;
  /** Host and port of Redis (never its password), for messages. */
  readonly where: string;
  close(): Promise<void>;
}

/**
 * Opens the outbox's queue and checks that Redis answers.
 *
 * @param options `connection`; `queueName` @default 'eml-api'; `prefix` @default 'bull' (as the producers use them)
 * @param timeout how long Redis may take to answer, in ms @default 10000
 * @throws {EmlApiError} `ECONFIG` for a bad option, or when Redis refuses the connection (a wrong password,
 *   a cluster connection to a Redis that is not one: `command` `AUTH` or `CLUSTER SLOTS`); `ECONNECTION` or
 *   `ETIMEDOUT` when Redis does not answer
 * @example
 * const { queue, close } = await openOutboxQueue({ connection: 'redis://127.0.0.1:6379', queueName: 'mail' });
 */
export async function openOutboxQueue(
  options: { connection: RedisConnectionInput; queueName?: string; prefix?: string },
  timeout = 10_000,
): Promise<OutboxQueue> {
  const location = resolveQueueLocation(options.queueName, options.prefix);
  const { Queue } = loadBullmq();
  const client = openOutboxRedis(options.connection, 'producer', location);
  client.redis.on('error', () => undefined);
  // A refused password leaves the PING waiting (a cluster client retries, saying only "Failed to refresh
  // slots cache."): the refusal, seen in the client's errors, ends the wait with its reason.
  const refusal = watchRefusal(client.redis, client.where);
  try {
    await Promise.race([withDeadline(client.redis.ping(), timeout), refusal.refused]);
  } catch (err) {
    if (client.owned) client.redis.disconnect();
    throw redisFailure(err, `Redis at ${client.where} did not answer`, false);
  } finally {
    refusal.stop();
  }
  const queue = new Queue<OutboxJobData, OutboxSendResult>(location.queueName, {
    connection: client.redis,
    prefix: location.prefix,
  });
  queue.on('error', () => undefined);
  return {
    queue,
    where: client.where,
    close: async () => {
      await queue.close().catch(() => undefined);
      await closeOutboxRedis(client);
    },
  };
}

/**
 * The Redis connection of a BullMQ queue (BullMQ 5's `queue.client`, BullMQ
 * 6's `queue.getBackend().client`), for the outbox's own keys beside BullMQ's.
 * @example
 * const redis = await queueRedis(admin.queue);
 */
export async function queueRedis(queue: object): Promise<OutboxRedisClient> {
  const q = queue as { getBackend?: () => { client: Promise<OutboxRedisClient> }; client?: Promise<OutboxRedisClient> };
  return (await (q.getBackend ? q.getBackend().client : q.client))!;
}
