import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import { statusVerdict } from '../shared/failure.js';
import { MAY_HAVE_BEEN_ACCEPTED, bodyShape, type ServiceResponse } from '../http/request-error.js';
import type { OutboxJobRecord, OutboxJobError } from './outbox-job.js';

/** Pause of the queue after a 429 without `Retry-After`, in ms. */
export const DEFAULT_RATE_LIMIT_PAUSE = 5_000;

/**
 * What a worker does with a failed send: `pause` the whole queue for a 429's `Retry-After` (no
 * attempt used), `fail` at once when the same request cannot succeed, or `retry` on the schedule.
 */
export function failureAction(err: unknown): { kind: 'pause'; ms: number } | { kind: 'fail' } | { kind: 'retry' } {
  if (!(err instanceof EmlApiError)) return { kind: 'retry' };
  if (err.responseCode === 429) return { kind: 'pause', ms: err.retryAfter ?? DEFAULT_RATE_LIMIT_PAUSE };
  // An abort is the worker's own doing (a forced close), never the message's fault.
  if (err.permanent && err.code !== 'EABORT') return { kind: 'fail' };
  return { kind: 'retry' };
}

/**
 * What became of a job after a failed attempt: `retry` on its schedule; `exhausted` (out of attempts on a passing
 * failure, content kept to be put back); `refused` / `key-used` (these bytes can never be sent: 400, 413, 422, or the
 * key spent on another message; content removed); `held` (refused for something fixable elsewhere, a key or a missing
 * group; content kept); `broken` (the job itself cannot be sent).
 */
type FailureOutcome =
  | { kind: 'retry' }
  | { kind: 'exhausted'; attempts: number }
  | { kind: 'refused' }
  | { kind: 'key-used' }
  | { kind: 'held' }
  | { kind: 'broken' };

/** The service's code of a key another accepted message used. */
export const KEY_REUSED = 'idempotency_key_reused';

/**
 * What became of a job after a failed attempt that {@link failureAction} did not pause on.
 * @param attempt the attempt that failed (1 for the first)
 * @param attempts the job's attempts in all
 */
export function failureOutcome(err: unknown, attempt: number, attempts: number): FailureOutcome {
  if (failureAction(err).kind === 'retry') {
    return attempt >= attempts ? { kind: 'exhausted', attempts: attempt } : { kind: 'retry' };
  }
  if (err instanceof EmlApiError && err.responseCode === 422 && err.apiCode === KEY_REUSED) return { kind: 'key-used' };
  // A refused key (401, 403) or a missing group (404) can be fixed, after which the same request succeeds.
  const status = err instanceof EmlApiError ? err.responseCode : undefined;
  if (
    err instanceof EmlApiError &&
    err.permanent &&
    status !== undefined &&
    statusVerdict(status).refuses === 'message'
  ) {
    return { kind: 'refused' };
  }
  return err instanceof EmlApiError && err.responseCode !== undefined ? { kind: 'held' } : { kind: 'broken' };
}

/**
 * Whether a failed attempt may have been accepted: its outcome is unknown, or the service failed
 * after it had the request (a 5xx other than 503, which the contract keeps for "not processed").
 */
export function mayHaveBeenAccepted(err: unknown): boolean {
  if (!(err instanceof EmlApiError)) return false;
  const status = err.responseCode;
  return err.mayHaveBeenAccepted || (status !== undefined && statusVerdict(status).possiblyProcessed);
}

/**
 * The record of a failed attempt kept on the job (errors never carry the API key).
 * @param at when it failed @default new Date()
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

const SENT = 'the request was sent, so the service may have accepted it';
/** A stalled attempt's worker left no word of how far it got. */
const MAYBE_SENT = 'its request may have been sent, so the service may have accepted it';
const RESENT =
  '; the outbox sends it again with the same Idempotency-Key, which the service answers from the first send';

const SAYS: Partial<Record<FailureOutcome['kind'], string>> = {
  refused:
    '; not retried: the service refused this request, so these bytes can never be sent; its content was removed from Redis (the failed job is kept to be looked at: queue a corrected message with sendMail, under the same idempotencyKey if you like)',
  'key-used':
    '; not retried: the service already accepted another message under this idempotency key (it answers that one, delivered, from its first send), and this one, with other bytes, can never be sent under the key; its content was removed from Redis. To send it too, queue it with sendMail under a new idempotencyKey',
  held: '; not retried until it is put back (eml-api queue retry) once the cause is fixed; its content stays in Redis',
  broken: '; not retried',
};

/** The error of a failed attempt with the client's words about retries replaced by what the outbox does. */
export function explainFailure(err: unknown, outcome: FailureOutcome): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const retried = outcome.kind === 'retry' ? RESENT : '';
  let message = e.message.replace(MAY_HAVE_BEEN_ACCEPTED, SENT + retried).replace(MAYBE_SENT, MAYBE_SENT + retried);
  if (outcome.kind === 'exhausted') {
    message += `; the outbox gave up after ${outcome.attempts} attempts (its retry schedule): the job failed, its content is kept for eml-api queue retry`;
  } else {
    message += SAYS[outcome.kind] ?? '';
  }
  if (message === e.message) return e;
  if (e instanceof EmlApiError) return new EmlApiError(e.code, message, errorDetails(e));
  const plain = new Error(message, { cause: e });
  const code = (e as { code?: unknown }).code;
  if (code !== undefined) Object.assign(plain, { code });
  return plain;
}

/**
 * The failure of an attempt whose worker stopped before it finished (a stall): its send may have reached the service.
 * @param stalls stalls found at once (more than 1 when a worker died before it could count the previous one)
 */
export function stallFailure(stalls: number): EmlApiError {
  const times = stalls === 1 ? '' : ` (${stalls} times)`;
  return new EmlApiError(
    'ECONNECTION',
    `The worker sending this message stopped before it finished${times}: killed, crashed (out of memory?) or cut off from Redis for longer than lockDuration; ${MAYBE_SENT}`,
    { permanent: false, mayHaveBeenAccepted: true },
  );
}

/** The failure of a job put back after the service refused it and its content was removed: nothing to post. */
export function putBackWithoutContent(data: OutboxJobRecord): EmlApiError {
  const said = data.lastError?.message ?? 'no reason recorded';
  return new EmlApiError(
    'EMESSAGE',
    `Not sent: this job was put back after the service refused it, and its content was removed then; queue a corrected message with sendMail. The service's refusal: ${said}`,
    {
      permanent: true,
      ...(data.lastError?.responseCode === undefined ? {} : { responseCode: data.lastError.responseCode }),
      ...(data.lastError?.apiCode === undefined ? {} : { apiCode: data.lastError.apiCode }),
    },
  );
}

/**
 * Why a job that stalled more than `maxStalls` times while it ran alone is parked.
 * @param alone of `stalls`, those while it ran alone in its worker @default stalls
 */
export function parkedAfterStalls(stalls: number, queueId: string, alone = stalls): EmlApiError {
  return new EmlApiError(
    'ECONNECTION',
    `Parked after ${stalls} stalls, ${alone} of them while it was sent alone (nothing else in flight in its worker): each time, the worker sending this message stopped before it finished (killed, crashed, out of memory, or cut off from Redis). A message that crashes workers would crash every one that takes it, so it waits for a person; an attempt may have been delivered. Look at it (eml-api queue status), then put it back with eml-api queue retry ${queueId}`,
    { permanent: true, mayHaveBeenAccepted: true },
  );
}

/**
 * Why a job whose send may have been accepted is not sent again once the idempotency window has passed (or is near).
 * @param possiblyAcceptedAt when the first attempt that may have been accepted started (ms)
 */
export function parkedAfterWindow(possiblyAcceptedAt: number, queueId: string): EmlApiError {
  return new EmlApiError(
    'ETIMEDOUT',
    `Parked: this message may have been delivered (the outcome of an attempt at ${new Date(possiblyAcceptedAt).toISOString()} is unknown) and the service's idempotency window has passed, or is about to, so sending it again could deliver it twice; check before retrying: if it did not arrive, put it back with eml-api queue retry ${queueId}`,
    { permanent: true, mayHaveBeenAccepted: true },
  );
}

/** The failure of a job whose content is missing from Redis, which an attempt of unknown outcome may have delivered. */
export function contentMissing(
  job: Pick<OutboxJobRecord, 'contentKey' | 'possiblyAcceptedAt'>,
  queueId: string,
): EmlApiError {
  const missing = new EmlApiError(
    'EMESSAGE',
    `The queued content of this job is missing from Redis (evicted or removed; key ${job.contentKey}): nothing to send. ` +
      'Redis must run with maxmemory-policy noeviction (see "What durability relies on in Redis" in docs/outbox.md)',
    { permanent: true },
  );
  if (job.possiblyAcceptedAt === undefined) return missing;
  return new EmlApiError(
    'EMESSAGE',
    `The queued content of job ${queueId} is gone from Redis, after an attempt whose outcome is unknown ` +
      `(from ${new Date(job.possiblyAcceptedAt).toISOString()}: a worker that stopped while sending it, or an answer lost): ` +
      'that attempt may already have delivered the message, and nothing is left to send again. Check whether it ' +
      'arrived; if not, queue it again with the same idempotencyKey (the service refuses a new copy under a key it ' +
      'accepted, within its idempotency window)',
    { permanent: true, mayHaveBeenAccepted: true, cause: missing },
  );
}

/**
 * A 2xx that is not the service's answer (an HTML page, not JSON, no send id): a web server behind a wrong `baseUrl`.
 * The outbox deletes a message's only copy once it counts it sent, so this one is an unknown outcome.
 */
export function unrecognisedAnswer(command: string, res: ServiceResponse): EmlApiError {
  const what = {
    empty: 'an empty body',
    html: 'an HTML page',
    text: 'a body that is not JSON',
    json: 'JSON without the id of the send',
  }[bodyShape(res)];
  return new EmlApiError(
    'EAPI',
    `${command} answered ${res.response} with ${what}, not the service's answer (JSON with the id of the send): ` +
      'whether the message was taken is unknown, so the outbox does not count it as sent and keeps it; check ' +
      `baseUrl (a web server or single-page app there answers every path); ${MAY_HAVE_BEEN_ACCEPTED}`,
    { responseCode: res.statusCode, response: res.text, command, permanent: false, mayHaveBeenAccepted: true },
  );
}
