import { EmlApiError } from '../shared/eml-api-error.js';
import type { OutboxJobError } from './outbox-job.js';

/**
 * Pause of the queue after a 429 without `Retry-After`, in ms (5 s).
 * @example
 * const pause = err.retryAfter ?? DEFAULT_RATE_LIMIT_PAUSE;
 */
export const DEFAULT_RATE_LIMIT_PAUSE = 5_000;

/**
 * What a worker does with a failed send:
 * - `pause`: the service said 429; the whole queue waits `ms` (its `Retry-After`), the job goes back without using an attempt
 * - `fail`: the same request cannot succeed (4xx, `EAUTH`, `EMESSAGE`...): the job fails at once
 * - `retry`: a passing failure (unreachable, timeout, 5xx): the job is tried again on its schedule
 *
 * @example
 * const action: FailureAction = failureAction(err); // { kind: 'pause', ms: 2000 } for a 429 with Retry-After: 2
 */
export type FailureAction = { kind: 'pause'; ms: number } | { kind: 'fail' } | { kind: 'retry' };

/**
 * Decides what a worker does with a failed send.
 * @example
 * if (failureAction(err).kind === 'fail') throw new UnrecoverableError(err.message);
 */
export function failureAction(err: unknown): FailureAction {
  if (!(err instanceof EmlApiError)) return { kind: 'retry' };
  if (err.responseCode === 429) return { kind: 'pause', ms: err.retryAfter ?? DEFAULT_RATE_LIMIT_PAUSE };
  // An abort is the worker's own doing (a forced close), never the message's fault.
  if (err.permanent && err.code !== 'EABORT') return { kind: 'fail' };
  return { kind: 'retry' };
}

/**
 * The record of a failed attempt kept on the job (never the API key: errors never carry it).
 * @param at when it failed @default new Date()
 * @example
 * await job.updateData({ ...job.data, lastError: outboxJobError(err, job.attemptsMade + 1, true) });
 */
export function outboxJobError(err: unknown, attempt: number, permanent: boolean, at = new Date()): OutboxJobError {
  const e = err instanceof Error ? err : new Error(String(err));
  const api = e instanceof EmlApiError ? e : undefined;
  const own = (e as { code?: unknown }).code;
  const code = api?.code ?? (typeof own === 'string' ? own : 'ERROR');
  return {
    code: code as OutboxJobError['code'],
    message: e.message,
    ...(api?.responseCode === undefined ? {} : { responseCode: api.responseCode }),
    ...(api?.apiCode === undefined ? {} : { apiCode: api.apiCode }),
    permanent,
    attempt,
    at: at.toISOString(),
  };
}
