import type { OutboxRedisClient } from './redis-connection.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';

/**
 * What a worker writes on a job of the outbox besides BullMQ's own moves:
 * that the service accepted its send (`sent`, the content then removed), and
 * the record of a failed attempt (its error, stalls, when it may have been
 * accepted), with the content the service refused removed and the priority
 * of retries. Each write checks, in the same script, that the worker still
 * holds the job's lock (BullMQ keeps the token of the worker running a job
 * under `<job key>:lock`): a worker that lost it (a long GC pause, a frozen
 * VM, a partition from Redis: its lock expired, the job stalled and another
 * worker took it) wrote `sent` and deleted the content under the new owner,
 * whose attempt then failed for want of content and erased `sent` with its
 * own record (review F7). Its writes are now dropped: its send went out under
 * the job's idempotency key, and the owner's, the same request, is answered
 * from it. BullMQ's own moves (complete, fail, move back) check the lock too.
 */

/** The check every write starts with: ARGV[1], the worker's lock token ('' for none), still holds KEYS[2]. */
const OWNED = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
`;

/**
 * In one step: the content deleted with its entry in the queue's content
 * index, and the service's answer into the job's data (only while the job
 * exists: a job removed meanwhile is not brought back as a hash of one
 * field). KEYS: job hash, its lock, content key, content index. ARGV: the
 * lock token, the data as JSON. Answers 0 when the worker no longer holds the job.
 *
 * The deletion comes first: on a full Redis (maxmemory reached, `noeviction`)
 * a script's first write is refused when it is one that needs memory (HSET),
 * and allowed when it frees (DEL); once a script has written, Redis lets the
 * rest run (it cannot stop it halfway). The record first was refused: the
 * backlog of a full Redis drained and freed nothing, and producers stayed
 * refused (review F4).
 */
const RECORD_SENT = `${OWNED}
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], KEYS[3])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'data', ARGV[2]) end
return 1
`;

/**
 * In one step: the job's data, and, as asked, its content removed (ARGV[3]
 * '1', first: on a full Redis the freeing lets the rest run, see
 * RECORD_SENT) and its priority set (ARGV[4], '' to leave it). KEYS: job hash, its
 * lock, content key, content index. ARGV: the lock token, the data as JSON,
 * drop, priority. The job is active (its lock is held), so the priority
 * is only read when BullMQ moves it back to a list: BullMQ's changePriority
 * does no more for an active job. Answers 0 when the worker no longer holds
 * the job, -1 when the job is gone.
 */
const RECORD = `${OWNED}
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[4], KEYS[3])
end
redis.call('HSET', KEYS[1], 'data', ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'priority', ARGV[4]) end
return 1
`;

interface RecordCommands {
  emlApiRecordSent(
    job: string,
    lock: string,
    content: string,
    index: string,
    token: string,
    data: string,
  ): Promise<number>;
  emlApiRecord(
    job: string,
    lock: string,
    content: string,
    index: string,
    token: string,
    data: string,
    drop: string,
    priority: string,
  ): Promise<number>;
}

const defined = new WeakSet<OutboxRedisClient>();

function commands(redis: OutboxRedisClient): OutboxRedisClient & RecordCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiRecordSent', { numberOfKeys: 4, lua: RECORD_SENT });
    redis.defineCommand('emlApiRecord', { numberOfKeys: 4, lua: RECORD });
    defined.add(redis);
  }
  return redis as OutboxRedisClient & RecordCommands;
}

/**
 * The keys of a job's records: its hash, `{prefix}:{queue}:{jobId}` (its lock
 * is beside it), and the queue's content index.
 * @example
 * const keys: JobRecordKeys = { job: `bull:eml-api:${job.id}`, contentIndex: outboxKeys(location).contentIndex };
 */
export interface JobRecordKeys {
  job: string;
  contentIndex: string;
}

/**
 * Records that the service accepted a job's send, before BullMQ completes
 * the job: its answer goes into the job's data (`sent`) and its content is
 * deleted (the key and its index entry; content kept in the job leaves its
 * data), in one step, only while this worker holds the job (`token`). A job
 * run again afterwards (a worker that died before completing it, a
 * dashboard's "Retry" on the completed job) finds `sent` and completes with
 * it, posting nothing, instead of failing for want of its content.
 *
 * The worker sends it without waiting for its answer, and BullMQ's
 * completion follows on the same connection: Redis runs them in that order,
 * and the worker spends one round trip on both instead of two (issue 19,
 * item 3). Each still runs whole or not at all.
 *
 * @param token the worker's lock token of the job (undefined: not checked)
 * @returns false when the worker no longer holds the job: nothing was written
 * @example
 * const owned = await recordSent(redis, { job: `bull:eml-api:${job.id}`, contentIndex }, job.data, result, token);
 */
export async function recordSent(
  redis: OutboxRedisClient,
  keys: JobRecordKeys,
  data: OutboxJobData,
  result: OutboxSendResult,
  token: string | undefined,
): Promise<boolean> {
  const { inline: _sent, ...kept } = data;
  const record = JSON.stringify({ ...kept, sent: result });
  const { job, contentIndex } = keys;
  const done = await commands(redis).emlApiRecordSent(
    job,
    `${job}:lock`,
    data.contentKey,
    contentIndex,
    token ?? '',
    record,
  );
  return done === 1;
}

/**
 * Writes a job's data after an attempt (its error, stalls, window), only
 * while this worker holds the job (`token`), in one step with, as asked, the
 * removal of its content under its key (`dropContent`: the service refused
 * it) and a new priority (`priority`: the one of retries).
 *
 * @param token the worker's lock token of the job (undefined: not checked)
 * @returns `recorded`; `not-owner` when the worker no longer holds the job, `gone` when the job is
 *   gone: nothing was written then
 * @example
 * await recordOnJob(redis, keys, token, { ...job.data, lastError }, { priority: RETRY_PRIORITY });
 */
export async function recordOnJob(
  redis: OutboxRedisClient,
  keys: JobRecordKeys,
  token: string | undefined,
  data: OutboxJobData,
  { dropContent = false, priority }: { dropContent?: boolean; priority?: number | undefined } = {},
): Promise<'recorded' | 'not-owner' | 'gone'> {
  const { job, contentIndex } = keys;
  const done = await commands(redis).emlApiRecord(
    job,
    `${job}:lock`,
    data.contentKey,
    contentIndex,
    token ?? '',
    JSON.stringify(data),
    dropContent ? '1' : '',
    priority === undefined ? '' : String(priority),
  );
  return done === 1 ? 'recorded' : done === 0 ? 'not-owner' : 'gone';
}
