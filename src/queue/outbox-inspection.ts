import type { SendKind } from '../protocol/api-paths.js';
import type { Queue } from 'bullmq';
import { PAUSE_MARK } from './rate-limit-pause.js';
import { queueRedisTime } from './redis-clock.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import type { OutboxJobData, OutboxJobError, OutboxSendResult } from './outbox-job.js';

/**
 * The job states {@link readOutboxStatus} counts, as BullMQ names them.
 * @example
 * for (const state of OUTBOX_STATES) console.log(state, status.counts[state]);
 */
export const OUTBOX_STATES = [
  'waiting',
  'prioritized',
  'delayed',
  'active',
  'waiting-children',
  'failed',
  'completed',
] as const;

/**
 * A job state of {@link OUTBOX_STATES}.
 * @example
 * const state: OutboxState = 'failed';
 */
export type OutboxState = (typeof OUTBOX_STATES)[number];

/**
 * A send that failed for good, with its error as the worker recorded it.
 *
 * @example
 * for (const f of status.failed) console.log(f.queueId, f.error.code, f.error.message);
 */
export interface FailedSend {
  /** The job id. */
  queueId: string;
  kind: SendKind | undefined;
  group: string | undefined;
  /** Empty when `encrypted` (the envelope is sealed with the content's key). */
  envelope: MailEnvelope | undefined;
  messageId: string | undefined;
  /** Whether the job's content and envelope are encrypted (the producer's `encryption` option). */
  encrypted: boolean;
  /** Attempts made. */
  attempts: number;
  /** When it failed for good. */
  failedAt: Date | undefined;
  /** The last error (from the job's data; BullMQ's `failedReason` when the job has none). */
  error: Pick<OutboxJobError, 'message'> & Partial<OutboxJobError>;
}

/**
 * Jobs by state, and the newest failed sends.
 *
 * @example
 * const status = await readOutboxStatus(transport.queue);
 * console.log(status.counts.waiting, status.counts.failed);
 */
export interface OutboxStatus {
  counts: Record<OutboxState, number>;
  /** Whether the queue is paused (`queue.pause()`): workers take no jobs. */
  paused: boolean;
  /**
   * How long every worker still waits because the service answered 429
   * (its `Retry-After`, up to the workers' `maxRetryAfter`), in ms; 0 when
   * no such pause holds. Workers take no jobs meanwhile.
   */
  rateLimitedMs: number;
  /** The newest failed sends, up to the limit asked for. */
  failed: FailedSend[];
}

/**
 * Reads how many jobs of the outbox are in each state, and the newest failed
 * sends with their errors (what `eml-api queue status` prints).
 *
 * @param options `limit`: failed sends to list, newest first @default 20
 * @example
 * const { counts, failed } = await readOutboxStatus(transport.queue, { limit: 5 });
 */
export async function readOutboxStatus(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  { limit = 20 }: { limit?: number } = {},
): Promise<OutboxStatus> {
  const [raw, paused, rateLimitedMs] = await Promise.all([
    queue.getJobCounts(...OUTBOX_STATES),
    queue.isPaused(),
    // BullMQ's limiter key counts sends too: only a value from PAUSE_MARK up is a 429's pause.
    queue.getRateLimitTtl(PAUSE_MARK),
  ]);
  const counts = Object.fromEntries(OUTBOX_STATES.map((s) => [s, raw[s] ?? 0])) as Record<OutboxState, number>;
  const jobs = limit > 0 ? await queue.getFailed(0, limit - 1) : [];
  const failed = jobs.filter(Boolean).map((job): FailedSend => {
    const data = (job.data ?? {}) as Partial<OutboxJobData>;
    return {
      queueId: String(job.id),
      kind: data.kind,
      group: data.group,
      envelope: data.envelope,
      messageId: data.messageId,
      encrypted: data.encryption !== undefined,
      attempts: job.attemptsMade,
      failedAt: job.finishedOn ? new Date(job.finishedOn) : undefined,
      error: data.lastError ?? { message: job.failedReason ?? 'unknown error' },
    };
  });
  return { counts, paused, rateLimitedMs: Math.max(0, rateLimitedMs), failed };
}

/**
 * A failed send {@link retryFailedSends} left where it is, and why.
 * @example
 * for (const { queueId, reason } of skipped) console.log(`${queueId}: not put back: ${reason}`);
 */
export interface SkippedSend {
  queueId: string;
  reason: string;
}

/** Why a job whose content was removed is not put back. */
const CONTENT_REMOVED = 'its content was removed when the service refused it; queue a corrected message with sendMail';
/** Why a job put back by someone else while this call ran is left to them. */
const NO_LONGER_FAILED =
  'no longer failed: put back meanwhile by someone else (another eml-api queue retry, a dashboard, a sendMail with its idempotencyKey)';
/** Why a job that may have been delivered is not put back with the others. */
const MAY_HAVE_BEEN_DELIVERED =
  "it may have been delivered and the service's idempotency window has passed: check, then put it back by naming it";

/**
 * Puts failed sends back in the queue with a fresh retry schedule (what
 * `eml-api queue retry` does): the ones named, or every one failed when it
 * is called (each once, even if a running worker fails it again meanwhile).
 * Sends that cannot be sent as they are stay failed, in `skipped`: those
 * whose content was removed because the service refused it. So do, unless
 * named, those that may have been delivered and whose idempotency window has
 * passed (`resendUntil`): a worker would park them again. Named, they are put
 * back for one more send, taken as a person's word that they were not
 * delivered.
 *
 * @param options `ids`: the jobs to put back @default every failed job
 * A job put back by someone else while this runs (another operator, a
 * dashboard, a `sendMail` with its key) is left to them, in `skipped`, and
 * the others are still put back.
 *
 * @returns the job ids put back, those named that were not failed jobs, and those left with the reason
 * @example
 * const { retried, skipped } = await retryFailedSends(transport.queue); // all of them
 */
export async function retryFailedSends(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  { ids }: { ids?: readonly string[] } = {},
): Promise<{ retried: string[]; notFailed: string[]; skipped: SkippedSend[] }> {
  const retried: string[] = [];
  const notFailed: string[] = [];
  const skipped: SkippedSend[] = [];
  let now: number | undefined;
  const retry = async (id: string) => {
    const job = await queue.getJob(id);
    if (!job || !(await job.isFailed())) return false;
    const data = (job.data ?? {}) as Partial<OutboxJobData>;
    if (data.contentRemoved) {
      skipped.push({ queueId: id, reason: CONTENT_REMOVED });
      return true;
    }
    // By Redis's clock, which workers wrote resendUntil with (not this machine's).
    const pastWindow = data.resendUntil !== undefined && data.resendUntil <= (now ??= await queueRedisTime(queue));
    if (pastWindow && !ids) {
      skipped.push({ queueId: id, reason: MAY_HAVE_BEEN_DELIVERED });
      return true;
    }
    // A fresh schedule: its attempts, and its stalls (a job parked after too many starts again from 0);
    // named past its window, the person's word that it was not delivered: the window starts again.
    if (data.stalls || pastWindow) {
      const { possiblyAcceptedAt: _at, resendUntil: _until, ...rest } = data;
      await job.updateData({ ...(pastWindow ? rest : data), stalls: 0, aloneStalls: 0 } as OutboxJobData);
    }
    try {
      await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    } catch (err) {
      // Put back meanwhile by someone else (another operator, a dashboard, a sendMail with its key):
      // nothing to do for it, and the others still to do.
      if (await job.isFailed()) throw err;
      skipped.push({ queueId: id, reason: NO_LONGER_FAILED });
      return true;
    }
    retried.push(id);
    return true;
  };
  if (ids) {
    for (const id of ids) if (!(await retry(id))) notFailed.push(id);
    return { retried, notFailed, skipped };
  }
  // The failed jobs of this moment, read before any is put back: workers run meanwhile, and one
  // that fails a put-back job again within milliseconds would put it back in the failed list,
  // where reading as we go found it again, and again (a request to the service each time).
  const failed = await queue.getRanges(['failed'], 0, -1, true);
  for (const id of new Set(failed)) await retry(id);
  return { retried, notFailed, skipped };
}
