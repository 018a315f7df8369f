import type { JobsOptions } from 'bullmq';
import type { SpoolOptions, SpoolSettings } from '../body/message-spool.js';
import { type EmlApiLogger, configError, describe, oneOf, loggerOption, wholeNumber } from '../shared/options-kit.js';
import { bool, checkOptions, custom, nested, type OptionSchema, passedOn, whole } from '../shared/option-schema.js';
import type { RedisConnectionInput } from './redis-connection.js';
import { type OutboxEncryption, resolveEncryption, type OutboxKeyring } from './content-cipher.js';
import type { RetryOptions } from '../http/requester.js';
import { MAX_OUTBOX_PRIORITY, newMessagePriority, resolveRetrySchedule, retryJobOptions } from './retry-schedule.js';
import { resolveSpool } from '../client/client-options.js';
import { maxUploadableSize } from '../body/eml-upload-body.js';
import { MAX_REQUEST_SIZE } from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveBuildThreads } from '../transport/build-threads/pool.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import { OUTBOX_DURABILITIES, type OutboxDurability } from './redis-settings.js';
import { accountFingerprint, resolveAccount } from './queue-owner.js';

/** BullMQ job options a producer may set. */
export type OutboxJobOptions = NonNullable<OutboxProducerOptions['jobOptions']>;

type OutboxReplicas = NonNullable<OutboxProducerOptions['replicas']>;
type QueueTransportTimeouts = NonNullable<OutboxProducerOptions['timeouts']>;

/**
 * Options of {@link OutboxProducer}, the store every producer of the outbox goes through. No API key: only the workers
 * that send need it.
 * @example const producer = new OutboxProducer({ connection: process.env.REDIS_URL!, queueName: 'mail' });
 */
export interface OutboxProducerOptions {
  /** Redis: a `redis://` or `rediss://` URL, ioredis options, or an ioredis instance (which you then close). */
  connection: RedisConnectionInput;
  /** Name of the BullMQ queue; workers must use the same. @default 'eml-api' */
  queueName?: string;
  /**
   * The service account this queue sends for. Recorded on the queue by the first producer or worker that names one;
   * others then refuse the queue (`ECONFIG`), so two apps sharing a queue cannot send each other's mail.
   * @default undefined (none named)
   * @example new EmlApiQueueTransport({ connection, account: 'shop-prod' });
   */
  account?: string;
  /** Prefix of every Redis key of the queue (BullMQ's `prefix`); workers must use the same. @default 'bull' */
  prefix?: string;
  /**
   * When failed sends are tried again: `delay` after the first failure, doubling up to `maxDelay`, each wait
   * shortened by a random share of up to `jitter`, for `attempts` attempts in all. The default ends before the
   * service's idempotency window closes. See docs/outbox.md, "Retries, rate limits and failures".
   * @default { attempts: 30, delay: 5000, maxDelay: 3600000, jitter: 0.2 }
   */
  retry?: Omit<RetryOptions, 'retryAmbiguous'>;
  /**
   * BullMQ options of every job, over the outbox's; not `jobId` (it is the send's idempotency key). `priority` (0 to
   * 2^21 - 2, lower first) orders new messages; retries always go first. Removal of sent jobs within the idempotency
   * window, or of failed jobs at once, is refused with `ECONFIG`. Copied when the transport is made: a later change to
   * the object has no effect.
   * @default { removeOnComplete: { age: 86400 }, removeOnFail: { age: 604800 } }
   */
  jobOptions?: Omit<
    JobsOptions,
    'jobId' | 'repeat' | 'parent' | 'deduplication' | 'debounce' | 'removeOnComplete' | 'removeOnFail'
  > & {
    removeOnComplete?: Exclude<JobsOptions['removeOnComplete'], true>;
    removeOnFail?: Exclude<JobsOptions['removeOnFail'], true>;
  };
  /**
   * Largest message queued (its EML), in bytes; larger ones are refused with `EMESSAGE` before anything is stored.
   * @default 39321591 (37.5 MiB, whose Base64 upload is the service's 50 MiB request limit)
   * @example new EmlApiQueueTransport({ connection, maxMessageSize: 10 * 1024 * 1024 });
   */
  maxMessageSize?: number;
  /** Messages storing at once; more wait in order. @default 10 */
  concurrency?: number;
  /**
   * Time limits in milliseconds.
   * @default { store: 30000 }
   * @example new EmlApiQueueTransport({ connection, timeouts: { store: 10_000 } });
   */
  timeouts?: {
    /**
     * Time allowed to store a message and its job in Redis, and for Redis's checks and `replicas`; longer fails with
     * `ETIMEDOUT` (with `mayHaveBeenAccepted` when the job may have been stored).
     * @default 30000
     */
    store?: number;
  };
  /**
   * What Redis must guarantee before mail is queued (`maxmemory-policy noeviction` always): `'warn'` logs a warning
   * without the append-only file; `'aof'` refuses (`ECONFIG`) unless `appendonly yes`; `'aof-always'` also needs
   * `appendfsync always`, as Postfix fsyncs before its `250`. Checked on the first send and by `verify()`.
   * @default 'warn'
   * @example new EmlApiQueueTransport({ connection: process.env.REDIS_URL!, durability: 'aof' });
   */
  durability?: 'warn' | 'aof' | 'aof-always';
  /**
   * Where Redis does not let `durability` be read (a managed Redis that renames `CONFIG`), take it as given with a
   * warning instead of refusing. Say it only once you checked the setting.
   * @default false
   * @example new EmlApiQueueTransport({ connection, durability: 'aof-always', durabilityVerified: true });
   */
  durabilityVerified?: boolean;
  /**
   * Replicas that must hold each message before `sendMail` resolves. A failover can lose what only the master had;
   * when fewer confirm (`WAIT`), the send rejects with `ETIMEDOUT` and `mayHaveBeenAccepted: true`.
   * @default undefined (the master's acknowledgement alone)
   * @example new EmlApiQueueTransport({ connection, replicas: { count: 1, timeoutMs: 500 } });
   */
  replicas?: {
    /** Replicas that must confirm, at least 1. */
    count: number;
    /** How long to wait for them, in ms. @default 1000 */
    timeoutMs?: number;
  };
  /**
   * Encrypts the queued content, envelope and Message-ID (AES-256-GCM); the workers hold the same keys. See
   * docs/outbox.md, "Encryption at rest", for what stays in clear.
   * @default undefined (stored in clear)
   * @example
   * new EmlApiQueueTransport({
   *   connection: process.env.REDIS_URL!,
   *   encryption: { keyId: 'k2', keys: { k2: process.env.OUTBOX_KEY_K2!, k1: process.env.OUTBOX_KEY_K1! } },
   * });
   */
  encryption?: OutboxEncryption;
  /** Where the producer logs: `true` for the console, or a logger object. @default false */
  logger?: boolean | EmlApiLogger;
}

/**
 * Options of {@link EmlApiQueueTransport}: a producer's, and how it builds messages.
 * @example const transport = new EmlApiQueueTransport({ connection: process.env.REDIS_URL!, queueName: 'mail' });
 */
export interface EmlApiQueueTransportOptions extends OutboxProducerOptions {
  /** Sends building and storing at once; more wait in order. @default 10 */
  concurrency?: number;
  /**
   * Where large messages are spooled while they are built (as with the direct transport).
   * @default { threshold: 2097152 (2 MiB), directory: os.tmpdir() }
   */
  spool?: SpoolOptions;
  /**
   * Build messages on this many worker threads (`'auto'`: one per core), as the direct transport does.
   * @default undefined (off)
   * @example new EmlApiQueueTransport({ connection, buildThreads: 2 });
   */
  buildThreads?: number | 'auto' | false;
}

/** The largest message whose upload fits the service's request limit. */
export const DEFAULT_MAX_MESSAGE_SIZE = maxUploadableSize(MAX_REQUEST_SIZE);

/** In seconds: the idempotency window, so a repeated key is recognised. */
const KEEP_SENT_SECONDS = 24 * 3600;
const KEEP_FAILED_SECONDS = 7 * 24 * 3600;

export interface ResolvedProducerOptions extends QueueLocation {
  jobOptions: OutboxJobOptions;
  maxMessageSize: number;
  concurrency: number;
  storeTimeout: number;
  durability: OutboxDurability;
  durabilityVerified: boolean;
  /** The fingerprint of `account`, if given. */
  account: string | undefined;
  replicas: Required<OutboxReplicas> | undefined;
  keyring: OutboxKeyring | undefined;
  logger: EmlApiLogger;
}

/** The queue transport's own options after validation, and the producer's options as given. */
interface ResolvedQueueTransportOptions {
  producer: OutboxProducerOptions;
  concurrency: number;
  spool: SpoolSettings;
  /** Build threads (0: none). */
  buildThreads: number;
}

export const MAX_CONCURRENCY = 10_000;
const DEFAULT_STORE_TIMEOUT = 30_000;

/** Where an outbox is and whose it is: the same options for its producers and its workers. */
export const OUTBOX_PLACE_SCHEMA = {
  connection: custom('redis:// URL, ioredis options or instance', (v) => {
    if (v === undefined || v === null) {
      throw configError('connection', 'required: a redis:// URL, ioredis options or an ioredis instance');
    }
    return v as RedisConnectionInput;
  }),
  queueName: custom('1 to 200 visible ASCII, no ":"', (v) => resolveQueueLocation(v, undefined).queueName),
  account: custom('account name', (v) => (v === undefined ? undefined : accountFingerprint(resolveAccount(v)!))),
  prefix: custom('1 to 100 visible ASCII', (v) => resolveQueueLocation(undefined, v).prefix),
};

const PRODUCER_SCHEMA = {
  ...OUTBOX_PLACE_SCHEMA,
  retry: custom('false or { attempts, delay, maxDelay, jitter }', (v) =>
    resolveRetrySchedule(v as OutboxProducerOptions['retry']),
  ),
  jobOptions: custom('BullMQ job options', (v, _, o, c) =>
    resolveJobOptions(v, c.retry as ReturnType<typeof resolveRetrySchedule>),
  ),
  maxMessageSize: whole(1, 2 ** 40, DEFAULT_MAX_MESSAGE_SIZE),
  concurrency: whole(1, MAX_CONCURRENCY, 10),
  timeouts: nested(
    { store: whole(1, 3_600_000, DEFAULT_STORE_TIMEOUT) } satisfies OptionSchema<QueueTransportTimeouts>,
    '{ store } in milliseconds',
    () => ({ store: DEFAULT_STORE_TIMEOUT }),
  ),
  durability: custom(OUTBOX_DURABILITIES.join(', '), (v) => oneOf(v, 'durability', OUTBOX_DURABILITIES, 'warn')),
  durabilityVerified: bool(false),
  replicas: custom('{ count, timeoutMs }', (v, _, o, c) => resolveReplicas(v, (c.timeouts as { store: number }).store)),
  encryption: custom('{ keyId, keys }', (v) => resolveEncryption(v, 'producer')),
  logger: custom('true, false, logger', loggerOption),
} as const satisfies OptionSchema<OutboxProducerOptions>;

export const QUEUE_TRANSPORT_SCHEMA = {
  ...passedOn(PRODUCER_SCHEMA),
  concurrency: PRODUCER_SCHEMA.concurrency,
  spool: custom('{ threshold, directory }', resolveSpool),
  buildThreads: custom("0 to 256, 'auto', false", resolveBuildThreads),
} as const satisfies OptionSchema<EmlApiQueueTransportOptions>;

/** @throws {EmlApiError} `ECONFIG` naming the option */
export function resolveQueueTransportOptions(options: EmlApiQueueTransportOptions): ResolvedQueueTransportOptions {
  checkOptionsObject(options);
  const { concurrency, spool, buildThreads } = checkOptions(
    options as unknown as Record<string, unknown>,
    QUEUE_TRANSPORT_SCHEMA,
  );
  const { spool: _s, buildThreads: _b, ...producer } = options;
  return { producer, concurrency, spool, buildThreads };
}

function checkOptionsObject(options: unknown): void {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least connection', { permanent: true });
  }
}

/** @throws {EmlApiError} `ECONFIG` naming the option */
export function resolveProducerOptions(options: OutboxProducerOptions): ResolvedProducerOptions {
  checkOptionsObject(options);
  const o = checkOptions(options as unknown as Record<string, unknown>, PRODUCER_SCHEMA);
  return {
    ...resolveQueueLocation(o.queueName, o.prefix),
    jobOptions: o.jobOptions,
    maxMessageSize: o.maxMessageSize,
    concurrency: o.concurrency,
    storeTimeout: o.timeouts.store,
    durability: o.durability,
    durabilityVerified: o.durabilityVerified,
    account: o.account,
    replicas: o.replicas,
    keyring: o.encryption,
    logger: o.logger,
  };
}

function resolveJobOptions(value: unknown, schedule: ReturnType<typeof resolveRetrySchedule>): OutboxJobOptions {
  const given = (value ?? {}) as OutboxJobOptions;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw configError('jobOptions', `expected BullMQ job options, got ${describe(given)}`);
  }
  // A copy, checked once: the producer makes its add command from these once, so a change made to the caller's
  // object later would otherwise go unchecked or half apply.
  let jobOptions: OutboxJobOptions;
  try {
    jobOptions = structuredClone(given);
  } catch (err) {
    throw configError('jobOptions', `expected plain data, as BullMQ stores it (${(err as Error).message})`);
  }
  if ('jobId' in jobOptions) {
    throw configError(
      'jobOptions.jobId',
      'the job id is the idempotency key; pass sendMail({ idempotencyKey }) instead',
    );
  }
  if (jobOptions.priority !== undefined) {
    // BullMQ checks it only when a job is added, where its refusal would read as a Redis failure.
    wholeNumber(jobOptions.priority, 'jobOptions.priority', 0, MAX_OUTBOX_PRIORITY);
  }
  checkRemoval(
    jobOptions.removeOnComplete,
    'jobOptions.removeOnComplete',
    KEEP_SENT_SECONDS,
    'sent jobs must be kept for the idempotency window (a repeated idempotencyKey is recognised by its job, and a dashboard retry of a sent job completes with its first answer)',
  );
  checkRemoval(
    jobOptions.removeOnFail,
    'jobOptions.removeOnFail',
    1,
    'failed jobs removed at once take with them the messages parked for a person and every error (their content left to the sweeper)',
  );
  return {
    ...retryJobOptions(schedule),
    removeOnComplete: { age: KEEP_SENT_SECONDS },
    removeOnFail: { age: KEEP_FAILED_SECONDS },
    ...jobOptions,
    // New messages go after retries, which BullMQ takes first (see RETRY_PRIORITY).
    priority: newMessagePriority(jobOptions.priority),
  };
}

const DEFAULT_REPLICAS_TIMEOUT = 1000;

function resolveReplicas(value: unknown, storeTimeout: number): Required<OutboxReplicas> | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError('replicas', `expected { count, timeoutMs }, got ${describe(value)}`);
  }
  const { count, timeoutMs } = value as { count?: unknown; timeoutMs?: unknown };
  return {
    count: wholeNumber(count, 'replicas.count', 1, 100),
    // Within storeTimeout: the send as a whole must end by then.
    timeoutMs: wholeNumber(
      timeoutMs,
      'replicas.timeoutMs',
      1,
      storeTimeout,
      Math.min(DEFAULT_REPLICAS_TIMEOUT, storeTimeout),
    ),
  };
}

/** Refuses a `removeOnComplete` / `removeOnFail` that removes jobs the outbox needs: at once, or younger than `minAge`. */
function checkRemoval(value: unknown, name: string, minAge: number, why: string): void {
  if (value === undefined || value === false) return;
  const refuse = (what: string) => {
    throw configError(name, `${what}: ${why}`);
  };
  if (value === true) refuse('true removes each job as it finishes');
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 1)
      refuse(`expected false, a count of at least 1 or { age, count }, got ${describe(value)}`);
    return;
  }
  if (typeof value !== 'object' || value === null) {
    refuse(`expected false, a count of at least 1 or { age, count }, got ${describe(value)}`);
  }
  const { age, count } = value as { age?: unknown; count?: unknown };
  if (count !== undefined && !(Number.isSafeInteger(count) && (count as number) >= 1)) {
    refuse(`count: expected a whole number of at least 1, got ${describe(count)}`);
  }
  if (age !== undefined && !(typeof age === 'number' && age >= minAge)) {
    refuse(`age: expected at least ${minAge} (seconds), got ${describe(age)}`);
  }
}
