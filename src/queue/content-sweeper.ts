import type { Redis } from 'ioredis';
import { parseContentKey } from './content-store.js';
import type { QueueLocation } from './queue-location.js';

/**
 * A content key younger than this (1 hour) is never swept: its job may be being added right now.
 * @example
 * await sweepStoredContent(redis, location, { graceMs: SWEEP_GRACE_MS });
 */
export const SWEEP_GRACE_MS = 60 * 60 * 1000;

/**
 * Removes stored content no job needs any more: content whose job is gone
 * (removed by age, by hand in a dashboard, or never added because the
 * producer died between storing and queueing), content of a second enqueue
 * of the same job id, and content of sent jobs (a worker that died between
 * finishing a job and removing its content). Content of waiting, delayed,
 * active and failed jobs stays: a failed job can be retried.
 *
 * @param options `now` @default Date.now(); `graceMs` @default SWEEP_GRACE_MS (1 hour)
 * @returns how many keys were removed
 * @example
 * const removed = await sweepStoredContent(redis, resolveQueueLocation('eml-api', 'bull'));
 */
export async function sweepStoredContent(
  redis: Redis,
  location: QueueLocation,
  { now = Date.now(), graceMs = SWEEP_GRACE_MS }: { now?: number; graceMs?: number } = {},
): Promise<number> {
  const base = `${location.prefix}:${location.queueName}:`;
  let cursor = '0';
  let removed = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${location.contentKeyPrefix}*`, 'COUNT', 500);
    cursor = next;
    const entries = keys.flatMap((key) => {
      const parsed = parseContentKey(location.contentKeyPrefix, key);
      return parsed ? [{ key, ...parsed }] : [];
    });
    if (entries.length === 0) continue;
    const lookups = redis.pipeline();
    for (const { jobId } of entries) {
      lookups.hget(`${base}${jobId}`, 'data');
      lookups.zscore(`${base}completed`, jobId);
    }
    const answers = (await lookups.exec()) ?? [];
    const doomed: string[] = [];
    entries.forEach((entry, i) => {
      const data = answers[2 * i]?.[1] as string | null | undefined;
      const completed = answers[2 * i + 1]?.[1] as string | null | undefined;
      const old = now - entry.createdAt > graceMs;
      if (completed !== null && completed !== undefined) doomed.push(entry.key);
      else if (old && (data === null || data === undefined || contentKeyOf(data) !== entry.key)) doomed.push(entry.key);
    });
    if (doomed.length > 0) removed += await redis.del(...doomed);
  } while (cursor !== '0');
  return removed;
}

function contentKeyOf(data: string): string | undefined {
  try {
    const parsed = JSON.parse(data) as { contentKey?: unknown };
    return typeof parsed.contentKey === 'string' ? parsed.contentKey : undefined;
  } catch {
    return undefined;
  }
}
