import type { Queue } from 'bullmq';
import { OUTBOX_STATES, type OutboxState } from './outbox-inspection.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { queueRedis } from './outbox-queue.js';

/**
 * The live state of the outbox for people and dashboards: counts, how long
 * the head of the queue has waited, what waits for a person, and the recent
 * rate. What `eml-api queue watch` prints, `queue status --json` adds, and
 * the worker's gauges show.
 *
 * @example
 * const { counts, oldestWaitingSeconds, sentLastMinute } = await readOutboxSnapshot(transport.queue);
 */
export interface OutboxSnapshot {
  /** Jobs by state, as {@link readOutboxStatus} counts them. */
  counts: Record<OutboxState, number>;
  /** Whether the queue is paused (`queue.pause()`). */
  paused: boolean;
  /**
   * Seconds since the job next in line was queued: the older of the heads of
   * the `waiting` list (retries due) and the `prioritized` set (new messages);
   * 0 when nothing waits. A number that grows says the workers do not keep up,
   * or none runs.
   */
  oldestWaitingSeconds: number;
  /** Failed jobs parked for a person (`lastError.parked`), among the newest {@link PARKED_SCAN} failed. */
  parked: number;
  /** Jobs sent (completed) within the last minute, by their finishing time. */
  sentLastMinute: number;
  /** Jobs failed for good within the last minute. */
  failedLastMinute: number;
}

/** Failed jobs looked at for `parked`: the newest ones; failed jobs are kept 7 days. */
export const PARKED_SCAN = 10_000;

/**
 * Counts, in Redis, the failed jobs whose data says they are parked: one
 * script, not a read of every job's data over the network (a scrape every few
 * seconds must stay cheap with thousands of failed jobs). The job keys are
 * the failed set's members under the queue's prefix (one hash slot in a Redis
 * Cluster, as BullMQ's own scripts assume).
 */
const COUNT_PARKED = `
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local parked = 0
for _, id in ipairs(ids) do
  local data = redis.call('HGET', ARGV[1] .. id, 'data')
  if data and string.find(data, '"parked":"', 1, true) then parked = parked + 1 end
end
return parked
`;

/**
 * Reads the outbox's live state (see {@link OutboxSnapshot}): a few commands,
 * cheap enough for a scrape every few seconds.
 *
 * @param now the time ages and the last minute are counted from (ms) @default Date.now()
 * @example
 * const snapshot = await readOutboxSnapshot(transport.queue);
 * if (snapshot.oldestWaitingSeconds > 600) alert('the outbox is 10 minutes behind');
 */
export async function readOutboxSnapshot(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  now = Date.now(),
): Promise<OutboxSnapshot> {
  const redis = await queueRedis(queue);
  const jobKey = queue.toKey('');
  const [raw, paused, nextRetry, nextNew, parked, sent, failed] = await Promise.all([
    queue.getJobCounts(...OUTBOX_STATES),
    queue.isPaused(),
    // Workers take the wait list from its right end, and the prioritized set from its lowest score.
    redis.lindex(queue.toKey('wait'), -1),
    redis.zrange(queue.toKey('prioritized'), 0, 0),
    redis.eval(COUNT_PARKED, 1, queue.toKey('failed'), jobKey, PARKED_SCAN) as Promise<number>,
    redis.zcount(queue.toKey('completed'), now - 60_000, '+inf'),
    redis.zcount(queue.toKey('failed'), now - 60_000, '+inf'),
  ]);
  const heads = [nextRetry, nextNew[0]].filter((id): id is string => typeof id === 'string');
  const queuedAt = await Promise.all(heads.map((id) => redis.hget(`${jobKey}${id}`, 'timestamp')));
  const oldest = Math.min(...queuedAt.map((t) => Number(t)).filter((t) => Number.isFinite(t) && t > 0), now);
  return {
    counts: Object.fromEntries(OUTBOX_STATES.map((s) => [s, raw[s] ?? 0])) as Record<OutboxState, number>,
    paused,
    oldestWaitingSeconds: Math.max(0, now - oldest) / 1000,
    parked: Number(parked),
    sentLastMinute: sent,
    failedLastMinute: failed,
  };
}
