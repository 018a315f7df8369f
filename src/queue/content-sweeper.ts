import { randomBytes } from 'node:crypto';
import { type LuaCommands, type OutboxRedisClient, withCommands } from './redis-connection.js';
import { jobLockKey, outboxKeys, parseContentKey, queueKey, type QueueLocation } from './queue-location.js';
import { DECODE_JOB_DATA } from './outbox-job.js';

/*
 * The sweeper works from the queue's content index, never a SCAN: producers index each key as they
 * write its first chunk, scored with their deadline for adding the job, and each entry is judged by
 * Redis's clock. Judging only deletes, so a full Redis runs it even without the lock. Every key a
 * script touches is one of its KEYS: while the slot moves, a key built in Lua would be read on the
 * wrong node and taken for gone.
 */

const BATCH = 200;
/** Renewed after every batch; in ms. */
const LOCK_MS = 60_000;

/**
 * Judges one index entry in the same step as its removal: content its job points at stays until the job is sent (a
 * failed job can be put back); content no job points at goes once its deadline is not after Redis's time. KEYS: the
 * index, the content key, the job's hash, the completed set. ARGV: the job id. Answers 1 when it removed the content.
 */
const JUDGE = `${DECODE_JOB_DATA}
if redis.call('TYPE', KEYS[2]).ok ~= 'string' then
  redis.call('ZREM', KEYS[1], KEYS[2])
  return 0
end
local data = redis.call('HGET', KEYS[3], 'data')
if data then
  local job = decodeJobData(data)
  if job and job['contentKey'] == KEYS[2] then
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
 * Keeps a parked entry only while the job is failed by the run that parked it, or running (locked
 * between the parking record and BullMQ's move to failed). KEYS: the parked set, the job's hash, its
 * lock, the failed set. ARGV: the job id. Answers 1 when it removed the entry.
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

const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
`;

const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`;

interface SweepCommands {
  emlApiJudgeEntry(index: string, content: string, job: string, completed: string, jobId: string): Promise<number>;
  emlApiRenewLock(lock: string, token: string, ms: number): Promise<number>;
  emlApiReleaseLock(lock: string, token: string): Promise<number>;
  emlApiCheckParked(parked: string, job: string, lock: string, failed: string, jobId: string): Promise<number>;
}

const SWEEP_COMMANDS: LuaCommands = {
  emlApiJudgeEntry: { numberOfKeys: 4, lua: JUDGE },
  emlApiRenewLock: { numberOfKeys: 1, lua: RENEW },
  emlApiReleaseLock: { numberOfKeys: 1, lua: RELEASE },
  emlApiCheckParked: { numberOfKeys: 4, lua: CHECK_PARKED },
};

/**
 * Removes stored content no job needs: a sent job's, and a gone job's once its producer's deadline
 * has passed. Does nothing while another worker sweeps the queue.
 * @returns how many keys were removed (0 when another worker is sweeping)
 */
export async function sweepStoredContent(redis: OutboxRedisClient, location: QueueLocation): Promise<number> {
  const r = withCommands<SweepCommands>(redis, SWEEP_COMMANDS);
  const keys = outboxKeys(location);
  const token = randomBytes(8).toString('hex');
  let locked: boolean;
  try {
    locked = (await r.set(keys.sweepLock, token, 'PX', LOCK_MS, 'NX')) === 'OK';
  } catch (err) {
    // A full Redis refuses the lock's SET; judging only deletes.
    if (!isOutOfMemory(err)) throw err;
    return judgeAll(r, location, async () => true);
  }
  if (!locked) return 0;
  try {
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
 * Judges the index in batches by rank (what removals make a batch miss, the next sweep finds).
 * @param goOn asked after each full batch; the walk stops when it answers false
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

/** Parked entries a dashboard's retry or removal left wrong are dropped, so the count is right after the next sweep. */
async function checkParked(r: OutboxRedisClient & SweepCommands, location: QueueLocation): Promise<void> {
  const parked = outboxKeys(location).parked;
  const failed = queueKey(location, 'failed');
  for (let start = 0; ;) {
    const ids = await r.zrange(parked, start, start + BATCH - 1);
    const dropped = await settleAll(
      ids.map((id) => r.emlApiCheckParked(parked, queueKey(location, id), jobLockKey(location, id), failed, id)),
    );
    if (ids.length < BATCH) return;
    start += ids.length - dropped.removed;
  }
}

/** @returns 1 when the content was removed; an entry that is not this queue's content key only leaves the index */
async function judgeEntry(r: OutboxRedisClient & SweepCommands, location: QueueLocation, key: string): Promise<number> {
  const index = outboxKeys(location).contentIndex;
  const jobId = parseContentKey(location.contentKeyPrefix, key)?.jobId;
  if (jobId === undefined) {
    await r.zrem(index, key);
    return 0;
  }
  return r.emlApiJudgeEntry(index, key, queueKey(location, jobId), queueKey(location, 'completed'), jobId);
}

/** `OOM` refusals are not thrown (the batch's removals went through); any other error is, once all settled. */
async function settleAll(runs: Promise<number>[]): Promise<{ removed: number }> {
  let removed = 0;
  let failure: unknown;
  for (const outcome of await Promise.allSettled(runs)) {
    if (outcome.status === 'fulfilled') removed += outcome.value;
    else if (!isOutOfMemory(outcome.reason)) failure ??= outcome.reason;
  }
  if (failure !== undefined) throw failure;
  return { removed };
}

/** maxmemory reached under `noeviction`. */
function isOutOfMemory(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('OOM ');
}
