import { randomBytes } from 'node:crypto';
import { type OutboxRedisClient, escapeGlob, scannableServers } from './redis-connection.js';
import { outboxKeys, parseContentKey, type QueueLocation } from './queue-location.js';

/**
 * Stored content no job needs any more is removed by the workers' sweeper.
 * It works from the queue's content index (a sorted set the producer fills
 * as it writes the first chunk), never from a SCAN of the keyspace. Each
 * entry is scored with its producer's deadline (Redis's time at the first
 * write plus the producer's `timeouts.store`): until then the producer may
 * still add the job that points at the content; from then on it has given
 * up and said so, and its job's add is refused without the content (see
 * add-job.ts). So every sweep judges every entry, by Redis's clock (`TIME`,
 * never the worker's): content a job still needs stays, the content of a
 * sent job goes at once, and content whose job is gone (removed by BullMQ's
 * `remove`, `clean`, `drain`, `obliterate`, by age, or never added) goes once
 * its deadline has passed. Every step of a judgement only deletes, so a full
 * Redis (maxmemory reached, `noeviction`) runs it, even without the sweeper's
 * lock (whose SET it refuses): a full Redis gets its memory back as soon as
 * its backlog is sent. One worker sweeps at a time otherwise (a lock with an
 * expiry in Redis).
 *
 * Content that is in no index entry (written before the index existed, or
 * its entry removed by hand) is found by a SCAN for the queue's content keys,
 * once a day for the whole queue (one worker at a time), and entered in the
 * index as due. That a scan was made is a key in Redis that expires a day
 * later (`{prefix}:{queue}:outbox:legacy-scanned`), so that a crash loop of
 * workers does not scan the keyspace at every start; `purgeOutbox()`
 * removes it at once.
 */

/**
 * How often the workers of a queue look for content that is in no index entry (24 hours).
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
 * content of live jobs. So the sweeper reads a batch of index entries first,
 * then judges each entry with a script of its own, atomic per entry, sent
 * together (one round trip per batch).
 */

/**
 * Judges one index entry, in the same step as its removal. Content the job
 * it names points at stays while that job is not sent (waiting, delayed,
 * active, failed: a failed job can be put back) and goes once it was sent
 * (completed, or its data holds the record of the send). Content no job
 * points at (its job gone, or pointing at other content) goes once its
 * producer's deadline, the entry's score, is not after Redis's time now. A key
 * already gone (or a tombstone, which expires by itself) leaves the index.
 * KEYS: the index, the content key, the job's hash, the queue's completed
 * set. ARGV: the job id. Answers
 * 1 when it removed the content, 0 otherwise. It only deletes: a full Redis
 * runs it.
 */
const JUDGE = `
if redis.call('TYPE', KEYS[2]).ok ~= 'string' then
  redis.call('ZREM', KEYS[1], KEYS[2])
  return 0
end
local data = redis.call('HGET', KEYS[3], 'data')
if data then
  local ok, job = pcall(cjson.decode, data)
  if ok and type(job) == 'table' and job['contentKey'] == KEYS[2] then
    if type(job['sent']) ~= 'table' and not redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 0 end
    redis.call('DEL', KEYS[2])
    redis.call('ZREM', KEYS[1], KEYS[2])
    return 1
  end
end
local deadline = redis.call('ZSCORE', KEYS[1], KEYS[2])
if not deadline then return 0 end
local now = redis.call('TIME')
if tonumber(deadline) > tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) then return 0 end
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
  emlApiJudgeEntry(index: string, content: string, job: string, completed: string, jobId: string): Promise<number>;
  emlApiRenewLock(lock: string, token: string, ms: number): Promise<number>;
  emlApiReleaseLock(lock: string, token: string): Promise<number>;
  emlApiNow(index: string): Promise<number>;
  emlApiCheckParked(parked: string, job: string, lock: string, failed: string, jobId: string): Promise<number>;
}

const defined = new WeakSet<OutboxRedisClient>();

function commands(redis: OutboxRedisClient): OutboxRedisClient & SweepCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiJudgeEntry', { numberOfKeys: 4, lua: JUDGE });
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
   * How often the queue's workers look for content that is in no index
   * entry, with a SCAN of the queue's content keys, in ms.
   * @default LEGACY_SCAN_EVERY_MS (24 hours)
   */
  legacyScanEveryMs?: number;
  /**
   * Called with a warning when the look for content in no index entry skips
   * a master of a cluster that is down (flagged failed, or not answering):
   * it holds none of the queue's keys.
   * @default none (not told)
   */
  warn?: (message: string) => void;
}

/**
 * Removes stored content no job needs any more: content whose job is gone
 * (removed by BullMQ or a dashboard, by age, or never added because its
 * producer gave up) once its producer's deadline has passed, content of a
 * second enqueue of the same job id, and content of sent jobs (a worker that
 * died between sending a job and removing its content). Content of waiting,
 * delayed, active and failed jobs stays: a failed job can be put back. Does
 * nothing while another worker sweeps the same queue.
 *
 * @returns how many keys were removed (0 when another worker is sweeping)
 */
export async function sweepStoredContent(
  redis: OutboxRedisClient,
  location: QueueLocation,
  { legacyScanEveryMs = LEGACY_SCAN_EVERY_MS, warn = () => undefined }: SweepOptions = {},
): Promise<number> {
  const r = commands(redis);
  const keys = outboxKeys(location);
  const token = randomBytes(8).toString('hex');
  let locked: boolean;
  try {
    locked = (await r.set(keys.sweepLock, token, 'PX', LOCK_MS, 'NX')) === 'OK';
  } catch (err) {
    // A full Redis refuses the lock's SET: judging only deletes, which needs no lock.
    if (!isOutOfMemory(err)) throw err;
    return judgeAll(r, location, async () => true);
  }
  if (!locked) return 0;
  try {
    // Once a day for the queue, whichever worker sweeps, not once per worker start: the marker holds when
    // the last look was (Redis time), and expires once it no longer matters.
    const now = await r.emlApiNow(keys.contentIndex);
    const last = Number((await r.get(keys.legacyScanned)) ?? Number.NEGATIVE_INFINITY);
    if (!(now - last < legacyScanEveryMs)) {
      await indexLegacyContent(r, location, keys.contentIndex, now, warn);
      await r.set(keys.legacyScanned, String(now), 'PX', Math.max(legacyScanEveryMs, LEGACY_SCAN_EVERY_MS));
    }
    // Lost the lock (a sweep that ran longer than it lasts): another worker carries on.
    const removed = await judgeAll(
      r,
      location,
      async () => (await r.emlApiRenewLock(keys.sweepLock, token, LOCK_MS)) === 1,
    );
    await checkParked(r, location);
    return removed;
  } finally {
    await r.emlApiReleaseLock(keys.sweepLock, token).catch(() => undefined);
  }
}

/**
 * Judges every entry of the index (JUDGE), walking it in batches by rank:
 * the index holds only the content stored beside jobs (over 64 KiB), the
 * backlog of such messages and what failed jobs keep. Entries removed
 * meanwhile move the ranks; what a batch misses, the next sweep finds.
 * @param goOn asked after each full batch; the walk stops when it answers false
 * @returns how many keys were removed
 */
async function judgeAll(
  r: OutboxRedisClient & SweepCommands,
  location: QueueLocation,
  goOn: () => Promise<boolean>,
): Promise<number> {
  const index = outboxKeys(location).contentIndex;
  let removed = 0;
  for (let start = 0; ;) {
    const entries = await r.zrange(index, start, start + BATCH - 1);
    const judged = await settleAll(entries.map((key) => judgeEntry(r, location, key)));
    removed += judged.removed;
    if (entries.length < BATCH || !(await goOn())) return removed;
    start += entries.length - judged.removed;
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
 * Judges one entry of the index (JUDGE), with every key it reads among its
 * KEYS. An entry that is not a content key of this queue (none is, unless
 * written by hand, or another queue's whose prefix nests in this one's) only
 * leaves the index: the sweeper deletes only the queue's own content.
 * @returns 1 when the content was removed, 0 otherwise
 */
async function judgeEntry(r: OutboxRedisClient & SweepCommands, location: QueueLocation, key: string): Promise<number> {
  const index = outboxKeys(location).contentIndex;
  const jobId = parseContentKey(location.contentKeyPrefix, key)?.jobId;
  if (jobId === undefined) {
    await r.zrem(index, key);
    return 0;
  }
  return r.emlApiJudgeEntry(index, key, jobKeyBase(location) + jobId, completedKey(location), jobId);
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
 * Enters in the index the content keys that are in no entry: found with a
 * SCAN matching the queue's content keys only (the prefix's glob characters
 * escaped: a prefix such as `{a[1]}` is legal), entered as due at the current
 * Redis time (no producer writing now lacks an entry: its first write made
 * one), leaving the entries already there alone.
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
