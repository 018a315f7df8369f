import type { WorkerOptions } from 'bullmq';
import { type EmlApiClientOptions, CLIENT_OPTIONS, resolveRateLimit } from '../client/client-options.js';
import type { RateLimitOptions } from '../http/requester.js';
import {
  type EmlApiLogger,
  booleanOption,
  configError,
  describe,
  loggerOption,
  refuseUnknownKeys,
  wholeNumber,
} from '../shared/options-kit.js';
import type { RedisConnectionInput } from './redis-connection.js';
import { type OutboxEncryption, resolveEncryption, type OutboxKeyring } from './content-cipher.js';
import type { MetricsOption } from '../observability/metrics.js';
import type { OpsHttpOptions } from '../observability/ops-server.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import { accountFingerprint, resolveAccount } from './queue-owner.js';

/**
 * A global rate: at most `max` sends start per `duration` ms, counted in
 * Redis across every worker of the queue (BullMQ's rate limiter). The same
 * shape as the client's `rateLimit`.
 *
 * @example
 * const rateLimit: OutboxRateLimit = { max: 20, duration: 1000 }; // 20 per second, all workers together
 */
export type OutboxRateLimit = RateLimitOptions;

/**
 * BullMQ worker options the outbox lets through, e.g. `lockDuration` and
 * `stalledInterval` (how fast the jobs of a crashed worker go to another
 * one), or `name`. Not `maxStalledCount`: the outbox counts stalls itself
 * (see {@link EmlApiWorkerOptions.maxStalls}).
 *
 * @example
 * const workerOptions: OutboxWorkerTuning = { name: os.hostname(), lockDuration: 60_000 };
 */
export type OutboxWorkerTuning = Omit<
  WorkerOptions,
  'connection' | 'concurrency' | 'limiter' | 'prefix' | 'autorun' | 'settings' | 'useWorkerThreads' | 'maxStalledCount'
>;

/**
 * Options of {@link startEmlApiWorker}: where the queue is, how to reach the
 * service (every {@link EmlApiClientOptions} option), and how fast to send.
 *
 * @example
 * await startEmlApiWorker({
 *   connection: process.env.REDIS_URL!,
 *   apiKey: process.env.EML_API_KEY!,
 *   baseUrl: 'https://api.mail.example.com',
 *   concurrency: 10,
 *   rateLimit: { max: 50, duration: 1000 },
 * });
 */
export interface EmlApiWorkerOptions extends Omit<EmlApiClientOptions, 'spool' | 'retry' | 'rateLimit'> {
  /** Redis: a `redis://` or `rediss://` URL, ioredis options, or an ioredis instance (which you then close). */
  connection: RedisConnectionInput;
  /**
   * Name of the BullMQ queue, as the producers use it.
   * @default 'eml-api'
   */
  queueName?: string;
  /**
   * Prefix of the queue's Redis keys, as the producers use it.
   * @default 'bull'
   */
  prefix?: string;
  /**
   * The service account this queue sends for, as its producers name it (see
   * `EmlApiQueueTransportOptions.account`): the worker refuses a queue
   * recorded for another account (`ECONFIG`), and fails jobs queued for
   * another account. Without it, the worker warns when workers with another
   * API key send from the queue (another app's, or a key rotated: then name
   * the account, and keys can rotate freely).
   * @default undefined (none named)
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, account: 'shop-prod' });
   */
  account?: string;
  /**
   * Sends this worker runs at once.
   * @default 5
   */
  concurrency?: number;
  /**
   * Global rate limit, across every worker of the queue (counted in Redis),
   * sends spaced evenly.
   * @default undefined (no limit but the service's 429s, which pause every worker)
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, rateLimit: { max: 50, duration: 1000 } });
   */
  rateLimit?: OutboxRateLimit;
  /**
   * Requests in flight at once (the connection pool of this worker's client).
   * @default concurrency
   */
  maxConnections?: number;
  /**
   * How often this worker sweeps stored content whose job is gone (removed
   * by age, by hand, or a crash between storing and queueing), in ms; 0
   * turns it off. One worker of the queue sweeps at a time (a lock in Redis):
   * the others skip that round.
   * @default 600000 (10 minutes)
   */
  cleanupInterval?: number;
  /**
   * How many times a job may stall while sent alone and still be retried. A
   * job stalls when the worker sending it stops before it finishes (killed,
   * crashed, out of memory, cut off from Redis for longer than
   * `lockDuration`); its send may have reached the service, so a stall counts
   * as a failed attempt of the job's retry schedule, retried after its
   * backoff under the same idempotency key. A crash takes down every send of
   * its worker, so a job that has stalled is sent alone in its worker from
   * then on (nothing else in flight), and only the stalls of such runs, which
   * the job alone can have caused, count: one more than this and the job is
   * parked (failed, `lastError.parked: 'stalls'`, its content kept) for a
   * person, since a message that crashes every worker that takes it would
   * otherwise crash them all, again and again. The messages that shared its
   * crashes are not. `eml-api queue retry` puts it back with its counts at 0.
   * @default 5
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, maxStalls: 2 });
   */
  maxStalls?: number;
  /**
   * How long the service remembers an `Idempotency-Key`, in ms. A send
   * whose outcome the worker could not learn (a timeout or a connection lost
   * after the request was sent, a 5xx other than 503, a worker that stopped
   * mid-send) may have been accepted; within this window a resend under the
   * same key is answered from the first send, after it a resend is a new
   * message. So the job records when its first such attempt started
   * (`possiblyAcceptedAt`) and, from `idempotencyWindow - idempotencyMargin`
   * after it (`resendUntil`), is parked instead of sent again: failed, with
   * `lastError.parked: 'idempotency-window'` and a reason saying to check
   * whether it was delivered before putting it back. 0 for a service that
   * ignores the header: such a job is never sent again without a person.
   * Every worker of a queue should say the same.
   * @default 86400000 (24 hours: the emulator's, and CONTRACT.md's)
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, idempotencyWindow: 12 * 3_600_000 });
   */
  idempotencyWindow?: number;
  /**
   * How long before the end of `idempotencyWindow` the worker stops sending
   * again a send that may have been accepted, in ms: room for the worker's
   * and the service's clocks to differ, and for the attempt itself to take
   * its time (`timeouts`).
   * @default 3600000 (1 hour), or `idempotencyWindow` when that is shorter
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, idempotencyMargin: 10 * 60_000 });
   */
  idempotencyMargin?: number;
  /**
   * The longest `Retry-After` the worker honours, in ms. A 429 pauses every
   * worker of the queue for its `Retry-After`, and a 5xx's delays the job's
   * next attempt; one answer asking for a year (a broken proxy, a quota page)
   * would stop all sending for that long, restarts included (the pause is in
   * Redis). Longer ones are cut to this, with a warning, and a worker that
   * starts cuts a longer pause it finds: the queue tries again then, and a
   * service still busy answers 429 again.
   * @default 900000 (15 minutes)
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, maxRetryAfter: 60 * 60_000 });
   */
  maxRetryAfter?: number;
  /**
   * Whether the start waits for a Redis it cannot reach, for as long as it
   * takes. By default it waits `timeouts.connect` (the client's option, 10 s
   * by default), saying why it cannot reach Redis as soon as it knows and
   * again every few seconds, then rejects with `ECONNECTION`. Once started,
   * a worker always waits for Redis to come back.
   * @default false
   * @example
   * await startEmlApiWorker({ connection, apiKey, baseUrl, waitForRedis: true });
   */
  waitForRedis?: boolean;
  /**
   * More BullMQ worker options.
   * @default BullMQ's (lockDuration 30 s, stalledInterval 30 s)
   */
  workerOptions?: OutboxWorkerTuning;
  /**
   * The keys producers encrypt queued mail with (their `encryption`
   * option): the worker decrypts each job with the key it names, so keep
   * older keys here while their jobs may still be queued. `keyId` is not
   * needed. A job whose key the worker does not hold is retried (for a
   * worker that holds it), not failed. A worker holding other bytes under an
   * id than the producers (their check value of it in Redis) does not start:
   * `ECONFIG` naming `encryption.keys.<id>`.
   * @default undefined (no encrypted job can be sent)
   * @example
   * startEmlApiWorker({ connection, apiKey, baseUrl, encryption: { keys: { k2: process.env.OUTBOX_KEY_K2!, k1: process.env.OUTBOX_KEY_K1! } } });
   */
  encryption?: OutboxEncryption;
  /**
   * Where the worker logs: `true` for the console, or a logger object. The API key is never logged.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
  /**
   * An HTTP port of the worker's own for `/healthz` (alive: its event loop
   * turns, its BullMQ worker runs), `/readyz` (Redis answers with
   * `noeviction`, the service answers and accepts the key; 503 with the
   * reasons, and from `close()` on) and `/metrics` (Prometheus text format).
   * Listens on `127.0.0.1` unless `host` says otherwise. Metrics need the
   * optional peer `prom-client`. See docs/operations.md.
   * @default undefined (no port)
   * @example
   * const outbox = await startEmlApiWorker({ connection, apiKey, baseUrl, http: { port: 9465 } });
   * outbox.http?.port; // 9465
   */
  http?: OpsHttpOptions;
  /**
   * Prometheus metrics: `true` for prom-client's default registry, `{ registry }`
   * for yours, `false` for none. With `http` and no `metrics`, a registry of
   * the worker's own (with prom-client's process metrics) served on `/metrics`.
   * @default false (without http), a registry of its own (with http)
   * @example
   * startEmlApiWorker({ connection, apiKey, baseUrl, metrics: { registry } });
   */
  metrics?: MetricsOption;
}

/** Every option of the worker: its own and the client's (but `spool`, `retry` and the client's `rateLimit`). */
const WORKER_OPTIONS = [
  ...CLIENT_OPTIONS.filter((key) => key !== 'spool' && key !== 'retry' && key !== 'rateLimit'),
  'connection',
  'queueName',
  'prefix',
  'account',
  'concurrency',
  'rateLimit',
  'cleanupInterval',
  'maxStalls',
  'idempotencyWindow',
  'idempotencyMargin',
  'maxRetryAfter',
  'waitForRedis',
  'workerOptions',
  'encryption',
  'logger',
  'http',
  'metrics',
] as const satisfies readonly (keyof EmlApiWorkerOptions)[];

/**
 * The default of `maxStalls`: stalls a job may have and still be retried.
 */
export const DEFAULT_MAX_STALLS = 5;

/**
 * The default of `idempotencyWindow`: how long the service remembers an
 * `Idempotency-Key` (24 hours, the emulator's and CONTRACT.md's), in ms.
 */
export const DEFAULT_IDEMPOTENCY_WINDOW = 24 * 3_600_000;

/**
 * The default of `idempotencyMargin` (when the window is longer): 1 hour, in ms.
 */
export const DEFAULT_IDEMPOTENCY_MARGIN = 3_600_000;

/**
 * The default of `maxRetryAfter`: the longest `Retry-After` a worker honours, 15 minutes, in ms.
 */
export const DEFAULT_MAX_RETRY_AFTER = 15 * 60_000;

/**
 * BullMQ's own stall limit, set out of reach: BullMQ fails a job over it
 * without calling the worker (no error on the job, outside its retry
 * schedule, 1 by default), while the outbox counts stalls as attempts itself.
 */
const BULLMQ_STALL_LIMIT = 1_000_000;

/**
 * The limiter of workers without one: it never limits by itself (BullMQ
 * counts every job against it), but BullMQ honours a queue-wide pause (a
 * 429's `Retry-After`) only in workers that have a limiter.
 */
export const UNLIMITED_RATE: Readonly<OutboxRateLimit> = Object.freeze({ max: 1_000_000_000, duration: 1000 });

/** The shortest window the even limiter uses, in ms: faster rates send in small groups. */
const SHORTEST_WINDOW = 10;

/**
 * BullMQ's limiter counts jobs in fixed windows, so `{ max: 20, duration: 1000 }`
 * lets 20 sends go at the end of one window and 20 more at the start of the
 * next: 40 within one second. The outbox asks BullMQ for the same rate in
 * windows of one send each (`{ max: 1, duration: 50 }`), so sends are spaced
 * evenly and no window of `duration` ms, wherever it starts, sees more than
 * `max` (rates above one send per 10 ms go in small groups every 10 ms or so).
 * Windows are rounded up: the rate is never exceeded.
 */
export function evenRate({ max, duration }: OutboxRateLimit): OutboxRateLimit {
  const perSend = duration / max;
  if (perSend >= SHORTEST_WINDOW) return { max: 1, duration: Math.ceil(perSend) };
  const group = Math.ceil(SHORTEST_WINDOW / perSend);
  return { max: group, duration: Math.ceil(group * perSend) };
}

/**
 * Worker options after validation, split into the client's and the worker's.
 */
export interface ResolvedWorkerOptions extends QueueLocation {
  client: EmlApiClientOptions;
  concurrency: number;
  /** BullMQ's limiter: `rateLimit` spaced evenly ({@link evenRate}), or {@link UNLIMITED_RATE}. */
  rateLimit: OutboxRateLimit;
  cleanupInterval: number;
  maxStalls: number;
  /** When a send that may have been accepted is no longer sent again: its first such attempt's start plus this, in ms. */
  resendWithin: number;
  /** The longest `Retry-After` honoured, in ms. */
  maxRetryAfter: number;
  workerOptions: OutboxWorkerTuning & { maxStalledCount: number };
  /** The `encryption` keys, if any. */
  keyring: OutboxKeyring | undefined;
  /** The fingerprint of `account`, if given. */
  account: string | undefined;
  waitForRedis: boolean;
  logger: EmlApiLogger;
}

/**
 * Checks the options of {@link startEmlApiWorker} (the client's own are
 * checked by the client).
 * @throws {EmlApiError} `ECONFIG` naming the option
 */
export function resolveWorkerOptions(options: EmlApiWorkerOptions): ResolvedWorkerOptions {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least connection, apiKey and baseUrl', {
      permanent: true,
    });
  }
  refuseUnknownKeys(options, WORKER_OPTIONS, '');
  const {
    connection,
    queueName,
    prefix,
    account,
    concurrency: rawConcurrency,
    rateLimit: rawRateLimit,
    cleanupInterval,
    maxStalls,
    idempotencyWindow: rawWindow,
    idempotencyMargin: rawMargin,
    maxRetryAfter,
    waitForRedis,
    workerOptions,
    encryption,
    logger,
    ...client
  } = options;
  if (connection === undefined || connection === null) {
    throw configError('connection', 'required: a redis:// URL, ioredis options or an ioredis instance');
  }
  const concurrency = wholeNumber(rawConcurrency, 'concurrency', 1, 10_000, 5);
  const given = resolveRateLimit(rawRateLimit, 'rateLimit');
  const rateLimit = given ? evenRate(given) : UNLIMITED_RATE;
  if (workerOptions !== undefined && (typeof workerOptions !== 'object' || workerOptions === null)) {
    throw configError('workerOptions', `expected BullMQ worker options, got ${describe(workerOptions)}`);
  }
  if (workerOptions !== undefined && 'maxStalledCount' in workerOptions) {
    throw configError(
      'workerOptions.maxStalledCount',
      'the outbox counts stalls itself, as failed attempts retried with backoff: set maxStalls (default 5) instead',
    );
  }
  checkBullmqWorkerTuning(workerOptions ?? {});
  const window = wholeNumber(rawWindow, 'idempotencyWindow', 0, 365 * 24 * 3_600_000, DEFAULT_IDEMPOTENCY_WINDOW);
  const margin = wholeNumber(rawMargin, 'idempotencyMargin', 0, window, Math.min(DEFAULT_IDEMPOTENCY_MARGIN, window));
  return {
    ...resolveQueueLocation(queueName, prefix),
    // One try per job run: the outbox retries on the queue's schedule (and a 429 pauses the queue).
    client: { ...client, maxConnections: client.maxConnections ?? concurrency, retry: false },
    concurrency,
    rateLimit,
    cleanupInterval: wholeNumber(cleanupInterval, 'cleanupInterval', 0, 24 * 3_600_000, 600_000),
    maxStalls: wholeNumber(maxStalls, 'maxStalls', 0, 1000, DEFAULT_MAX_STALLS),
    resendWithin: window - margin,
    maxRetryAfter: wholeNumber(maxRetryAfter, 'maxRetryAfter', 1000, 24 * 3_600_000, DEFAULT_MAX_RETRY_AFTER),
    workerOptions: { ...workerOptions, maxStalledCount: BULLMQ_STALL_LIMIT },
    keyring: resolveEncryption(encryption, 'worker'),
    account: account === undefined ? undefined : accountFingerprint(resolveAccount(account)!),
    waitForRedis: booleanOption(waitForRedis, 'waitForRedis', false),
    logger: loggerOption(logger),
  };
}

/**
 * The checks BullMQ's Worker constructor makes, made before any connection
 * is opened: BullMQ makes them after opening its own, which then stays open
 * (and keeps the process alive) with no worker to close it.
 */
function checkBullmqWorkerTuning(tuning: Record<string, unknown>): void {
  const day = 24 * 3_600_000;
  const numbers: [string, number][] = [
    ['stalledInterval', 1],
    ['drainDelay', 1],
    ['maxStartedAttempts', 0],
  ];
  for (const [name, min] of numbers) {
    if (tuning[name] !== undefined) wholeNumber(tuning[name], `workerOptions.${name}`, min, day);
  }
}
