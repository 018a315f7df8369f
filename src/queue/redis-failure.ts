import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import { DeadlineError, type OutboxRedisClient } from './redis-connection.js';

/** A client of the outbox and where it points (host and port, never a password), for errors. */
export interface RedisEndpoint {
  readonly redis: OutboxRedisClient;
  readonly where: string;
}

/** The send a failed Redis operation was storing, put on its error so that the caller can queue it again safely. */
export interface StoredSend {
  idempotencyKey: string;
  queueId: string;
}

/**
 * An {@link EmlApiError} for a failed Redis operation: `ETIMEDOUT` after a deadline, `ECONNECTION` otherwise; a refused
 * connection is `ECONFIG`. `EmlApiError`s pass through, given `send`'s fields.
 * @param mayHaveBeenStored whether the write may have landed all the same (then `mayHaveBeenAccepted` is set)
 */
export function redisFailure(
  err: unknown,
  doing: string,
  mayHaveBeenStored: boolean,
  send?: StoredSend,
  endpoint?: RedisEndpoint,
): EmlApiError {
  if (err instanceof EmlApiError) return send === undefined ? err : withStoredSend(err, send);
  const refusal =
    redisRefusal(err, '', doing) ?? redisRefusal(endpoint && lastConnectionError(endpoint.redis), '', doing);
  if (refusal) return send === undefined ? refusal : withStoredSend(refusal, send);
  const again =
    send === undefined ? 'the same idempotencyKey' : `idempotencyKey ${JSON.stringify(send.idempotencyKey)}`;
  const stored = mayHaveBeenStored
    ? `; the job may have been stored all the same (queueing again with ${again}, err.idempotencyKey, stores it once)`
    : '';
  const lost = endpoint ? lastConnectionError(endpoint.redis) : undefined;
  const details = {
    cause: withoutArguments(connectionLost(err) && lost ? lost : err),
    permanent: false,
    mayHaveBeenAccepted: mayHaveBeenStored,
    ...send,
  };
  if (err instanceof DeadlineError || isCommandTimeout(err)) {
    const why = lost && endpoint ? `; ${unreachable(endpoint.where, lost)}` : '';
    const after = err instanceof DeadlineError ? err.message : 'no answer within the time allowed';
    return new EmlApiError('ETIMEDOUT', `${doing}: ${after}${why}${stored}`, details);
  }
  // ioredis's own words ("Reached the max retries per request limit ...") name its internals, not the cause.
  if (endpoint && connectionLost(err)) {
    return new EmlApiError('ECONNECTION', `${doing}: ${unreachable(endpoint.where, lost ?? err)}${stored}`, details);
  }
  const reason = redisErrorText(err);
  return new EmlApiError('ECONNECTION', `${doing}: ${reason}${stored}`, details);
}

const connectionErrors = new WeakMap<object, Error>();
const tracked = new WeakSet<object>();

/** Keeps the last error of a client's connection (any node's), so that a failing command can say why. */
export function trackConnectionErrors(redis: OutboxRedisClient): void {
  if (tracked.has(redis)) return;
  tracked.add(redis);
  const keep = (err: unknown) => {
    if (err instanceof Error && (connectionCode(err) !== undefined || refusalReply(err, 0) !== undefined)) {
      connectionErrors.set(redis, err);
    }
  };
  redis.on('error', keep);
  redis.on('node error', keep);
  redis.on('ready', () => connectionErrors.delete(redis));
}

export function lastConnectionError(redis: OutboxRedisClient): Error | undefined {
  return connectionErrors.get(redis);
}

/** The code of an error of a connection itself (a socket's, a DNS lookup's, TLS's), through `lastNodeError`. */
function connectionCode(err: unknown, depth = 0): string | undefined {
  if (!(err instanceof Error) || depth > 3) return undefined;
  const code = (err as { code?: unknown }).code;
  if (
    typeof code === 'string' &&
    (/^E[A-Z_]+$/.test(code) || /^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_|UNABLE_|SELF_)/.test(code))
  ) {
    return code;
  }
  return connectionCode((err as { lastNodeError?: unknown }).lastNodeError, depth + 1);
}

/** Whether a command failed because the client lost its connection and could not make a new one. */
export function connectionLost(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return (
    err.name === 'MaxRetriesPerRequestError' ||
    err.name === 'ClusterAllFailedError' ||
    err.message === 'Connection is closed.' ||
    err.message.startsWith('Failed to refresh slots cache') ||
    connectionCode(err) !== undefined
  );
}

function isCommandTimeout(err: unknown): boolean {
  return err instanceof Error && err.message === 'Command timed out';
}

const UNREACHABLE: readonly { codes: readonly string[]; what: string }[] = [
  { codes: ['ECONNREFUSED'], what: 'the connection was refused' },
  { codes: ['ETIMEDOUT', 'ESOCKETTIMEDOUT'], what: 'connecting timed out (nothing answered)' },
  { codes: ['ENOTFOUND', 'EAI_AGAIN', 'EAI_NONAME'], what: 'its host name was not found' },
  { codes: ['EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN'], what: 'its host cannot be reached' },
  { codes: ['ECONNRESET', 'EPIPE', 'ECONNABORTED'], what: 'it closed the connection' },
];

/** Why Redis cannot be reached and what to check, from the connection's last error. */
export function unreachable(where: string, err: unknown): string {
  const code = connectionCode(err);
  const check = 'Check the connection option (REDIS_URL or --redis with the CLI)';
  const tls = code !== undefined && /^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_|UNABLE_|SELF_|EPROTO)/.test(code);
  if (tls) {
    return `the TLS connection failed (${code}): is it a TLS port (rediss://), with a certificate this machine trusts? ${check}`;
  }
  const known = UNREACHABLE.find((u) => code !== undefined && u.codes.includes(code));
  const what = known
    ? `${known.what} (${code})`
    : code
      ? `the connection failed (${code})`
      : 'the connection was lost and could not be made again';
  const hint =
    code === 'ECONNRESET' || code === 'EPIPE' || code === 'ECONNABORTED'
      ? ` is ${where} Redis (a TLS port needs rediss://)?`
      : code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME'
        ? ` is the host name of ${where} right?`
        : code === 'ECONNREFUSED' || code === undefined
          ? ` is Redis running at ${where}?`
          : ` is ${where} reachable from here (a firewall, a wrong address)?`;
  return `${what}:${hint} ${check}`;
}

export function withStoredSend(err: EmlApiError, send: StoredSend): EmlApiError {
  if (err.idempotencyKey === send.idempotencyKey && err.queueId === send.queueId) return err;
  return new EmlApiError(err.code, err.message, { ...errorDetails(err), ...send });
}

/**
 * Redis's refusals of a command it never ran: slot served elsewhere or not at all, unknown script, user not allowed,
 * or no write taken now. A script gets these at its first write at the latest, and Redis then writes nothing of it.
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

/** Refusals a cluster client answers by trying elsewhere: the last one says nothing of the tries before. */
const REROUTED = new Set(['MOVED', 'ASK', 'TRYAGAIN', 'CLUSTERDOWN']);

/**
 * How sure it is that a failed command never ran: `refused` (a REFUSALS reply); `rerouted` (a cluster client gave up
 * re-routing it: a try cut off by a failover may have run on the old master); `unknown` (a timeout: it may have run).
 */
export function commandFate(err: unknown, cluster: boolean): 'refused' | 'rerouted' | 'unknown' {
  if (!(err instanceof Error)) return 'unknown';
  if (err.message.startsWith('Too many Cluster redirections')) return 'rerouted';
  if (err.name !== 'ReplyError') return 'unknown';
  const word = err.message.split(' ', 1)[0]!;
  if (!REFUSALS.has(word)) return 'unknown';
  return cluster && REROUTED.has(word) ? 'rerouted' : 'refused';
}

const CAUSE_DEPTH = 8;

/**
 * Removes, in place, the arguments of every Redis command the error (or its causes) names: the outbox's commands carry
 * message content, which an app logging the error would otherwise write into its logs.
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

/**
 * Redis's refusals of the connection itself, which no retry fixes, with what fixes each (a cluster client keeps them in
 * `lastNodeError`). Redis's replies name no password, and messages are built from them alone.
 */
const REFUSAL_FIXES: readonly { match: RegExp; command: string; fix: string }[] = [
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

const DEPTH = 4;

/**
 * The `ECONFIG` (permanent) for an error that is, or wraps, a refusal of the connection by Redis; else undefined.
 * @param doing what failed, to start the message with @default `Redis at ${where}`
 */
export function redisRefusal(err: unknown, where: string, doing?: string): EmlApiError | undefined {
  const reply = refusalReply(err, 0);
  if (reply === undefined) return undefined;
  const refusal = REFUSAL_FIXES.find((r) => r.match.test(reply))!;
  const word = reply.split(' ', 1)[0]!;
  const intro =
    doing === undefined ? `Redis at ${where} refused the connection` : `${doing}: Redis refused the connection`;
  return new EmlApiError('ECONFIG', `${intro} (${firstLine(reply)}): ${refusal.fix}`, {
    permanent: true,
    command: refusal.command,
    response: word,
  });
}

/** The reason a Redis error gives, with a cluster's `lastNodeError` after its own message. */
export function redisErrorText(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const last = (err as { lastNodeError?: unknown } | null)?.lastNodeError;
  return last instanceof Error && last.message !== message ? `${message} (last node error: ${last.message})` : message;
}

/**
 * Watches a client's (or a BullMQ worker's) `error` events for a refusal of the connection, which commands retrying
 * would never tell: `refused` rejects with its `ECONFIG`, and is a new pending promise once the connection is ready.
 */
export function watchRefusal(
  redis: OutboxRedisClient | ErrorEmitter,
  where: string,
): { readonly refused: Promise<never>; stop(): void } {
  const pending = () => {
    let reject!: (err: EmlApiError) => void;
    const promise = new Promise<never>((_, fail) => (reject = fail));
    promise.catch(() => undefined);
    return { promise, reject, seen: false };
  };
  let current = pending();
  const listener = (err: unknown) => {
    const refusal = redisRefusal(err, where);
    if (!refusal) return;
    current.seen = true;
    current.reject(refusal);
  };
  const ready = () => {
    if (current.seen) current = pending();
  };
  const emitter = redis as ErrorEmitter;
  emitter.on('error', listener);
  emitter.on('ready', ready);
  return {
    get refused() {
      return current.promise;
    },
    stop: () => {
      emitter.off('error', listener);
      emitter.off('ready', ready);
    },
  };
}

/** What emits the errors watched: a client, or a BullMQ worker (whose own connections' errors it re-emits). */
interface ErrorEmitter {
  on(event: 'error' | 'ready', listener: (err: Error) => void): unknown;
  off(event: 'error' | 'ready', listener: (err: Error) => void): unknown;
}

function refusalReply(err: unknown, depth: number): string | undefined {
  if (!(err instanceof Error) || depth > DEPTH) return undefined;
  if (REFUSAL_FIXES.some((r) => r.match.test(err.message))) return err.message;
  const o = err as { lastNodeError?: unknown; cause?: unknown };
  return refusalReply(o.lastNodeError, depth + 1) ?? refusalReply(o.cause, depth + 1);
}

function firstLine(text: string): string {
  return text.split(/\r?\n/, 1)[0]!.slice(0, 200);
}
