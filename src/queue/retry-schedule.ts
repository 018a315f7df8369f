import type { BackoffOptions } from 'bullmq';
import type { RetryOptions } from '../http/requester.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { objectOption, refuseUnknownKeys, share, wholeNumber } from '../shared/options-kit.js';

/** A retry schedule of the outbox: the client's retry options but `retryAmbiguous` (every failure is retried). */
export type RetryScheduleOptions = Omit<RetryOptions, 'retryAmbiguous'>;

/** The default retry schedule: 30 attempts, about 16 to 20 hours of waits in all. */
export const DEFAULT_RETRY_SCHEDULE: Readonly<Required<RetryScheduleOptions>> = Object.freeze({
  attempts: 30,
  delay: 5_000,
  maxDelay: 3_600_000,
  jitter: 0.2,
});

/** The BullMQ backoff type of the outbox's jobs ({@link outboxBackoffDelay}). */
export const OUTBOX_BACKOFF_TYPE = 'eml-api-outbox';

/** BullMQ's backoff options, plus the cap. */
export interface OutboxBackoffOptions extends BackoffOptions {
  type: typeof OUTBOX_BACKOFF_TYPE;
  delay: number;
  maxDelay: number;
  jitter: number;
}

/**
 * Checks a schedule and completes it with the defaults.
 * @throws {EmlApiError} `ECONFIG` naming the bad field
 */
export function resolveRetrySchedule(options: RetryScheduleOptions | undefined): Required<RetryScheduleOptions> {
  if (options === undefined) return { ...DEFAULT_RETRY_SCHEDULE };
  const o = objectOption(options, 'retry', '{ attempts, delay, maxDelay, jitter }');
  refuseUnknownKeys(o, RETRY_SCHEDULE_KEYS, 'retry.');
  const delay = wholeNumber(o.delay, 'retry.delay', 0, Number.MAX_SAFE_INTEGER, DEFAULT_RETRY_SCHEDULE.delay);
  return {
    attempts: wholeNumber(o.attempts, 'retry.attempts', 1, Number.MAX_SAFE_INTEGER, DEFAULT_RETRY_SCHEDULE.attempts),
    delay,
    maxDelay: wholeNumber(
      o.maxDelay,
      'retry.maxDelay',
      delay,
      Number.MAX_SAFE_INTEGER,
      DEFAULT_RETRY_SCHEDULE.maxDelay,
    ),
    jitter: share(o.jitter, 'retry.jitter', DEFAULT_RETRY_SCHEDULE.jitter),
  };
}

const RETRY_SCHEDULE_KEYS = Object.keys(DEFAULT_RETRY_SCHEDULE) as (keyof RetryScheduleOptions)[];

/** `attempts` and the outbox's backoff. */
export function retryJobOptions({ attempts, delay, maxDelay, jitter }: Required<RetryScheduleOptions>): {
  attempts: number;
  backoff: OutboxBackoffOptions;
} {
  return { attempts, backoff: { type: OUTBOX_BACKOFF_TYPE, delay, maxDelay, jitter } };
}

/**
 * The wait before the next attempt: `delay · 2^(attemptsMade − 1)`, capped at `maxDelay`, shortened
 * by up to `jitter`; at least the service's `Retry-After`, up to `maxRetryAfter`.
 * @param maxRetryAfter the longest `Retry-After` honoured, in ms @default Infinity
 */
export function outboxBackoffDelay(
  attemptsMade: number,
  backoff: Partial<OutboxBackoffOptions> | undefined,
  err: unknown,
  random: () => number = Math.random,
  maxRetryAfter = Infinity,
): number {
  const delay = backoff?.delay ?? DEFAULT_RETRY_SCHEDULE.delay;
  const maxDelay = backoff?.maxDelay ?? DEFAULT_RETRY_SCHEDULE.maxDelay;
  const jitter = backoff?.jitter ?? DEFAULT_RETRY_SCHEDULE.jitter;
  const full = Math.min(maxDelay, delay * 2 ** Math.max(0, attemptsMade - 1));
  const wait = Math.round(full * (1 - jitter * random()));
  const asked = err instanceof EmlApiError ? err.retryAfter : undefined;
  const retryAfter = asked === undefined ? undefined : Math.min(asked, maxRetryAfter);
  return retryAfter !== undefined && retryAfter > wait ? retryAfter : wait;
}

/** From the first failure to the last attempt, without jitter, in ms. */
export function retrySpan(schedule: Required<RetryScheduleOptions>): number {
  let total = 0;
  for (let made = 1; made < schedule.attempts; made++) {
    total += Math.min(schedule.maxDelay, schedule.delay * 2 ** (made - 1));
  }
  return total;
}

/**
 * A retried job's BullMQ priority: 0 puts it in the wait list, taken before the prioritized set of new
 * messages, so a retry goes before the backlog, within the idempotency window.
 */
export const RETRY_PRIORITY = 0;

/** BullMQ's limit (2^21 - 1) less the 1 the outbox adds. */
export const MAX_OUTBOX_PRIORITY = 2 ** 21 - 2;

/**
 * The producer's `jobOptions.priority` plus 1: new messages keep their order and come after retries.
 * @param priority the producer's `jobOptions.priority` (0 or none: the highest)
 */
export function newMessagePriority(priority: number | undefined): number {
  return (priority ?? 0) + 1;
}
