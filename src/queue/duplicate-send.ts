import type { Queue } from 'bullmq';
import type { OutboxRedisClient } from './redis-connection.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { AddedState } from './add-job.js';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';

/**
 * What a `sendMail` whose idempotency key already had a job does: the job
 * id is the key, so BullMQ keeps the job it has and ignores the new one; the
 * producer then looks at that job.
 *
 * - waiting, delayed, active or sent: a duplicate; the new content is dropped
 *   and the info describes the job queued first (as before).
 * - failed, and the service cannot hold its key (no attempt of it may have
 *   been accepted): **replaced** by the new message, put back with a fresh
 *   schedule. The caller may have corrected it; and a new body under a key
 *   the service never accepted is a new send to it.
 * - failed, and an attempt may have been accepted (within the window):
 *   **retried**, put back with its own bytes. The service replays the key's
 *   first answer for those, and refuses a new body under it (422
 *   `idempotency_key_reused`; a rebuilt message has a new Date and
 *   Message-ID).
 * - failed and parked for a person (stalls, or past the idempotency window):
 *   not touched; `sendMail` rejects saying why.
 *
 * The change of a failed job is a compare-and-set of its data in one Lua
 * script (still failed, data as read), which also marks the data with the
 * failure it takes over (`putBackFrom`: the job's `finishedOn`); then the job
 * is put back (BullMQ's `job.retry`). Of producers racing, one replaces or
 * puts back the job; the others find its data changed, or, looking between
 * the two steps, the failure taken over already, and answer duplicate.
 */

/**
 * How a `sendMail` was settled against the job its idempotency key names.
 * @example
 * const settled: DuplicateSettlement = { kind: 'duplicate', data };
 */
export type DuplicateSettlement =
  | { kind: 'new' }
  | { kind: 'duplicate'; data: OutboxJobData }
  | { kind: 'retried'; data: OutboxJobData }
  | { kind: 'replaced'; removeContent: string | undefined }
  | { kind: 'lost' }
  | { kind: 'gone' };

/**
 * KEYS: job hash, failed set, the new content's key. ARGV: job id, data as
 * read, new data, the stored length the new content must have ('' when
 * there is none to check: content in the job, or a put-back).
 * Sets the data only while the job is failed and its data is as read, and
 * only over new content that is whole: checked in the same step, since once
 * the job is put back a worker may send it and delete its content at once
 * (a check after it took that for content Redis lost: review F3). Answers -1
 * when the new content is not whole (Redis lost it), 0 when another producer
 * changed the job, 1 when it set the data, and 1 too when the data is already
 * exactly the new data: ioredis sends a command again after reconnecting when
 * its reply was lost, and that second run must not take the first one's
 * change for another producer's (the producer would then remove its own
 * content, which the job points at: review F1). The new data is this
 * producer's alone: it names the content key of this `sendMail`
 * (`contentKey`, or `putBackBy` for a put-back).
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
 * Settles a `sendMail` whose job was just added (or ignored by BullMQ as a
 * duplicate id) with `ours` as its data, from what the id held right after
 * the add (read in the same round trip, see add-job.ts). Returns `gone` when
 * no job has the id any more (removed between the add and the look): add it
 * again; `lost` when a failed job would have been replaced by content that
 * is not whole (Redis lost it as it was written): the job is left as it was.
 * Only a failed job takes more round trips.
 *
 * @param storedLength the stored length `ours` has under its content key (none: content in the job)
 * @param now the producer's clock, for a job's `resendUntil` @default Date.now()
 * @throws {EmlApiError} `EMESSAGE` (permanent, with `idempotencyKey` and `queueId`) when the job was parked for a person
 * @example
 * const settled = await settleDuplicate(queue, redis, jobId, data, (await addJob(queue, redis, job)).state, stored);
 */
export async function settleDuplicate(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  redis: OutboxRedisClient,
  jobId: string,
  ours: OutboxJobData,
  added: AddedState,
  storedLength: number | undefined,
  now = Date.now(),
): Promise<DuplicateSettlement> {
  const jobKey = queue.toKey(jobId);
  const failedKey = queue.toKey('failed');
  const { data: raw, failedAt, finishedOn: finished } = added;
  if (raw === null) return { kind: 'gone' };
  const stored = JSON.parse(raw) as OutboxJobData;
  if (stored.contentKey === ours.contentKey) return { kind: 'new' };
  if (failedAt === null) return { kind: 'duplicate', data: stored };
  const finishedOn = Number(finished);
  if (stored.putBackFrom === finishedOn) {
    // Another producer took this very failure over and is putting the job back (or died doing it): help it.
    const job = await queue.getJob(jobId);
    if (job) await putBack(job);
    return { kind: 'duplicate', data: stored };
  }

  const parked = stored.lastError?.parked ?? (stored.resendUntil !== undefined && stored.resendUntil <= now);
  if (parked) throw parkedJobError(stored, jobId);
  // The service may hold the key with the job's own bytes: those go again, and only those.
  const retry =
    stored.possiblyAcceptedAt !== undefined &&
    !stored.contentRemoved &&
    (stored.inline !== undefined || (await redis.exists(stored.contentKey)) === 1);
  // A replacement keeps the job, BullMQ's stall counter included: it takes the count of the stalls already
  // seen too, or its first run would find stalls it never had (review F13 a).
  const seen = stored.stallsSeen === undefined ? {} : { stallsSeen: stored.stallsSeen };
  // Each producer's change is its own (putBackBy, or its content key): the compare-and-set can tell it.
  const next: OutboxJobData = {
    ...(retry ? { ...stored, stalls: 0, putBackBy: ours.contentKey } : { ...ours, ...seen }),
    putBackFrom: finishedOn,
  };
  const whole = retry || storedLength === undefined ? '' : String(storedLength);
  const set = await redis.eval(
    SET_IF_UNCHANGED,
    3,
    jobKey,
    failedKey,
    ours.contentKey,
    jobId,
    raw,
    JSON.stringify(next),
    whole,
  );
  if (set === -1) return { kind: 'lost' };
  const won = set === 1;
  const job = await queue.getJob(jobId);
  if (!won) {
    // Another producer changed it first. Should it have died before putting the job back, do it for it.
    if (job && (await job.isFailed())) await putBack(job);
    return { kind: 'duplicate', data: (job?.data as OutboxJobData | undefined) ?? stored };
  }
  // Put back after the data is set: a worker never takes it with the data it failed with.
  if (job) await putBack(job);
  if (retry) return { kind: 'retried', data: next };
  // Ours is the job's data now; the info describes it.
  return {
    kind: 'replaced',
    removeContent: stored.contentRemoved || stored.inline !== undefined ? undefined : stored.contentKey,
  };
}

/** Puts a failed job back with a fresh schedule; another producer may have done it a moment before. */
async function putBack(job: { retry(state: 'failed', opts: object): Promise<void> }): Promise<void> {
  try {
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
  } catch {
    // No longer failed: put back by the other producer.
  }
}

function parkedJobError(stored: OutboxJobData, jobId: string): EmlApiError {
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
