import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import { DeadlineError } from './deadline.js';

/**
 * Which send a failed Redis operation was storing: put on its error, so that
 * the caller can queue it again safely (`sendMail({ idempotencyKey })` stores
 * it once) and look the job up (`queue.getJob(queueId)`).
 * @example
 * const send: StoredSend = { idempotencyKey: 'order-1042', queueId: 'order-1042' };
 */
export interface StoredSend {
  idempotencyKey: string;
  queueId: string;
}

/**
 * An {@link EmlApiError} for a failed Redis operation: `ETIMEDOUT` after a
 * deadline, `ECONNECTION` otherwise. `EmlApiError`s pass through (given
 * `send`, a copy of them carrying it).
 *
 * @param doing what failed, e.g. `Could not store the message in Redis at 127.0.0.1:6379`
 * @param mayHaveBeenStored whether the write may have landed all the same (then `mayHaveBeenAccepted` is set)
 * @param send the send being stored, whose key and job id the error carries @default undefined
 * @example
 * try { await queue.add(name, data); } catch (err) { throw redisFailure(err, 'Could not queue the message', true, send); }
 */
export function redisFailure(err: unknown, doing: string, mayHaveBeenStored: boolean, send?: StoredSend): EmlApiError {
  if (err instanceof EmlApiError) return send === undefined ? err : withStoredSend(err, send);
  const again =
    send === undefined ? 'the same idempotencyKey' : `idempotencyKey ${JSON.stringify(send.idempotencyKey)}`;
  const stored = mayHaveBeenStored
    ? `; the job may have been stored all the same (queueing again with ${again}, err.idempotencyKey, stores it once)`
    : '';
  const details = { cause: err, permanent: false, mayHaveBeenAccepted: mayHaveBeenStored, ...send };
  if (err instanceof DeadlineError) return new EmlApiError('ETIMEDOUT', `${doing}: ${err.message}${stored}`, details);
  const reason = err instanceof Error ? err.message : String(err);
  return new EmlApiError('ECONNECTION', `${doing}: ${reason}${stored}`, details);
}

/**
 * The error with the send's idempotency key and job id on it (itself when it has them).
 * @example
 * throw withStoredSend(err, { idempotencyKey, queueId });
 */
export function withStoredSend(err: EmlApiError, send: StoredSend): EmlApiError {
  if (err.idempotencyKey === send.idempotencyKey && err.queueId === send.queueId) return err;
  return new EmlApiError(err.code, err.message, { ...errorDetails(err), ...send });
}
