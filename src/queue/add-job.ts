import type { JobsOptions, Queue } from 'bullmq';
import type { OutboxJobRecord, OutboxSendResult } from './outbox-job.js';
import type { OutboxRedisClient } from './redis-connection.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { CONTENT_CHUNK } from './content-store.js';
import { RECORD_OVERHEAD } from './content-cipher.js';
import { addCommand, queueClient, runGuardedAdd } from './bullmq-internals.js';
import { QUEUED_AT } from './job-record.js';
import { DECODE_JOB_DATA } from './outbox-job.js';
import { KEY_REUSED } from './failure-policy.js';
import { queueKey, queueLocationOf } from './queue-location.js';

/** What Redis held for the job id right after the add, and of the content. */
export interface AddedState {
  /** `null` when no job has the id (removed meanwhile). */
  data: string | null;
  /** The job's data is what this add wrote (the job is this send's). */
  ours: boolean;
  failedAt: string | null;
  finishedOn: string | null;
  /** -1 when not there, and for inline content (which has none). */
  storedLength: number;
  /** The add was refused because its content was not whole ({@link ADD_GUARD}). */
  refused: boolean;
  /** Tells this very job from a later one of the id; `null` when it has none. */
  queuedAt: string | null;
}

/** What Redis held after the add and the replicas that confirmed; `unconfirmed`: the job may be stored. */
export type AddedJob =
  { kind: 'added'; state: AddedState; replicas?: number } | { kind: 'unconfirmed'; error: unknown };

/**
 * KEYS: job hash, failed set, content key. ARGV: job id, '1' to read the content's length. DATA (the data this add
 * sent) is answered 1, not sent back. A job without {@link QUEUED_AT} gets Redis's time (a full Redis refuses it).
 */
const ADDED = `
local job = redis.call('HMGET', KEYS[1], 'data', 'finishedOn', '${QUEUED_AT}')
local data, finished, at = job[1], job[2], job[3]
if data and not at then
  local now = redis.call('TIME')
  local stamp = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  if redis.pcall('HSETNX', KEYS[1], '${QUEUED_AT}', stamp) == 1 then at = stamp end
end
local failed = redis.call('ZSCORE', KEYS[2], ARGV[1])
local stored = -1
if ARGV[2] == '1' and redis.call('TYPE', KEYS[3]).ok == 'string' then stored = redis.call('STRLEN', KEYS[3]) end
return { (data == DATA and 1) or data or '', failed or '', finished or '', stored, at or '' }
`;

/**
 * A job of the id answers for the add, as BullMQ's does (its id), without BullMQ's writes (its id counter, an event):
 * a full Redis, which refuses any first write, still tells a send of a queued key it is a duplicate.
 */
const ADDED_READ = {
  lua: ADDED,
  keys: 3,
  args: 2,
  before: `if redis.call('EXISTS', KEYS[1]) == 1 then return ARGV[1] end`,
};

const CONTENT_NOT_WHOLE = -1000;

/**
 * Before BullMQ's add: the job is added only while its content is whole, in the same step. An add can run long after
 * its producer gave up (ioredis resends; a paused machine wakes), when the sweeper may have freed the content.
 */
const ADD_GUARD = `
do
  local d = ARGV[2]
  if type(d) == 'string' and string.find(d, '"contentKey":"', 1, true) and not string.find(d, '"inline":"', 1, true) then
    ${DECODE_JOB_DATA}
    local j = decodeJobData(d)
    if j and type(j['contentKey']) == 'string' and type(j['size']) == 'number' and j['inline'] == nil then
      local want = j['size']
      if type(j['encryption']) == 'table' then want = want + math.max(1, math.ceil(want / ${CONTENT_CHUNK})) * ${RECORD_OVERHEAD} end
      if redis.call('TYPE', j['contentKey']).ok ~= 'string' or redis.call('STRLEN', j['contentKey']) ~= want then
        return ${CONTENT_NOT_WHOLE}
      end
    end
  end
end
`;

/**
 * Adds the job (BullMQ ignores an existing id) and reads what the id holds then, in the same step; with `replicas`,
 * also waits for them to confirm every write so far on the connection (one `WAIT` for the adds of a turn).
 */
export async function addJob(
  queue: Queue<OutboxJobRecord, OutboxSendResult>,
  job: {
    name: string;
    data: OutboxJobRecord;
    json?: string;
    /** BullMQ's options, the same object for every job of a producer (see {@link addCommand}). */
    options: JobsOptions;
    jobId: string;
    contentKey: string;
    replicas?: { count: number; timeoutMs: number } | undefined;
  },
): Promise<AddedJob> {
  const client = await queueClient(queue);
  const location = queueLocationOf(queue);
  const { jobId } = job;
  const jobKey = queueKey(location, jobId);
  const failedKey = queueKey(location, 'failed');
  const sent = runGuardedAdd(
    client,
    addCommand(queue, job, job.json),
    ADD_GUARD,
    ADDED_READ,
    [jobKey, failedKey, job.contentKey],
    [jobId, job.data.inline === undefined ? '1' : ''],
  );
  const [addResult, read] = (await sent.answer) as [unknown, [string | 1, string, string, number, string]];
  const refused = addResult === CONTENT_NOT_WHOLE;
  if (typeof addResult === 'number' && addResult < 0 && !refused) {
    throw new Error(`BullMQ refused the job (code ${addResult})`);
  }
  const [data, failedAt, finishedOn, storedLength, queuedAt] = read;
  const state = {
    data: data === 1 ? sent.data : data === '' ? null : data,
    ours: data === 1,
    failedAt: failedAt === '' ? null : failedAt,
    finishedOn: finishedOn === '' ? null : finishedOn,
    storedLength: Number(storedLength),
    refused,
    queuedAt: queuedAt === '' ? null : queuedAt,
  };
  if (!job.replicas) return { kind: 'added', state };
  try {
    const check = { jobKey, jobId, failedKey, queuedAt: state.queuedAt };
    return { kind: 'added', state, replicas: await confirmations(client, job.replicas, check) };
  } catch (error) {
    return { kind: 'unconfirmed', error };
  }
}

const pendingWaits = new WeakMap<object, Map<string, { jobs: ReplicaCheck[]; held: Promise<Map<string, number>> }>>();

/** One `WAIT` per client and setting for the jobs added in one turn of the event loop. */
async function confirmations(
  client: OutboxRedisClient,
  replicas: { count: number; timeoutMs: number },
  job: ReplicaCheck,
): Promise<number> {
  let waits = pendingWaits.get(client);
  if (!waits) pendingWaits.set(client, (waits = new Map()));
  const key = `${replicas.count}/${replicas.timeoutMs}/${job.failedKey}`;
  let wait = waits.get(key);
  if (!wait) {
    const jobs: ReplicaCheck[] = [];
    const open = waits;
    // Sent once every add of the turn has been answered.
    const held = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      if (open.get(key) === wait) open.delete(key);
      return replicasHolding(client, replicas, jobs);
    });
    wait = { jobs, held };
    waits.set(key, wait);
  }
  wait.jobs.push(job);
  const confirmed = (await wait.held).get(job.jobKey);
  if (confirmed === undefined) throw notHeld();
  return confirmed;
}

/** A job still the one read after the add (same {@link QUEUED_AT}), holding `holds` and not failed when given. */
export interface ReplicaCheck {
  jobKey: string;
  jobId: string;
  failedKey: string;
  queuedAt: string | null;
  holds?: string;
}

/**
 * KEYS: the failed set, then each job's hash. ARGV per job: id, {@link QUEUED_AT}, the text its data must hold.
 * Each job found so is written again unchanged: a write of this connection on this node, which the `WAIT` then covers.
 */
const HELD = `
local held = {}
for i = 2, #KEYS do
  local id, at, holds = ARGV[3 * i - 5], ARGV[3 * i - 4], ARGV[3 * i - 3]
  local ok = at ~= '' and redis.call('HGET', KEYS[i], '${QUEUED_AT}') == at
  if ok and holds ~= '' then
    local data = redis.call('HGET', KEYS[i], 'data')
    ok = data ~= false and string.find(data, holds, 1, true) ~= nil and not redis.call('ZSCORE', KEYS[1], id)
  end
  if ok then redis.call('HSET', KEYS[i], '${QUEUED_AT}', at) end
  held[#held + 1] = ok and 1 or 0
end
return held
`;

/**
 * {@link HELD} then `WAIT` in one pipeline: a `WAIT` counts only its own connection's writes on its own node, so a job
 * added on a master that failed over since is not counted on the new one. Jobs not found are left out of the map.
 */
async function replicasHolding(
  redis: OutboxRedisClient,
  replicas: { count: number; timeoutMs: number },
  jobs: readonly ReplicaCheck[],
): Promise<Map<string, number>> {
  const { failedKey } = jobs[0]!;
  const args = jobs.flatMap((job) => [job.jobId, job.queuedAt ?? '', job.holds ?? '']);
  // A NOSCRIPT answer would be resent after the WAIT, which would not cover it.
  const results =
    (await redis
      .pipeline()
      .eval(HELD, jobs.length + 1, failedKey, ...jobs.map((job) => job.jobKey), ...args)
      .wait(replicas.count, replicas.timeoutMs)
      .exec()) ?? [];
  const [heldError, held] = results[0] ?? [new Error('the check of the jobs was not run')];
  if (heldError) throw heldError;
  const [err, confirmed] = results[1] ?? [new Error('WAIT was not run')];
  if (err) throw err;
  const found = new Map<string, number>();
  jobs.forEach((job, i) => {
    if ((held as number[])[i] === 1) found.set(job.jobKey, Number(confirmed));
  });
  return found;
}

/** How many replicas confirmed `job`, asked after its add's round trip. */
export async function waitForReplicas(
  redis: OutboxRedisClient,
  replicas: { count: number; timeoutMs: number },
  job: ReplicaCheck,
): Promise<number> {
  const confirmed = (await replicasHolding(redis, replicas, [job])).get(job.jobKey);
  if (confirmed === undefined) throw notHeld();
  return confirmed;
}

function notHeld(): Error {
  return new Error(
    'the master of its slot does not hold the job as it was added (a failover since: the master that took it may have lost it)',
  );
}

/** A worker already finished with the job's content, so content missing right after the add was not lost by Redis. */
export function finishedByWorker(state: AddedState): boolean {
  if (state.finishedOn !== null && state.failedAt === null) return true;
  if (state.data === null) return false;
  try {
    const data = JSON.parse(state.data) as Partial<OutboxJobRecord>;
    return data.sent !== undefined || data.contentRemoved === true;
  } catch {
    return false;
  }
}

/**
 * How a send was settled against the job its idempotency key names: `new` (the job is this send's), `duplicate` (a job
 * of the key is queued, active or sent), `retried` (the key's failed job may have been accepted: put back with its own
 * bytes), `replaced` (it cannot have been: put back with this send's content), `refused` (parked for a person, or its
 * key spent), `lost` (this content is not whole in Redis), `gone` (no job has the id any more: add it again),
 * `put-back-failed` (Redis did not take the put-back: it may be back or still failed).
 */
export type DuplicateSettlement =
  | { kind: 'new' }
  | { kind: 'duplicate'; data: OutboxJobRecord }
  | { kind: 'retried'; data: OutboxJobRecord }
  | { kind: 'replaced'; removeContent: string | undefined }
  | { kind: 'refused'; error: EmlApiError }
  | { kind: 'lost' }
  | { kind: 'gone' }
  | { kind: 'put-back-failed'; cause: unknown };

/**
 * Sets the data only while the job is failed with its data as read, and only over whole new content (once back, a
 * worker may send it and delete the content at once). Answers -1 for content not whole, 0 when another producer changed
 * the job, 1 when set or already set (a resend after a lost reply must not take its own change for another's).
 */
const SET_IF_UNCHANGED = `
local data = redis.call('HGET', KEYS[1], 'data')
if data == ARGV[3] then return 1 end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
if data ~= ARGV[2] then return 0 end
if ARGV[4] ~= '' then
  if redis.call('TYPE', KEYS[3]).ok ~= 'string' then return -1 end
  if redis.call('STRLEN', KEYS[3]) ~= tonumber(ARGV[4]) then return -1 end
end
redis.call('HSET', KEYS[1], 'data', ARGV[3])
return 1
`;

/**
 * A failed job takes a compare-and-set of its data (`putBackFrom`), then BullMQ's `job.retry`: of racing producers one
 * puts it back, the others answer duplicate.
 * @param storedLength the stored length `ours` has under its content key (none: content in the job)
 */
export async function settleDuplicate(
  queue: Queue<OutboxJobRecord, OutboxSendResult>,
  redis: OutboxRedisClient,
  jobId: string,
  ours: OutboxJobRecord,
  added: AddedState,
  storedLength: number | undefined,
  now = Date.now(),
): Promise<DuplicateSettlement> {
  const { data: raw, failedAt, finishedOn: finished } = added;
  if (added.ours) return { kind: 'new' };
  // Refused for want of this content: no job points at it but one an earlier run of this add made.
  if (added.refused && (raw === null || (JSON.parse(raw) as OutboxJobRecord).contentKey !== ours.contentKey)) {
    return { kind: 'lost' };
  }
  if (raw === null) return { kind: 'gone' };
  const stored = JSON.parse(raw) as OutboxJobRecord;
  if (stored.contentKey === ours.contentKey) return { kind: 'new' };
  if (failedAt === null) return { kind: 'duplicate', data: stored };
  const finishedOn = Number(finished);
  if (stored.putBackFrom === finishedOn) {
    // Another producer took this failure over and is putting it back (or died doing it): help it.
    return afterPutBack(await putBack(queue, jobId), { kind: 'duplicate', data: stored });
  }
  const parked = stored.lastError?.parked ?? (stored.resendUntil !== undefined && stored.resendUntil <= now);
  if (parked) return { kind: 'refused', error: parkedJobError(stored, jobId) };
  // The service accepted another message under the key: any message under it gets 422 again.
  if (stored.lastError?.apiCode === KEY_REUSED) return { kind: 'refused', error: keyUsedError(stored, jobId) };
  // The service may hold the key with the job's own bytes: only those go again.
  const retry =
    stored.possiblyAcceptedAt !== undefined &&
    !stored.contentRemoved &&
    (stored.inline !== undefined || (await redis.exists(stored.contentKey)) === 1);
  // BullMQ keeps its stall counter across a replacement.
  const seen = stored.stallsSeen === undefined ? {} : { stallsSeen: stored.stallsSeen };
  // Each producer's change is its own, so the compare-and-set can tell it.
  const next: OutboxJobRecord = {
    ...(retry ? { ...stored, stalls: 0, putBackBy: ours.contentKey } : { ...ours, ...seen }),
    putBackFrom: finishedOn,
  };
  const whole = retry || storedLength === undefined ? '' : String(storedLength);
  const location = queueLocationOf(queue);
  const set = await redis.eval(
    SET_IF_UNCHANGED,
    3,
    queueKey(location, jobId),
    queueKey(location, 'failed'),
    ours.contentKey,
    jobId,
    raw,
    JSON.stringify(next),
    whole,
  );
  if (set === -1) return { kind: 'lost' };
  if (set !== 1) {
    // Another producer changed it first; should it have died before the put-back, do it for it.
    const job = await queue.getJob(jobId);
    if (!job) return { kind: 'gone' };
    const duplicate = { kind: 'duplicate', data: job.data } as const;
    return (await job.isFailed()) ? afterPutBack(await putBack(queue, jobId), duplicate) : duplicate;
  }
  // After the data is set: a worker never takes it with the data it failed with.
  const removeContent = stored.contentRemoved || stored.inline !== undefined ? undefined : stored.contentKey;
  return afterPutBack(
    await putBack(queue, jobId),
    retry ? { kind: 'retried', data: next } : { kind: 'replaced', removeContent },
  );
}

type PutBack = { kind: 'back' } | { kind: 'gone' } | { kind: 'put-back-failed'; cause: unknown };

function afterPutBack(outcome: PutBack, settled: DuplicateSettlement): DuplicateSettlement {
  return outcome.kind === 'back' ? settled : outcome;
}

/** `back` once out of the failed set (by any producer); `put-back-failed` when Redis did not take it. */
async function putBack(queue: Queue<OutboxJobRecord, OutboxSendResult>, jobId: string): Promise<PutBack> {
  try {
    const job = await queue.getJob(jobId);
    if (!job) return { kind: 'gone' };
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    return { kind: 'back' };
  } catch (cause) {
    // BullMQ refuses a job that is not failed: another producer put it back, unless it is gone.
    try {
      const state = await queue.getJobState(jobId);
      if (state !== 'failed') return { kind: state === 'unknown' ? 'gone' : 'back' };
    } catch {
      // Could not look: as if still failed.
    }
    return { kind: 'put-back-failed', cause };
  }
}

function keyUsedError(stored: OutboxJobRecord, jobId: string): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The message queued under this idempotencyKey (job ${jobId}) failed because the service had already accepted ` +
      'another message under this idempotencyKey (422 idempotency_key_reused), which it delivered: the key is spent. ' +
      'Not queued; to send another message, give it a new idempotencyKey',
    { permanent: true, idempotencyKey: stored.idempotencyKey, queueId: jobId },
  );
}

function parkedJobError(stored: OutboxJobRecord, jobId: string): EmlApiError {
  const why =
    stored.lastError?.parked === 'stalls'
      ? 'it stalled again and again (each time, the worker sending it stopped before it finished: a message that crashes workers?), and an attempt may have been delivered'
      : "it may have been delivered (an attempt's outcome is unknown) and the service's idempotency window has passed, so sending it again could deliver it twice";
  return new EmlApiError(
    'EMESSAGE',
    `The message queued under this idempotencyKey (job ${jobId}) failed and was parked for a person: ${why}. Not queued again; check whether it arrived, then put it back with eml-api queue retry ${jobId}`,
    { permanent: true, idempotencyKey: stored.idempotencyKey, queueId: jobId },
  );
}
