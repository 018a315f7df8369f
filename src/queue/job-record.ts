import type { OutboxRedisClient } from './redis-connection.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';

/**
 * What a worker writes on a job of the outbox besides BullMQ's own fields:
 * that the service accepted its send. The other records (a failed attempt's
 * error, a stall, when an attempt may have been accepted) go through BullMQ's
 * `job.updateData`, off the path every sent message takes.
 */

/**
 * In one step: the service's answer into the job's data (only while the job
 * exists: a job removed meanwhile is not brought back as a hash of one
 * field), and the content deleted with its entry in the queue's content
 * index. KEYS: job hash, content key, content index. ARGV: the data as JSON.
 */
const RECORD_SENT = `
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'data', ARGV[1]) end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], KEYS[2])
return 1
`;

const defined = new WeakSet<OutboxRedisClient>();

/**
 * Records that the service accepted a job's send, before BullMQ completes
 * the job: its answer goes into the job's data (`sent`) and its content is
 * deleted (the key and its index entry; content kept in the job leaves its
 * data), in one step. A job run again afterwards (a worker that died before
 * completing it, a dashboard's "Retry" on the completed job) finds `sent`
 * and completes with it, posting nothing, instead of failing for want of its
 * content.
 *
 * The worker sends it without waiting for its answer, and BullMQ's
 * completion follows on the same connection: Redis runs them in that order,
 * and the worker spends one round trip on both instead of two (issue 19,
 * item 3). Each still runs whole or not at all.
 *
 * @param keys the job's hash, `{prefix}:{queue}:{jobId}`, and the queue's content index
 * @example
 * void recordSent(redis, { job: `bull:eml-api:${job.id}`, contentIndex: outboxKeys(location).contentIndex }, job.data, result);
 */
export async function recordSent(
  redis: OutboxRedisClient,
  keys: { job: string; contentIndex: string },
  data: OutboxJobData,
  result: OutboxSendResult,
): Promise<void> {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiRecordSent', { numberOfKeys: 3, lua: RECORD_SENT });
    defined.add(redis);
  }
  const { inline: _sent, ...kept } = data;
  const record = JSON.stringify({ ...kept, sent: result });
  await (redis as OutboxRedisClient & RecordCommands).emlApiRecordSent(
    keys.job,
    data.contentKey,
    keys.contentIndex,
    record,
  );
}

interface RecordCommands {
  emlApiRecordSent(job: string, content: string, index: string, data: string): Promise<number>;
}
