import { EmlApiError } from '../shared/eml-api-error.js';
import type { OutboxRedisClient } from './redis-connection.js';

/**
 * Redis's refusals of the connection itself, which no retry fixes: a wrong
 * password or user (`WRONGPASS`, `NOAUTH`: it wants one and got none), a
 * password given to a Redis that has none, and a cluster client pointed at a
 * Redis that is not a cluster (`ERR This instance has cluster support
 * disabled`). A cluster client hides them: it says only "Failed to refresh
 * slots cache." (or times out), again and again, and keeps the node's answer
 * in the error's `lastNodeError`; a worker waited for ever, saying neither
 * why nor giving up, and the CLI timed out (review, cluster finding 3).
 * Found, they end the start of a worker, a producer's check and the CLI's
 * commands with an `ECONFIG` that says why. Redis's replies name no password,
 * and the message is built from them alone.
 */

/** The refusals, by the start of Redis's reply, with what fixes each and the command it answered. */
const REFUSALS: readonly { match: RegExp; command: string; fix: string }[] = [
  {
    match: /^WRONGPASS\b/,
    command: 'AUTH',
    fix: 'check the password (REDIS_PASSWORD, the URL, or redisOptions.password) and user name',
  },
  { match: /^NOAUTH\b/, command: 'AUTH', fix: 'Redis needs a password: give it (REDIS_PASSWORD, or in the URL)' },
  {
    match: /^ERR AUTH .*called without any password configured/,
    command: 'AUTH',
    fix: 'this Redis has no password: give none, or check that this is the Redis meant',
  },
  {
    match: /^ERR This instance has cluster support disabled/,
    command: 'CLUSTER SLOTS',
    fix: 'this Redis is not a cluster: connect to it as a single server (one URL, without --redis-cluster / connection.cluster)',
  },
];

/** How deep {@link redisRefusal} follows an error's `cause` and `lastNodeError`. */
const DEPTH = 4;

/**
 * The `ECONFIG` (permanent) for an error that is, or wraps (a cluster's
 * `lastNodeError`, a `cause`), a refusal of the connection by Redis (see
 * REFUSALS); undefined for any other error.
 *
 * @param where host and port of Redis (a cluster: its nodes), never a password
 * @param doing what failed, to start the message with @default `Redis at ${where}`
 * @example
 * const refused = redisRefusal(err, 'Redis Cluster 10.0.0.1:7000');
 * if (refused) throw refused;
 */
export function redisRefusal(err: unknown, where: string, doing?: string): EmlApiError | undefined {
  const reply = refusalReply(err, 0);
  if (reply === undefined) return undefined;
  const refusal = REFUSALS.find((r) => r.match.test(reply))!;
  const word = reply.split(' ', 1)[0]!;
  const intro =
    doing === undefined ? `Redis at ${where} refused the connection` : `${doing}: Redis refused the connection`;
  return new EmlApiError('ECONFIG', `${intro} (${firstLine(reply)}): ${refusal.fix}`, {
    permanent: true,
    command: refusal.command,
    response: word,
  });
}

/**
 * The reason a Redis error gives, with a cluster's `lastNodeError` (what the
 * last node it asked answered) after its own message: "Failed to refresh
 * slots cache." alone says nothing of why.
 * @example
 * logger.warn({ error: redisErrorText(err) }, 'Redis error');
 */
export function redisErrorText(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const last = (err as { lastNodeError?: unknown } | null)?.lastNodeError;
  return last instanceof Error && last.message !== message ? `${message} (last node error: ${last.message})` : message;
}

/**
 * Watches a client's (or a BullMQ worker's) `error` events for a refusal of the connection: the
 * promise rejects with its `ECONFIG` the first time one is seen (commands
 * meanwhile wait, or are retried, and would not tell it). `stop()` removes
 * the listener; the promise never rejects unhandled.
 * @example
 * const refusal = watchRefusal(redis, where);
 * try { await Promise.race([redis.ping(), refusal.refused]); } finally { refusal.stop(); }
 */
export function watchRefusal(
  redis: OutboxRedisClient | ErrorEmitter,
  where: string,
): { refused: Promise<never>; stop(): void } {
  let reject!: (err: EmlApiError) => void;
  const refused = new Promise<never>((_, fail) => (reject = fail));
  refused.catch(() => undefined);
  const listener = (err: unknown) => {
    const refusal = redisRefusal(err, where);
    if (refusal) reject(refusal);
  };
  const emitter = redis as ErrorEmitter;
  emitter.on('error', listener);
  return { refused, stop: () => void emitter.off('error', listener) };
}

/** What emits the errors watched: a client, or a BullMQ worker (whose own connections' errors it re-emits). */
interface ErrorEmitter {
  on(event: 'error', listener: (err: Error) => void): unknown;
  off(event: 'error', listener: (err: Error) => void): unknown;
}

function refusalReply(err: unknown, depth: number): string | undefined {
  if (!(err instanceof Error) || depth > DEPTH) return undefined;
  if (REFUSALS.some((r) => r.match.test(err.message))) return err.message;
  const o = err as { lastNodeError?: unknown; cause?: unknown };
  return refusalReply(o.lastNodeError, depth + 1) ?? refusalReply(o.cause, depth + 1);
}

function firstLine(text: string): string {
  return text.split(/\r?\n/, 1)[0]!.slice(0, 200);
}
