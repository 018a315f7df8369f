import { configError, describe } from '../client/resolve-client-options.js';
import type { EmlApiClientOptions } from '../client/client-options.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveLogger, type EmlApiLogger } from '../shared/logger.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import { wholeNumberOption } from './whole-number-option.js';
import { resolveEncryption, type OutboxKeyring } from './content-cipher.js';
import type { EmlApiWorkerOptions, OutboxRateLimit, OutboxWorkerTuning } from './worker-options.js';

/**
 * The limiter of workers without one: it never limits by itself (BullMQ
 * counts every job against it), but BullMQ honours a queue-wide pause (a
 * 429's `Retry-After`) only in workers that have a limiter.
 * @example
 * const limiter = options.limiter ? evenRate(options.limiter) : UNLIMITED_RATE;
 */
/**
 * The default of `maxStalls`: stalls a job may have and still be retried.
 * @example
 * await startEmlApiWorker({ connection, apiKey, baseUrl, maxStalls: DEFAULT_MAX_STALLS + 2 });
 */
export const DEFAULT_MAX_STALLS = 5;

/**
 * The default of `idempotencyWindow`: how long the service remembers an
 * `Idempotency-Key` (24 hours, the emulator's and CONTRACT.md's), in ms.
 * @example
 * await startEmlApiWorker({ connection, apiKey, baseUrl, idempotencyWindow: DEFAULT_IDEMPOTENCY_WINDOW / 2 });
 */
export const DEFAULT_IDEMPOTENCY_WINDOW = 24 * 3_600_000;

/**
 * The default of `idempotencyMargin` (when the window is longer): 1 hour, in ms.
 * @example
 * await startEmlApiWorker({ connection, apiKey, baseUrl, idempotencyMargin: DEFAULT_IDEMPOTENCY_MARGIN * 2 });
 */
export const DEFAULT_IDEMPOTENCY_MARGIN = 3_600_000;

/**
 * The default of `maxRetryAfter`: the longest `Retry-After` a worker honours, 15 minutes, in ms.
 * @example
 * await startEmlApiWorker({ connection, apiKey, baseUrl, maxRetryAfter: DEFAULT_MAX_RETRY_AFTER * 4 });
 */
export const DEFAULT_MAX_RETRY_AFTER = 15 * 60_000;

/**
 * BullMQ's own stall limit, set out of reach: BullMQ fails a job over it
 * without calling the worker (no error on the job, outside its retry
 * schedule, 1 by default), while the outbox counts stalls as attempts itself.
 */
const BULLMQ_STALL_LIMIT = 1_000_000;

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
 *
 * @example
 * evenRate({ max: 20, duration: 1000 }); // { max: 1, duration: 50 }
 * evenRate({ max: 1000, duration: 1000 }); // { max: 10, duration: 10 }
 */
export function evenRate({ max, duration }: OutboxRateLimit): OutboxRateLimit {
  const perSend = duration / max;
  if (perSend >= SHORTEST_WINDOW) return { max: 1, duration: Math.ceil(perSend) };
  const group = Math.ceil(SHORTEST_WINDOW / perSend);
  return { max: group, duration: Math.ceil(group * perSend) };
}

/**
 * Worker options after validation, split into the client's and the worker's.
 * @example
 * const { client, concurrency, limiter } = resolveWorkerOptions(options);
 */
export interface ResolvedWorkerOptions extends QueueLocation {
  client: EmlApiClientOptions;
  concurrency: number;
  limiter: OutboxRateLimit;
  cleanupInterval: number;
  maxStalls: number;
  /** When a send that may have been accepted is no longer sent again: its first such attempt's start plus this, in ms. */
  resendWithin: number;
  /** The longest `Retry-After` honoured, in ms. */
  maxRetryAfter: number;
  workerOptions: OutboxWorkerTuning & { maxStalledCount: number };
  /** The `encryption` keys, if any. */
  keyring: OutboxKeyring | undefined;
  logger: EmlApiLogger;
}

/**
 * Checks the options of {@link startEmlApiWorker} (the client's own are
 * checked by the client).
 * @throws {EmlApiError} `ECONFIG` naming the option
 * @example
 * const settings = resolveWorkerOptions({ connection, apiKey, baseUrl, concurrency: 10 });
 */
export function resolveWorkerOptions(options: EmlApiWorkerOptions): ResolvedWorkerOptions {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least connection, apiKey and baseUrl', {
      permanent: true,
    });
  }
  const {
    connection,
    queueName,
    prefix,
    concurrency: rawConcurrency,
    limiter: rawLimiter,
    cleanupInterval,
    maxStalls,
    idempotencyWindow: rawWindow,
    idempotencyMargin: rawMargin,
    maxRetryAfter,
    workerOptions,
    encryption,
    logger,
    ...client
  } = options;
  if (connection === undefined || connection === null) {
    throw configError('connection', 'required: a redis:// URL, ioredis options or an ioredis instance');
  }
  const concurrency = wholeNumberOption(rawConcurrency, 'concurrency', 5, 1, 10_000);
  let limiter: OutboxRateLimit = UNLIMITED_RATE;
  if (rawLimiter !== undefined) {
    if (typeof rawLimiter !== 'object' || rawLimiter === null) {
      throw configError('limiter', `expected { max, duration }, got ${describe(rawLimiter)}`);
    }
    limiter = evenRate({
      max: wholeNumberOption(rawLimiter.max, 'limiter.max', 0, 1, UNLIMITED_RATE.max),
      duration: wholeNumberOption(rawLimiter.duration, 'limiter.duration', 0, 1, 24 * 3_600_000),
    });
  }
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
  const window = wholeNumberOption(rawWindow, 'idempotencyWindow', DEFAULT_IDEMPOTENCY_WINDOW, 0, 365 * 24 * 3_600_000);
  const margin = wholeNumberOption(
    rawMargin,
    'idempotencyMargin',
    Math.min(DEFAULT_IDEMPOTENCY_MARGIN, window),
    0,
    window,
  );
  return {
    ...resolveQueueLocation(queueName, prefix),
    client: { ...client, maxConnections: client.maxConnections ?? concurrency, retries: client.retries ?? false },
    concurrency,
    limiter,
    cleanupInterval: wholeNumberOption(cleanupInterval, 'cleanupInterval', 600_000, 0, 24 * 3_600_000),
    maxStalls: wholeNumberOption(maxStalls, 'maxStalls', DEFAULT_MAX_STALLS, 0, 1000),
    resendWithin: window - margin,
    maxRetryAfter: wholeNumberOption(maxRetryAfter, 'maxRetryAfter', DEFAULT_MAX_RETRY_AFTER, 1000, 24 * 3_600_000),
    workerOptions: { ...workerOptions, maxStalledCount: BULLMQ_STALL_LIMIT },
    keyring: resolveEncryption(encryption, 'worker'),
    logger: resolveLogger(logger),
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
    if (tuning[name] !== undefined) wholeNumberOption(tuning[name], `workerOptions.${name}`, 0, min, day);
  }
}
