import { randomBytes } from 'node:crypto';
import { type OutboxRedisClient, escapeGlob, scannableServers } from './redis-connection.js';
import { outboxKeys, parseContentKey, type QueueLocation } from './queue-location.js';

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
 *
 * The content of a sent job (its record of the send failed: a Redis error,
 * a worker killed in between) needs no grace: it is freed at every sweep,
 * whatever its age, by a pass that only deletes, which a full Redis
 * (maxmemory reached, `noeviction`) allows, and which runs there even
 * without the sweeper's lock (whose SET a full Redis refuses): each step is
 * safe to run twice. A full Redis then gets its memory back as soon as its
 * backlog is sent (review F4).
 */

/**
 * A content key younger than this (1 hour) is never swept: its job may be being added right now.
 */
export const SWEEP_GRACE_MS = 60 * 60 * 1000;

/**
 * How often the workers of a queue look for content written before the index (24 hours).
 */
export const LEGACY_SCAN_EVERY_MS = 24 * 60 * 60 * 1000;

/** Index entries read, then judged, per round trip: each entry's script holds Redis for a moment only. */
const BATCH = 200;
/** How long the sweeper's lock lasts without being renewed, in ms (renewed after every batch). */
const LOCK_MS = 60_000;

/*
 * Every key a script below touches is one of its KEYS, never a name built in
 * Lua: while the queue's slot moves to another master (a resharding, keys
 * moving in batches), Redis answers a script whose keys are not all on the
 * node it reached with ASK or TRYAGAIN, and ioredis follows or waits. A script
 * that read the job's record by a name built from ARGV ran where the index
 * was and took a record still on the other master for gone: it deleted the
 * content of live jobs (review, cluster finding 1). So the sweeper reads a
 * batch of index entries first, then judges each entry with a script of its
 * own, atomic per entry, sent together (one round trip per batch).
 */

/**
 * Judges one index entry that was due (written, or last found needed, before
 * the cutoff: the grace before the sweep's Redis `TIME`), in the same step as
 * its removal. Content whose job is gone, points elsewhere, or was sent is
 * removed; content of a waiting, delayed, active or failed job stays and is
 * scored again (ARGV[2]) to be looked at after another grace. A key already
 * gone (or a tombstone, which expires by itself) leaves the index. An entry
 * no longer due (another sweeper scored it again meanwhile) is left alone.
 * KEYS: the index, the content key, the job's hash, the queue's completed
 * set (without the last two, a key naming no job: removed). ARGV: the
 * cutoff, the score of an entry kept, the job id. Answers 1 when it removed
 * the content, 0 otherwise.
 */
const JUDGE = `
local score = redis.call('ZSCORE', KEYS[1], KEYS[2])
if not score or tonumber(score) > tonumber(ARGV[1]) then return 0 end
if redis.call('TYPE', KEYS[2]).ok ~= 'string' then
  redis.call('ZREM', KEYS[1], KEYS[2])
  return 0
end
if KEYS[3] then
  local data = redis.call('HGET', KEYS[3], 'data')
  if data then
    local ok, job = pcall(cjson.decode, data)
    if ok and type(job) == 'table' and job['contentKey'] == KEYS[2] and not redis.call('ZSCORE', KEYS[4], ARGV[3]) then
      redis.call('ZADD', KEYS[1], ARGV[2], KEYS[2])
      return 0
    end
  end
end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], KEYS[2])
return 1
`;

/**
 * Frees the content of one index entry, whatever its age, when its job points
 * at it and was sent (completed, or its data holds the record of the send):
 * the key is deleted with its entry. It only deletes, so a full Redis runs
 * it. KEYS: the index, the content key, the job's hash, the queue's completed
 * set. ARGV: the job id. Answers 1 when it removed the content, 0 otherwise.
 */
const FREE_SENT = `
if redis.call('TYPE', KEYS[2]).ok ~= 'string' then return 0 end
local data = redis.call('HGET', KEYS[3], 'data')
if not data then return 0 end
local ok, job = pcall(cjson.decode, data)
if not (ok and type(job) == 'table' and job['contentKey'] == KEYS[2]) then return 0 end
if type(job['sent']) ~= 'table' and not redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], KEYS[2])
return 1
`;

/**
 * Keeps one entry of the queue's parked set only while it stands for the
 * failure that parked the job: the job is failed and its `processedOn` is
 * the entry's score (the run that parked it), or it is being run (its lock
 * held: between the record of its parking and BullMQ's move to failed).
 * Put back by a dashboard, run again, removed: the entry goes. KEYS: the
 * parked set, the job's hash, its lock, the failed set. ARGV: the job id.
 * Answers 1 when it removed the entry.
 */
const CHECK_PARKED = `
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('ZSCORE', KEYS[4], ARGV[1]) and tonumber(redis.call('HGET', KEYS[2], 'processedOn') or '-1') == tonumber(score) then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
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
  emlApiJudgeEntry(...keysAndArgs: (string | number)[]): Promise<number>;
  emlApiFreeSentEntry(index: string, content: string, job: string, completed: string, jobId: string): Promise<number>;
  emlApiRenewLock(lock: string, token: string, ms: number): Promise<number>;
  emlApiReleaseLock(lock: string, token: string): Promise<number>;
  emlApiNow(index: string): Promise<number>;
  emlApiCheckParked(parked: string, job: string, lock: string, failed: string, jobId: string): Promise<number>;
}

const defined = new WeakSet<OutboxRedisClient>();

function commands(redis: OutboxRedisClient): OutboxRedisClient & SweepCommands {
  if (!defined.has(redis)) {
    // Its number of keys is given at each call: 4, or 2 for a key that names no job.
    redis.defineCommand('emlApiJudgeEntry', { lua: JUDGE });
    redis.defineCommand('emlApiFreeSentEntry', { numberOfKeys: 4, lua: FREE_SENT });
    redis.defineCommand('emlApiRenewLock', { numberOfKeys: 1, lua: RENEW });
    redis.defineCommand('emlApiReleaseLock', { numberOfKeys: 1, lua: RELEASE });
    redis.defineCommand('emlApiNow', { numberOfKeys: 1, lua: NOW });
    redis.defineCommand('emlApiCheckParked', { numberOfKeys: 4, lua: CHECK_PARKED });
    defined.add(redis);
  }
  return redis as OutboxRedisClient & SweepCommands;
}

/**
 * Options of {@link sweepStoredContent}.
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
  /**
   * Called with a warning when the look for content written before the index
   * skips a master of a cluster that is down (flagged failed, or not
   * answering): it holds none of the queue's keys.
   * @default none (not told)
   */
  warn?: (message: string) => void;
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
 */
export async function sweepStoredContent(
  redis: OutboxRedisClient,
  location: QueueLocation,
  { graceMs = SWEEP_GRACE_MS, legacyScanEveryMs = LEGACY_SCAN_EVERY_MS, warn = () => undefined }: SweepOptions = {},
): Promise<number> {
  const r = commands(redis);
  const keys = outboxKeys(location);
  const token = randomBytes(8).toString('hex');
  let locked: boolean;
  try {
    locked = (await r.set(keys.sweepLock, token, 'PX', LOCK_MS, 'NX')) === 'OK';
  } catch (err) {
    // A full Redis refuses the lock's SET: free what sent jobs hold, which needs no lock.
    if (!isOutOfMemory(err)) throw err;
    return freeSentContent(r, location);
  }
  if (!locked) return 0;
  try {
    // First what frees memory at once (and runs on a full Redis): the content of sent jobs, at any age.
    let removed = await freeSentContent(r, location);
    // Redis's clock, the one the index was written with: never this machine's.
    const now = await r.emlApiNow(keys.contentIndex);
    // Once a day for the queue, whichever worker sweeps, not once per worker start: the marker holds when
    // the last look was (Redis time), and expires once it no longer matters.
    const last = Number((await r.get(keys.legacyScanned)) ?? Number.NEGATIVE_INFINITY);
    if (!(now - last < legacyScanEveryMs)) {
      await indexLegacyContent(r, location, keys.contentIndex, now, warn);
      await r.set(keys.legacyScanned, String(now), 'PX', Math.max(legacyScanEveryMs, LEGACY_SCAN_EVERY_MS));
    }
    for (;;) {
      const due = await r.zrangebyscore(keys.contentIndex, '-inf', now - graceMs, 'LIMIT', 0, BATCH);
      // Entries found needed are scored just after `now`, so after the cutoff: each is judged once per sweep.
      const judged = await settleAll(due.map((key) => judgeEntry(r, location, key, now - graceMs, now + 1)));
      removed += judged.removed;
      // A full Redis refuses to score again the entries kept: they would come back in every batch.
      if (due.length < BATCH || judged.full) break;
      // Lost the lock (a sweep that ran longer than it lasts): another worker carries on.
      if ((await r.emlApiRenewLock(keys.sweepLock, token, LOCK_MS)) !== 1) break;
    }
    await checkParked(r, location);
    return removed;
  } finally {
    await r.emlApiReleaseLock(keys.sweepLock, token).catch(() => undefined);
  }
}

/**
 * Deletes the content of sent jobs, at any age (FREE_SENT), walking the
 * whole index in batches by rank: the index holds only the content stored
 * beside jobs (over 64 KiB), the backlog of such messages and what failed
 * jobs keep, so a walk every sweep costs little. Entries removed meanwhile
 * (sends recorded) move the ranks; what a batch misses, the next sweep finds.
 * @returns how many were deleted
 */
async function freeSentContent(r: OutboxRedisClient & SweepCommands, location: QueueLocation): Promise<number> {
  const index = outboxKeys(location).contentIndex;
  const completed = completedKey(location);
  let removed = 0;
  for (let start = 0; ;) {
    const entries = await r.zrange(index, start, start + BATCH - 1);
    const freed = await settleAll(
      entries.map(async (key) => {
        const jobId = parseContentKey(location.contentKeyPrefix, key)?.jobId;
        if (jobId === undefined) return 0;
        return r.emlApiFreeSentEntry(index, key, jobKeyBase(location) + jobId, completed, jobId);
      }),
    );
    removed += freed.removed;
    if (entries.length < BATCH) return removed;
    start += entries.length - freed.removed;
  }
}

/**
 * Drops the entries of the queue's parked set whose job is no longer parked
 * by the failure that parked it (CHECK_PARKED), walking the set in batches by
 * rank: what the outbox does not see (a dashboard's retry or removal, failed
 * jobs removed by age) leaves the count of parked jobs at the next sweep.
 */
async function checkParked(r: OutboxRedisClient & SweepCommands, location: QueueLocation): Promise<void> {
  const parked = outboxKeys(location).parked;
  const base = jobKeyBase(location);
  for (let start = 0; ;) {
    const ids = await r.zrange(parked, start, start + BATCH - 1);
    const dropped = await settleAll(
      ids.map((id) => r.emlApiCheckParked(parked, base + id, `${base}${id}:lock`, `${base}failed`, id)),
    );
    if (ids.length < BATCH) return;
    start += ids.length - dropped.removed;
  }
}

/**
 * Judges one due entry of the index (JUDGE), with every key it reads among
 * its KEYS. An entry that is not a content key of this queue (none is, unless
 * written by hand) only leaves the index: on a cluster a key of another slot
 * in a script's KEYS is refused (`CROSSSLOT`), and the sweeper deletes only
 * the queue's own keys.
 * @returns 1 when the content was removed, 0 otherwise
 */
async function judgeEntry(
  r: OutboxRedisClient & SweepCommands,
  location: QueueLocation,
  key: string,
  cutoff: number,
  keptScore: number,
): Promise<number> {
  const index = outboxKeys(location).contentIndex;
  if (!key.startsWith(location.contentKeyPrefix)) {
    await r.zrem(index, key);
    return 0;
  }
  const jobId = parseContentKey(location.contentKeyPrefix, key)?.jobId;
  if (jobId === undefined) return r.emlApiJudgeEntry(2, index, key, cutoff, keptScore, '');
  return r.emlApiJudgeEntry(
    4,
    index,
    key,
    jobKeyBase(location) + jobId,
    completedKey(location),
    cutoff,
    keptScore,
    jobId,
  );
}

/**
 * Waits for every entry's script of a batch (sent together: one round trip)
 * and sums what they removed. A refusal because Redis is full (`OOM`) is
 * told in `full`, not thrown: the removals of the batch went through; any
 * other error is thrown once all have settled.
 */
async function settleAll(runs: Promise<number>[]): Promise<{ removed: number; full: boolean }> {
  let removed = 0;
  let full = false;
  let failure: unknown;
  for (const outcome of await Promise.allSettled(runs)) {
    if (outcome.status === 'fulfilled') removed += outcome.value;
    else if (isOutOfMemory(outcome.reason)) full = true;
    else failure ??= outcome.reason;
  }
  if (failure !== undefined) throw failure;
  return { removed, full };
}

/** Where a queue's job keys start: `{prefix}:{queue}:`. */
function jobKeyBase(location: QueueLocation): string {
  return `${location.prefix}:${location.queueName}:`;
}

/** The queue's completed set (BullMQ's). */
function completedKey(location: QueueLocation): string {
  return `${jobKeyBase(location)}completed`;
}

/** Whether Redis refused a command because it is full (maxmemory reached, `noeviction`). */
function isOutOfMemory(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('OOM ');
}

/**
 * Enters in the index the content keys written before it existed: found with
 * a SCAN matching the queue's content keys only (the prefix's glob characters
 * escaped: a prefix such as `{a[1]}` is legal), entered at the current Redis
 * time (their grace runs from now), leaving the entries already there alone.
 * On a cluster SCAN sees one node's keys only, so every master is scanned:
 * with the hash-tagged prefix a cluster needs, the queue's keys are all in one
 * slot and so on one master, but which one changes with a failover or a
 * resharding, and a scan of the others costs little once a day. A master that
 * is down is skipped (and `warn` told): it serves none of the queue's keys.
 */
async function indexLegacyContent(
  redis: OutboxRedisClient,
  location: QueueLocation,
  index: string,
  now: number,
  warn: (message: string) => void,
): Promise<void> {
  const servers = await scannableServers(redis, (node, why) =>
    warn(`Looking for stored content written before the content index: skipped Redis at ${node}, ${why}`),
  );
  for (const server of servers) {
    let cursor = '0';
    do {
      const [next, found] = await server.scan(
        cursor,
        'MATCH',
        escapeGlob(`${location.contentKeyPrefix}*`),
        'COUNT',
        500,
      );
      cursor = next;
      const content = found.filter((key) => parseContentKey(location.contentKeyPrefix, key) !== undefined);
      // Through the client, which sends it to the index's master on a cluster.
      if (content.length > 0) await redis.zadd(index, 'NX', ...content.flatMap((key) => [now, key]));
    } while (cursor !== '0');
  }
}
