import type { WorkerOptions } from 'bullmq';
import { type EmlApiClientOptions, CLIENT_SCHEMA, rateLimitRule } from '../client/client-options.js';
import type { RateLimitOptions } from '../http/requester.js';
import { type EmlApiLogger, configError, describe, loggerOption, wholeNumber } from '../shared/options-kit.js';
import { bool, checkOptions, custom, type OptionSchema, passedOn, whole } from '../shared/option-schema.js';
import { checkRedisConnection, type RedisConnectionInput } from './redis-connection.js';
import { type OutboxEncryption, resolveEncryption, type OutboxKeyring } from './content-cipher.js';
import type { MetricsRegistry } from '../observability/metrics.js';
import type { OpsHttpOptions } from '../observability/ops-server.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import { OUTBOX_PLACE_SCHEMA } from './queue-transport-options.js';

type OutboxWorkerTuning = NonNullable<OutboxWorkerOptions['workerOptions']>;

/**
 * Options of {@link startOutboxWorker}: where the queue is, how to reach the service (every
 * {@link EmlApiClientOptions} option), and how fast to send.
 * @example
 * await startOutboxWorker({
 *   connection: process.env.REDIS_URL!,
 *   apiKey: process.env.EML_API_KEY!,
 *   baseUrl: 'https://api.mail.example.com',
 *   concurrency: 10,
 *   rateLimit: { max: 50, duration: 1000 },
 * });
 */
export interface OutboxWorkerOptions extends Omit<EmlApiClientOptions, 'spool' | 'retry' | 'rateLimit'> {
  /** Redis: a `redis://` or `rediss://` URL, ioredis options, or an ioredis instance (which you then close). */
  connection: RedisConnectionInput;
  /** Name of the BullMQ queue, as the producers use it. @default 'eml-api' */
  queueName?: string;
  /** Prefix of the queue's Redis keys, as the producers use it. @default 'bull' */
  prefix?: string;
  /**
   * The service account this queue sends for, as its producers name it: the worker refuses a queue
   * recorded for another account (`ECONFIG`) and fails jobs queued for one. Without it, the worker
   * warns when workers with another API key send from the queue.
   * @default undefined (none named)
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, account: 'shop-prod' });
   */
  account?: string;
  /** Sends this worker runs at once. @default 5 */
  concurrency?: number;
  /**
   * Global rate limit across every worker of the queue (counted in Redis), sends spaced evenly.
   * @default undefined (no limit but the service's 429s, which pause every worker)
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, rateLimit: { max: 50, duration: 1000 } });
   */
  rateLimit?: RateLimitOptions;
  /** Requests in flight at once (the connection pool of this worker's client). @default concurrency */
  maxConnections?: number;
  /**
   * How often this worker sweeps stored content whose job is gone, in ms; 0 turns it off. One worker
   * of the queue sweeps at a time.
   * @default 600000 (10 minutes)
   */
  cleanupInterval?: number;
  /**
   * How many times a job may stall while sent alone and still be retried. A stall is a failed attempt of unknown
   * outcome; a job that has stalled is sent alone from then on, and one more stall alone than this parks it
   * (`lastError.parked: 'stalls'`): a message that crashes workers waits for a person.
   * @default 5
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, maxStalls: 2 });
   */
  maxStalls?: number;
  /**
   * How long the service remembers an `Idempotency-Key`, in ms. A send that may have been accepted is resent under
   * its key only until `idempotencyWindow - idempotencyMargin` after its first such attempt, then parked
   * (`lastError.parked: 'idempotency-window'`). Every worker of a queue should say the same.
   * @default 86400000 (24 hours, as CONTRACT.md)
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, idempotencyWindow: 12 * 3_600_000 });
   */
  idempotencyWindow?: number;
  /**
   * How long before the end of `idempotencyWindow` resends stop, in ms: room for clock skew and for the attempt itself.
   * @default 3600000 (1 hour), or `idempotencyWindow` when that is shorter
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, idempotencyMargin: 10 * 60_000 });
   */
  idempotencyMargin?: number;
  /**
   * The longest `Retry-After` the worker honours, in ms; longer ones are cut to this with a warning. A 429's pause
   * stops every worker and lives in Redis, so one absurd answer must not stop sending for a year.
   * @default 900000 (15 minutes)
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, maxRetryAfter: 60 * 60_000 });
   */
  maxRetryAfter?: number;
  /**
   * Whether the start waits for an unreachable Redis indefinitely, instead of rejecting with `ECONNECTION` after
   * `timeouts.connect`. Once started, a worker always waits for Redis.
   * @default false
   * @example await startOutboxWorker({ connection, apiKey, baseUrl, waitForRedis: true });
   */
  waitForRedis?: boolean;
  /**
   * More BullMQ worker options, e.g. `lockDuration`, `stalledInterval` or `name`; not
   * `maxStalledCount` (the outbox counts stalls itself, see `maxStalls`).
   * @default BullMQ's (lockDuration 30 s, stalledInterval 30 s)
   */
  workerOptions?: Omit<
    WorkerOptions,
    | 'connection'
    | 'concurrency'
    | 'limiter'
    | 'prefix'
    | 'autorun'
    | 'settings'
    | 'useWorkerThreads'
    | 'maxStalledCount'
  >;
  /**
   * The keys producers encrypt queued mail with, by id; keep older keys while their jobs may be queued. A job whose
   * key is missing is retried; a key other than the producers' under its id stops the start (`ECONFIG`).
   * @default undefined (no encrypted job can be sent)
   * @example
   * startOutboxWorker({ connection, apiKey, baseUrl, encryption: { keys: { k2: process.env.OUTBOX_KEY_K2!, k1: process.env.OUTBOX_KEY_K1! } } });
   */
  encryption?: OutboxEncryption;
  /** Where the worker logs: `true` for the console, or a logger object. The API key is never logged. @default false */
  logger?: boolean | EmlApiLogger;
  /**
   * An HTTP port of the worker's own for `/healthz`, `/readyz` and `/metrics`, on `127.0.0.1` unless `host` says
   * otherwise. See docs/operations.md.
   * @default undefined (no port)
   * @example
   * const outbox = await startOutboxWorker({ connection, apiKey, baseUrl, http: { port: 9465 } });
   * outbox.http?.port; // 9465
   */
  http?: OpsHttpOptions;
  /**
   * Prometheus metrics: `true` for prom-client's default registry, `{ registry }` for yours, `false` for none.
   * @default false (without http), a registry of its own (with http)
   * @example startOutboxWorker({ connection, apiKey, baseUrl, metrics: { registry } });
   */
  metrics?: boolean | { registry: MetricsRegistry };
}

export const DEFAULT_IDEMPOTENCY_WINDOW = 24 * 3_600_000;
export const DEFAULT_IDEMPOTENCY_MARGIN = 3_600_000;

/** BullMQ fails a job over its own stall limit without calling the worker and outside its retry schedule. */
const BULLMQ_STALL_LIMIT = 1_000_000;

/** It never limits, but BullMQ honours a queue-wide pause (a 429's `Retry-After`) only in workers with a limiter. */
const UNLIMITED_RATE: Readonly<RateLimitOptions> = Object.freeze({ max: 1_000_000_000, duration: 1000 });

/** In ms: faster rates send in small groups. */
const SHORTEST_WINDOW = 10;

/**
 * BullMQ counts jobs in fixed windows, so `{ max: 20, duration: 1000 }` lets 40 go within one second across a window
 * boundary. Windows of one send each space sends evenly; rounding up never exceeds the rate.
 */
function evenRate({ max, duration }: RateLimitOptions): RateLimitOptions {
  const perSend = duration / max;
  if (perSend >= SHORTEST_WINDOW) return { max: 1, duration: Math.ceil(perSend) };
  const group = Math.ceil(SHORTEST_WINDOW / perSend);
  return { max: group, duration: Math.ceil(group * perSend) };
}

/** Worker options after validation, split into the client's and the worker's. */
interface ResolvedWorkerOptions extends QueueLocation {
  client: EmlApiClientOptions;
  concurrency: number;
  /** BullMQ's limiter: `rateLimit` spaced evenly, or {@link UNLIMITED_RATE}. */
  rateLimit: RateLimitOptions;
  cleanupInterval: number;
  maxStalls: number;
  /** A possibly accepted send is resent only until its first such attempt's start plus this, in ms. */
  resendWithin: number;
  maxRetryAfter: number;
  workerOptions: OutboxWorkerTuning & { maxStalledCount: number };
  keyring: OutboxKeyring | undefined;
  /** The fingerprint of `account`, if given. */
  account: string | undefined;
  waitForRedis: boolean;
  logger: EmlApiLogger;
}

const { spool: _s, retry: _r, rateLimit: _l, logger: _g, ...clientRules } = CLIENT_SCHEMA;
const day = 24 * 3_600_000;

export const WORKER_SCHEMA = {
  ...passedOn(clientRules),
  ...OUTBOX_PLACE_SCHEMA,
  concurrency: whole(1, 10_000, 5),
  rateLimit: custom(rateLimitRule.range, (v, option) => {
    const given = rateLimitRule.check(v, option, {}, {});
    return given ? evenRate(given) : UNLIMITED_RATE;
  }),
  cleanupInterval: whole(0, day, 600_000),
  maxStalls: whole(0, 1000, 5),
  idempotencyWindow: whole(0, 365 * day, DEFAULT_IDEMPOTENCY_WINDOW),
  idempotencyMargin: custom('0 to idempotencyWindow', (v, option, _, c) => {
    const window = c.idempotencyWindow as number;
    return wholeNumber(v, option, 0, window, Math.min(DEFAULT_IDEMPOTENCY_MARGIN, window));
  }),
  maxRetryAfter: whole(1000, day, 15 * 60_000),
  waitForRedis: bool(false),
  workerOptions: custom('BullMQ worker options', (v) => {
    if (v !== undefined && (typeof v !== 'object' || v === null)) {
      throw configError('workerOptions', `expected BullMQ worker options, got ${describe(v)}`);
    }
    if (v !== undefined && 'maxStalledCount' in v) {
      throw configError(
        'workerOptions.maxStalledCount',
        'the outbox counts stalls itself, as failed attempts retried with backoff: set maxStalls (default 5) instead',
      );
    }
    checkBullmqWorkerTuning((v ?? {}) as Record<string, unknown>);
    return { ...(v as OutboxWorkerTuning | undefined), maxStalledCount: BULLMQ_STALL_LIMIT };
  }),
  encryption: custom('{ keys }', (v) => resolveEncryption(v, 'worker')),
  logger: custom('true, false, logger', loggerOption),
  http: custom('{ port, host }', (v) => v),
  metrics: custom('true, false, { registry }', (v) => v),
} as const satisfies OptionSchema<OutboxWorkerOptions>;

/**
 * Checks the options of {@link startOutboxWorker} (the client checks its own).
 * @throws {EmlApiError} `ECONFIG` naming the option
 */
export function resolveWorkerOptions(options: OutboxWorkerOptions): ResolvedWorkerOptions {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least connection, apiKey and baseUrl', {
      permanent: true,
    });
  }
  const o = checkOptions(options as unknown as Record<string, unknown>, WORKER_SCHEMA);
  const location = resolveQueueLocation(o.queueName, o.prefix);
  checkRedisConnection(options.connection, location);
  const client = Object.fromEntries(
    Object.keys(clientRules).flatMap((key) =>
      key in options ? [[key, options[key as keyof OutboxWorkerOptions]]] : [],
    ),
  ) as unknown as EmlApiClientOptions;
  return {
    ...location,
    // One try per job run: the outbox retries on the queue's schedule (and a 429 pauses the queue).
    client: { ...client, maxConnections: client.maxConnections ?? o.concurrency, retry: false },
    concurrency: o.concurrency,
    rateLimit: o.rateLimit,
    cleanupInterval: o.cleanupInterval,
    maxStalls: o.maxStalls,
    resendWithin: o.idempotencyWindow - o.idempotencyMargin,
    maxRetryAfter: o.maxRetryAfter,
    workerOptions: o.workerOptions,
    keyring: o.encryption,
    account: o.account,
    waitForRedis: o.waitForRedis,
    logger: o.logger,
  };
}

/** BullMQ's Worker makes these checks after opening its connection, which then stays open with no worker to close it. */
function checkBullmqWorkerTuning(tuning: Record<string, unknown>): void {
  const numbers: [string, number][] = [
    ['stalledInterval', 1],
    ['drainDelay', 1],
    ['maxStartedAttempts', 0],
  ];
  for (const [name, min] of numbers) {
    if (tuning[name] !== undefined) wholeNumber(tuning[name], `workerOptions.${name}`, min, day);
  }
}
