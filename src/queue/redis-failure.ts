import { EmlApiError } from '../shared/eml-api-error.js';
import { DeadlineError } from './deadline.js';

/**
 * An {@link EmlApiError} for a failed Redis operation: `ETIMEDOUT` after a
 * deadline, `ECONNECTION` otherwise. `EmlApiError`s pass through.
 *
 * @param doing what failed, e.g. `Could not store the message in Redis at 127.0.0.1:6379`
 * @param mayHaveBeenStored whether the write may have landed all the same (then `mayHaveBeenAccepted` is set)
 * @example
 * try { await queue.add(name, data); } catch (err) { throw redisFailure(err, 'Could not queue the message', true); }
 */
export function redisFailure(err: unknown, doing: string, mayHaveBeenStored: boolean): EmlApiError {
  if (err instanceof EmlApiError) return err;
  const stored = mayHaveBeenStored
    ? '; the job may have been stored all the same (queueing again with the same idempotencyKey stores it once)'
    : '';
  const details = { cause: err, permanent: false, mayHaveBeenAccepted: mayHaveBeenStored };
  if (err instanceof DeadlineError) return new EmlApiError('ETIMEDOUT', `${doing}: ${err.message}${stored}`, details);
  const reason = err instanceof Error ? err.message : String(err);
  return new EmlApiError('ECONNECTION', `${doing}: ${reason}${stored}`, details);
}
