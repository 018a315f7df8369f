import type { Queue } from 'bullmq';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import type { OutboxJobData, OutboxJobError, OutboxSendKind, OutboxSendResult } from './outbox-job.js';

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
  kind: OutboxSendKind | undefined;
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
  const [raw, paused] = await Promise.all([queue.getJobCounts(...OUTBOX_STATES), queue.isPaused()]);
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
  return { counts, paused, failed };
}

/**
 * Puts failed sends back in the queue with a fresh retry schedule (what
 * `eml-api queue retry` does): the ones named, or every one failed when it
 * is called (each once, even if a running worker fails it again meanwhile).
 *
 * @param options `ids`: the jobs to put back @default every failed job
 * @returns the job ids put back, and those named that were not failed jobs
 * @example
 * const { retried } = await retryFailedSends(transport.queue); // all of them
 */
export async function retryFailedSends(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  { ids }: { ids?: readonly string[] } = {},
): Promise<{ retried: string[]; notFailed: string[] }> {
  const retried: string[] = [];
  const notFailed: string[] = [];
  const retry = async (id: string) => {
    const job = await queue.getJob(id);
    if (!job || !(await job.isFailed())) return false;
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    retried.push(id);
    return true;
  };
  if (ids) {
    for (const id of ids) if (!(await retry(id))) notFailed.push(id);
    return { retried, notFailed };
  }
  // The failed jobs of this moment, read before any is put back: workers run meanwhile, and one
  // that fails a put-back job again within milliseconds would put it back in the failed list,
  // where reading as we go found it again, and again (a request to the service each time).
  const failed = await queue.getRanges(['failed'], 0, -1, true);
  for (const id of new Set(failed)) await retry(id);
  return { retried, notFailed };
}
