import { CLIENT_OPTIONS, CLIENT_RENAMED, resolveRateLimit } from '../client/resolve-client-options.js';
import {
  configError,
  describe,
  loggerOption,
  refuseUnknownKeys,
  wholeNumber,
  type RenamedOptions,
} from '../shared/options-kit.js';
import type { EmlApiClientOptions } from '../client/client-options.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/logger.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import { resolveEncryption, type OutboxKeyring } from './content-cipher.js';
import type { EmlApiWorkerOptions, OutboxRateLimit, OutboxWorkerTuning } from './worker-options.js';

/** Every option of the worker: its own and the client's (but `spool`, `retry` and the client's `rateLimit`). */
const WORKER_OPTIONS = [
  ...CLIENT_OPTIONS.filter((key) => key !== 'spool' && key !== 'retry' && key !== 'rateLimit'),
  'connection',
  'queueName',
  'prefix',
  'concurrency',
  'rateLimit',
  'cleanupInterval',
  'maxStalls',
  'idempotencyWindow',
  'idempotencyMargin',
  'maxRetryAfter',
  'workerOptions',
  'encryption',
  'logger',
  'http',
  'metrics',
] as const satisfies readonly (keyof EmlApiWorkerOptions)[];

/** The worker's options renamed (or gone) before 1.0, refused with what to use. */
const WORKER_RENAMED: RenamedOptions = {
  ...CLIENT_RENAMED,
  limiter: 'renamed to rateLimit: { max, duration }',
  retries:
    "the worker makes one try per job run; the outbox's retry schedule is the producer's retry option (EmlApiQueueTransport({ retry: { attempts, delay, maxDelay, jitter } }))",
  retry:
    "the worker makes one try per job run; the outbox's retry schedule is the producer's retry option (EmlApiQueueTransport({ retry: { attempts, delay, maxDelay, jitter } }))",
  spool: 'the worker sends stored messages from Redis and spools nothing',
};

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

/**
 * The limiter of workers without one: it never limits by itself (BullMQ
 * counts every job against it), but BullMQ honours a queue-wide pause (a
 * 429's `Retry-After`) only in workers that have a limiter.
 * @example
 * const limiter = options.rateLimit ? evenRate(options.rateLimit) : UNLIMITED_RATE;
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
 * const { client, concurrency, rateLimit } = resolveWorkerOptions(options);
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
  refuseUnknownKeys(options, WORKER_OPTIONS, '', WORKER_RENAMED);
  const {
    connection,
    queueName,
    prefix,
    concurrency: rawConcurrency,
    rateLimit: rawRateLimit,
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
