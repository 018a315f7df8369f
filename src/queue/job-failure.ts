import { MAY_HAVE_BEEN_ACCEPTED } from '../http/request-error.js';
import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
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

/**
 * What the outbox does with a job after a failed attempt, as what it reports
 * (events, `lastError`, BullMQ's `failedReason`, `eml-api queue status`) says:
 * - `retry`: tried again on the job's schedule
 * - `exhausted`: out of attempts on a passing failure; failed, its content kept to be put back
 * - `refused`: the service refused these very bytes (400, 413, 422): failed, its content removed
 * - `held`: the service refused something a fix elsewhere can cure (a key, a missing group): failed, its content kept
 * - `broken`: the job itself cannot be sent (its content gone, not a job of this outbox): failed
 *
 * @example
 * const outcome: FailureOutcome = { kind: 'exhausted', attempts: 34 };
 */
export type FailureOutcome =
  | { kind: 'retry' }
  | { kind: 'exhausted'; attempts: number }
  | { kind: 'refused' }
  | { kind: 'held' }
  | { kind: 'broken' };

/** Statuses by which the service refuses the request itself: the same bytes can never be sent. */
const REFUSED_REQUEST = new Set([400, 413, 422]);

/**
 * What became of a job after a failed attempt that {@link failureAction} did not pause on.
 * @param attempt the attempt that failed (1 for the first)
 * @param attempts the job's attempts in all
 * @example
 * const outcome = failureOutcome(err, job.attemptsMade + 1, job.opts.attempts ?? 1);
 */
export function failureOutcome(err: unknown, attempt: number, attempts: number): FailureOutcome {
  if (failureAction(err).kind === 'retry') {
    return attempt >= attempts ? { kind: 'exhausted', attempts: attempt } : { kind: 'retry' };
  }
  if (refusesRequest(err)) return { kind: 'refused' };
  return err instanceof EmlApiError && err.responseCode !== undefined ? { kind: 'held' } : { kind: 'broken' };
}

/**
 * Whether a permanent failure is the service refusing these very bytes (400,
 * 413, 422), which no retry and no fix elsewhere can make succeed: the job's
 * content can go. A refused key (401, 403) or a missing group (404) can be
 * fixed, after which the same request succeeds: their content stays.
 * @example
 * if (refusesRequest(err)) await redis.del(job.data.contentKey);
 */
export function refusesRequest(err: unknown): boolean {
  return err instanceof EmlApiError && err.permanent && REFUSED_REQUEST.has(err.responseCode ?? 0);
}

const SENT_AND_RETRIED =
  'the request was sent, so the service may have accepted it; the outbox sends it again with the same Idempotency-Key, which the service answers from the first send';
const SENT = 'the request was sent, so the service may have accepted it';

/**
 * The error of a failed attempt as the outbox reports it: the client's own
 * words about retries ("not retried to avoid sending twice", true of a direct
 * send) replaced by what the outbox does, and that said at the end.
 * `EmlApiError`s stay `EmlApiError`s with the same fields.
 *
 * @example
 * throw explainFailure(err, { kind: 'retry' }); // '...; the outbox sends it again with the same Idempotency-Key...'
 */
export function explainFailure(err: unknown, outcome: FailureOutcome): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  let message = e.message.replace(MAY_HAVE_BEEN_ACCEPTED, outcome.kind === 'retry' ? SENT_AND_RETRIED : SENT);
  if (outcome.kind === 'exhausted') {
    message += `; the outbox gave up after ${outcome.attempts} attempts (its retry schedule): the job failed, its content is kept for eml-api queue retry`;
  } else if (outcome.kind === 'refused') {
    message +=
      '; not retried: the service refused this request, so these bytes can never be sent; its content was removed from Redis (the failed job is kept to be looked at: queue a corrected message with sendMail, under the same idempotencyKey if you like)';
  } else if (outcome.kind === 'held') {
    message +=
      '; not retried until it is put back (eml-api queue retry) once the cause is fixed; its content stays in Redis';
  } else if (outcome.kind === 'broken') {
    message += '; not retried';
  }
  if (message === e.message) return e;
  if (e instanceof EmlApiError) return new EmlApiError(e.code, message, errorDetails(e));
  const plain = new Error(message, { cause: e });
  const code = (e as { code?: unknown }).code;
  if (code !== undefined) Object.assign(plain, { code });
  return plain;
}

/**
 * The failure of an attempt whose worker stopped before it finished (a
 * stall): killed, crashed, out of memory, or cut off from Redis for longer
 * than `lockDuration`. Its send may have reached the service.
 * @param stalls stalls found at once (more than 1 when a worker died before it could count the previous one)
 * @example
 * throw explainFailure(stallFailure(1), { kind: 'retry' });
 */
export function stallFailure(stalls: number): EmlApiError {
  const times = stalls === 1 ? '' : ` (${stalls} times)`;
  return new EmlApiError(
    'ECONNECTION',
    `The worker sending this message stopped before it finished${times}: killed, crashed (out of memory?) or cut off from Redis for longer than lockDuration; ${MAY_HAVE_BEEN_ACCEPTED}`,
    { permanent: false, mayHaveBeenAccepted: true },
  );
}

/**
 * Why a job that stalled more than `maxStalls` times while it ran alone is parked.
 * @param stalls stalls in all
 * @param alone of them, stalls while it ran alone in its worker @default stalls
 * @example
 * throw new UnrecoverableError(parkedAfterStalls(7, 'order-1042', 6).message);
 */
export function parkedAfterStalls(stalls: number, queueId: string, alone = stalls): EmlApiError {
  return new EmlApiError(
    'ECONNECTION',
    `Parked after ${stalls} stalls, ${alone} of them while it was sent alone (nothing else in flight in its worker): each time, the worker sending this message stopped before it finished (killed, crashed, out of memory, or cut off from Redis). A message that crashes workers would crash every one that takes it, so it waits for a person; an attempt may have been delivered. Look at it (eml-api queue status), then put it back with eml-api queue retry ${queueId}`,
    { permanent: true, mayHaveBeenAccepted: true },
  );
}

/**
 * Whether a failed attempt may have been accepted by the service: its outcome
 * is unknown (a timeout or a connection lost after the request was sent, 502,
 * 504), or the service failed after it had the request (a 5xx other than 503,
 * which the contract keeps for "not processed").
 * @example
 * if (mayHaveBeenAccepted(err)) data.possiblyAcceptedAt ??= attemptStartedAt;
 */
export function mayHaveBeenAccepted(err: unknown): boolean {
  if (!(err instanceof EmlApiError)) return false;
  const status = err.responseCode;
  return err.mayHaveBeenAccepted || (status !== undefined && status >= 500 && status !== 503);
}

/**
 * Why a job whose send may have been accepted is not sent again once the
 * service's idempotency window has passed (or is about to).
 * @param possiblyAcceptedAt when the first attempt that may have been accepted started (ms)
 * @example
 * throw new UnrecoverableError(parkedAfterWindow(job.data.possiblyAcceptedAt, 'order-1042').message);
 */
export function parkedAfterWindow(possiblyAcceptedAt: number, queueId: string): EmlApiError {
  return new EmlApiError(
    'ETIMEDOUT',
    `Parked: this message may have been delivered (the outcome of an attempt at ${new Date(possiblyAcceptedAt).toISOString()} is unknown) and the service's idempotency window has passed, or is about to, so sending it again could deliver it twice; check before retrying: if it did not arrive, put it back with eml-api queue retry ${queueId}`,
    { permanent: true, mayHaveBeenAccepted: true },
  );
}

/**
 * The failure of a job whose content is gone from Redis after an attempt
 * whose outcome is unknown (a worker that stopped mid-send, a lost answer):
 * that attempt may have delivered the message, so "nothing to send" would
 * mislead; and nothing is left to send again. A `sendMail` with the same
 * idempotency key replaces the job with its new message, which the service
 * refuses under that key (422 `idempotency_key_reused`) if it had accepted
 * the first, within its idempotency window.
 *
 * @param possiblyAcceptedAt when the first such attempt started (ms since the epoch)
 * @example
 * if (isContentMissing(err) && data.possiblyAcceptedAt !== undefined) err = contentGoneAfterAttempt(data.possiblyAcceptedAt, job.id, err);
 */
export function contentGoneAfterAttempt(possiblyAcceptedAt: number, queueId: string, cause: Error): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The queued content of job ${queueId} is gone from Redis, after an attempt whose outcome is unknown ` +
      `(from ${new Date(possiblyAcceptedAt).toISOString()}: a worker that stopped while sending it, or an answer lost): ` +
      'that attempt may already have delivered the message, and nothing is left to send again. Check whether it ' +
      'arrived; if not, queue it again with the same idempotencyKey (the service refuses a new copy under a key it ' +
      'accepted, within its idempotency window)',
    { permanent: true, mayHaveBeenAccepted: true, cause },
  );
}
