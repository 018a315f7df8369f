import type { RetryOptions } from './requester-options.js';

/**
 * How a failed attempt may be retried:
 * - `safe`: the service surely did not process it (connection refused, reset
 *   before the request was written, DNS failure, 429, 503)
 * - `ambiguous`: it may have been processed (timeout or reset after sending, 502, 504)
 * - `never`: repeating cannot help (other 4xx and 5xx)
 */
export type RetryClass = 'safe' | 'ambiguous' | 'never';

/** Classifies an HTTP status. */
export function classifyStatus(status: number): RetryClass {
  if (status === 429 || status === 503) return 'safe';
  if (status === 502 || status === 504) return 'ambiguous';
  return 'never';
}

/**
 * Delay before retry number `attempt` (0 for the first retry): exponential,
 * shortened by a random share of up to `jitter` (0.5 by default: "equal
 * jitter", half fixed, half random) so that many clients that failed together
 * do not retry together.
 */
export function backoffDelay(
  attempt: number,
  retry: Required<RetryOptions>,
  random: () => number = Math.random,
): number {
  const exponential = Math.min(retry.maxDelay, retry.delay * 2 ** attempt);
  return Math.round(exponential * (1 - retry.jitter * (1 - random())));
}

/**
 * Reads `Retry-After` (seconds, or an HTTP date) as milliseconds from now.
 * @returns undefined when absent or unreadable
 */
export function parseRetryAfter(value: string | undefined, now: number = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
