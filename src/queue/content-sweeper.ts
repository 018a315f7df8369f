import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { isClusterClient, type OutboxRedisClient } from './redis-connection.js';
import { outboxKeys, parseContentKey } from './content-keys.js';
import type { QueueLocation } from './queue-location.js';

/**
 * Stored content no job needs any more is removed by the workers' sweeper.
 * It works from the queue's content index (a sorted set the producer fills
 * as it writes the first chunk, scored at Redis's own time), never from a
 * SCAN of the keyspace, and judges age by Redis's clock (`TIME`), never by
 * the machine it runs on: a worker whose clock runs hours ahead would have
 * removed content being written. One worker sweeps at a time (a lock with an
 * expiry in Redis). Content written before the index existed (by versions
 * before 0.2: the content of their failed jobs, removed by age after 7 days,
 * would otherwise stay for ever) is found by a SCAN for the queue's content
 * keys, once a day for the whole queue (one worker at a time), and entered
 * in the index. That a scan was made is a key in Redis that expires a day
 * later (`{prefix}:{queue}:outbox:legacy-scanned`): kept in each worker's
 * memory, as it was, every worker that started (a crash loop, autoscaling)
 * scanned the whole keyspace again. An expiring key is gone a day after a
 * queue is removed, and `purgeOutbox()` removes it at once.
 */

/**
 * A content key younger than this (1 hour) is never swept: its job may be being added right now.
 * @example
 * await sweepStoredContent(redis, location, { graceMs: SWEEP_GRACE_MS });
 */
export const SWEEP_GRACE_MS = 60 * 60 * 1000;

/**
 * How often the workers of a queue look for content written before the index (24 hours).
 * @example
 * await sweepStoredContent(redis, location, { legacyScanEveryMs: LEGACY_SCAN_EVERY_MS });
 */
export const LEGACY_SCAN_EVERY_MS = 24 * 60 * 60 * 1000;

/** Index entries judged per script run: each run holds Redis for a moment only. */
const BATCH = 200;
/** How long the sweeper's lock lasts without being renewed, in ms (renewed after every batch). */
const LOCK_MS = 60_000;

/**
 * Judges the index entries that are due (written, or last found needed,
 * before the cutoff: the grace before the sweep's Redis `TIME`, ARGV[1]),
 * each in the same step as its removal:
 * content whose job is gone, points elsewhere, or was sent is removed;
 * content of waiting, delayed, active and failed jobs stays and is looked at
 * again after another grace. Keys already gone (or tombstones, which expire
 * by themselves) leave the index.
 */
const SWEEP_BATCH = `
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local removed = 0
for _, key in ipairs(due) do
  if redis.call('TYPE', key).ok ~= 'string' then
    redis.call('ZREM', KEYS[1], key)
  else
    local needed = false
    local jobId = string.match(string.sub(key, string.len(ARGV[5]) + 1), '^(.+):%d+%-%x+$')
    if jobId then
      local data = redis.call('HGET', ARGV[4] .. jobId, 'data')
      if data then
        local ok, job = pcall(cjson.decode, data)
        if ok and type(job) == 'table' and job['contentKey'] == key then
          needed = not redis.call('ZSCORE', ARGV[4] .. 'completed', jobId)
        end
      end
    end
    if needed then
      redis.call('ZADD', KEYS[1], ARGV[3], key)
    else
      redis.call('DEL', key)
      redis.call('ZREM', KEYS[1], key)
      removed = removed + 1
    end
  end
end
return { #due, removed }
`;

/** Renews the lock if this sweeper still holds it. */
const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
`;

/**
 * Redis's clock, read on the server that holds the queue (KEYS[1], the
 * index, is only there to route it): on a cluster, `TIME` alone goes to any
 * node, whose clock may differ from the one that scored the index.
 */
const NOW = `
local now = redis.call('TIME')
return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
`;

/** Releases the lock if this sweeper still holds it. */
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`;

interface SweepCommands {
  emlApiSweepBatch(
    index: string,
    cutoff: number,
    batch: number,
    now: number,
    jobKeyBase: string,
    contentPrefix: string,
  ): Promise<[number, number]>;
  emlApiRenewLock(lock: string, token: string, ms: number): Promise<number>;
  emlApiReleaseLock(lock: string, token: string): Promise<number>;
  emlApiNow(index: string): Promise<number>;
}

const defined = new WeakSet<OutboxRedisClient>();

function commands(redis: OutboxRedisClient): OutboxRedisClient & SweepCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiSweepBatch', { numberOfKeys: 1, lua: SWEEP_BATCH });
    redis.defineCommand('emlApiRenewLock', { numberOfKeys: 1, lua: RENEW });
    redis.defineCommand('emlApiReleaseLock', { numberOfKeys: 1, lua: RELEASE });
    redis.defineCommand('emlApiNow', { numberOfKeys: 1, lua: NOW });
    defined.add(redis);
  }
  return redis as OutboxRedisClient & SweepCommands;
}

/**
 * Options of {@link sweepStoredContent}.
 * @example
 * const options: SweepOptions = { graceMs: 0 }; // a test: every entry is due at once
 */
export interface SweepOptions {
  /**
   * How old (by Redis's clock) content must be before it is judged, in ms.
   * @default SWEEP_GRACE_MS (1 hour)
   */
  graceMs?: number;
  /**
   * How often the queue's workers look for content written before the index
   * existed, with a SCAN of the queue's content keys, in ms.
   * @default LEGACY_SCAN_EVERY_MS (24 hours)
   */
  legacyScanEveryMs?: number;
}

/**
 * Removes stored content no job needs any more: content whose job is gone
 * (removed by age, by hand in a dashboard, or never added because the
 * producer died or gave up between storing and queueing), content of a
 * second enqueue of the same job id, and content of sent jobs (a worker that
 * died between finishing a job and removing its content). Content of
 * waiting, delayed, active and failed jobs stays: a failed job can be retried.
 * Does nothing while another worker sweeps the same queue.
 *
 * @returns how many keys were removed (0 when another worker is sweeping)
 * @example
 * const removed = await sweepStoredContent(redis, resolveQueueLocation('eml-api', 'bull'));
 */
export async function sweepStoredContent(
  redis: OutboxRedisClient,
  location: QueueLocation,
  { graceMs = SWEEP_GRACE_MS, legacyScanEveryMs = LEGACY_SCAN_EVERY_MS }: SweepOptions = {},
): Promise<number> {
  const r = commands(redis);
  const keys = outboxKeys(location);
  const token = randomBytes(8).toString('hex');
  if ((await r.set(keys.sweepLock, token, 'PX', LOCK_MS, 'NX')) !== 'OK') return 0;
  try {
    // Redis's clock, the one the index was written with: never this machine's.
    const now = await r.emlApiNow(keys.contentIndex);
    // Once a day for the queue, whichever worker sweeps, not once per worker start: the marker holds when
    // the last look was (Redis time), and expires once it no longer matters.
    const last = Number((await r.get(keys.legacyScanned)) ?? Number.NEGATIVE_INFINITY);
    if (!(now - last < legacyScanEveryMs)) {
      await indexLegacyContent(r, location, keys.contentIndex, now);
      await r.set(keys.legacyScanned, String(now), 'PX', Math.max(legacyScanEveryMs, LEGACY_SCAN_EVERY_MS));
    }
    const jobKeyBase = `${location.prefix}:${location.queueName}:`;
    let removed = 0;
    for (;;) {
      // Entries found needed are scored just after `now`, so after the cutoff: each is judged once per sweep.
      const [examined, gone] = await r.emlApiSweepBatch(
        keys.contentIndex,
        now - graceMs,
        BATCH,
        now + 1,
        jobKeyBase,
        location.contentKeyPrefix,
      );
      removed += gone;
      if (examined < BATCH) break;
      // Lost the lock (a sweep that ran longer than it lasts): another worker carries on.
      if ((await r.emlApiRenewLock(keys.sweepLock, token, LOCK_MS)) !== 1) break;
    }
    return removed;
  } finally {
    await r.emlApiReleaseLock(keys.sweepLock, token).catch(() => undefined);
  }
}

/**
 * Enters in the index the content keys written before it existed: found with
 * a SCAN matching the queue's content keys only, entered at the current Redis
 * time (their grace runs from now), leaving the entries already there alone.
 * On a cluster SCAN sees one node's keys only, so every master is scanned:
 * with the hash-tagged prefix a cluster needs, the queue's keys are all in one
 * slot and so on one master, but which one changes with a failover or a
 * resharding, and a scan of the others costs little once a day.
 */
async function indexLegacyContent(
  redis: OutboxRedisClient,
  location: QueueLocation,
  index: string,
  now: number,
): Promise<void> {
  const servers: Redis[] = isClusterClient(redis) ? redis.nodes('master') : [redis];
  for (const server of servers) {
    let cursor = '0';
    do {
      const [next, found] = await server.scan(cursor, 'MATCH', `${location.contentKeyPrefix}*`, 'COUNT', 500);
      cursor = next;
      const content = found.filter((key) => parseContentKey(location.contentKeyPrefix, key) !== undefined);
      // Through the cluster client, which sends it to the index's master.
      if (content.length > 0) await redis.zadd(index, 'NX', ...content.flatMap((key) => [now, key]));
    } while (cursor !== '0');
  }
}
