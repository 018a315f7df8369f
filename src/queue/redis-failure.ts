import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import { DeadlineError } from './deadline.js';
import { redisErrorText, redisRefusal } from './redis-refusal.js';

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
  // A wrong password, a cluster client on a plain Redis: no retry fixes it, and the caller must be told why.
  const refusal = redisRefusal(err, '', doing);
  if (refusal) return send === undefined ? refusal : withStoredSend(refusal, send);
  const again =
    send === undefined ? 'the same idempotencyKey' : `idempotencyKey ${JSON.stringify(send.idempotencyKey)}`;
  const stored = mayHaveBeenStored
    ? `; the job may have been stored all the same (queueing again with ${again}, err.idempotencyKey, stores it once)`
    : '';
  const details = { cause: withoutArguments(err), permanent: false, mayHaveBeenAccepted: mayHaveBeenStored, ...send };
  if (err instanceof DeadlineError) return new EmlApiError('ETIMEDOUT', `${doing}: ${err.message}${stored}`, details);
  // A cluster's "Failed to refresh slots cache." says why only in its lastNodeError.
  const reason = redisErrorText(err);
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

/**
 * Redis's refusals of a command that it never ran: the command's slot is
 * served elsewhere or not at all (`MOVED`, `ASK`, `CROSSSLOT`, `TRYAGAIN`,
 * `CLUSTERDOWN`), the script is unknown (`NOSCRIPT`), the user may not
 * (`NOPERM`, `NOAUTH`, `WRONGPASS`), or Redis takes no write now (`OOM`,
 * `READONLY`, `MISCONF`, `NOREPLICAS`, `MASTERDOWN`, `LOADING`, `BUSY`). A
 * script is refused these at its first write at the latest, before it has
 * written anything, and Redis then writes nothing of it.
 */
const REFUSALS = new Set([
  'MOVED',
  'ASK',
  'CROSSSLOT',
  'TRYAGAIN',
  'CLUSTERDOWN',
  'NOSCRIPT',
  'NOPERM',
  'NOAUTH',
  'WRONGPASS',
  'OOM',
  'READONLY',
  'MISCONF',
  'NOREPLICAS',
  'MASTERDOWN',
  'LOADING',
  'BUSY',
]);

/** The refusals a cluster client answers by trying again elsewhere: the last one seen says nothing of the tries before. */
const REROUTED = new Set(['MOVED', 'ASK', 'TRYAGAIN', 'CLUSTERDOWN']);

/**
 * How sure it is that a failed command never ran: `refused`, Redis answered
 * it with a refusal (see REFUSALS); `rerouted`, a cluster client gave up
 * after trying it on node after node (`Too many Cluster redirections`, or a
 * pipeline's last `MOVED`): every try it heard of was refused, but a try cut
 * off by a failover may have run on the master that failed, so whether it
 * landed is to be looked up; `unknown` otherwise (a timeout, a lost
 * connection: it may have run).
 *
 * @param cluster whether the client is a cluster's (which re-routes, and so tries again)
 * @example
 * if (commandFate(err, false) === 'refused') await store.discard(contentKey);
 */
export function commandFate(err: unknown, cluster: boolean): 'refused' | 'rerouted' | 'unknown' {
  if (!(err instanceof Error)) return 'unknown';
  if (err.message.startsWith('Too many Cluster redirections')) return 'rerouted';
  if (err.name !== 'ReplyError') return 'unknown';
  const word = err.message.split(' ', 1)[0]!;
  if (!REFUSALS.has(word)) return 'unknown';
  return cluster && REROUTED.has(word) ? 'rerouted' : 'refused';
}

/** How deep {@link withoutArguments} follows an error's causes. */
const CAUSE_DEPTH = 8;

/**
 * The error with the arguments of every Redis command it names removed,
 * its command's name kept: ioredis puts the command on its errors
 * (`ReplyError.command = { name, args }`), and the outbox's commands carry
 * message content (a chunk of the message, a job's data), which an app
 * logging the error (pino and winston serialise causes, `util.inspect` shows
 * them) would otherwise write into its logs. Follows `cause`,
 * `lastNodeError` (a cluster's) and `errors` (an `AggregateError`'s). The
 * error is changed in place: the outbox made the command, and nothing reads
 * its arguments once it failed.
 * @example
 * throw new EmlApiError('ECONNECTION', err.message, { cause: withoutArguments(err) });
 */
export function withoutArguments<T>(err: T): T {
  const seen = new Set<object>();
  const scrub = (value: unknown, depth: number): void => {
    if (typeof value !== 'object' || value === null || seen.has(value) || depth > CAUSE_DEPTH) return;
    seen.add(value);
    const o = value as { command?: unknown; cause?: unknown; lastNodeError?: unknown; errors?: unknown };
    const command = o.command as { name?: unknown; args?: unknown } | undefined;
    if (typeof command === 'object' && command !== null && 'args' in command) {
      try {
        o.command = { name: command.name };
      } catch {
        // A frozen error keeps its command; none of the outbox's is.
      }
    }
    scrub(o.cause, depth + 1);
    scrub(o.lastNodeError, depth + 1);
    if (Array.isArray(o.errors)) for (const e of o.errors) scrub(e, depth + 1);
  };
  scrub(err, 0);
  return err;
}
