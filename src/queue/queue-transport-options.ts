import type { JobsOptions } from 'bullmq';
import type { SpoolOptions, SpoolSettings } from '../body/message-spool.js';
import {
  type EmlApiLogger,
  booleanOption,
  configError,
  describe,
  objectOption,
  oneOf,
  refuseUnknownKeys,
  loggerOption,
  wholeNumber,
} from '../shared/options-kit.js';
import type { RedisConnectionInput } from './redis-connection.js';
import { type OutboxEncryption, resolveEncryption, type OutboxKeyring } from './content-cipher.js';
import {
  type RetryScheduleOptions,
  MAX_OUTBOX_PRIORITY,
  newMessagePriority,
  resolveRetrySchedule,
  retryJobOptions,
} from './retry-schedule.js';
import { resolveSpool } from '../client/client-options.js';
import { maxUploadableSize } from '../body/eml-upload-body.js';
import { MAX_REQUEST_SIZE } from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveBuildThreads } from '../transport/build-threads/pool.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import { OUTBOX_DURABILITIES, type OutboxDurability } from './redis-settings.js';
import { accountFingerprint, resolveAccount } from './queue-owner.js';

/**
 * BullMQ job options a producer may set on its jobs. The job id is the
 * send's idempotency key, so it is not among them; `removeOnComplete` and
 * `removeOnFail` cannot be `true` (see {@link OutboxProducerOptions.jobOptions}).
 *
 * @example
 * const jobOptions: OutboxJobOptions = { priority: 1, removeOnFail: { age: 30 * 86400 } };
 */
export type OutboxJobOptions = Omit<
  JobsOptions,
  'jobId' | 'repeat' | 'parent' | 'deduplication' | 'debounce' | 'removeOnComplete' | 'removeOnFail'
> & {
  removeOnComplete?: Exclude<JobsOptions['removeOnComplete'], true>;
  removeOnFail?: Exclude<JobsOptions['removeOnFail'], true>;
};

/**
 * How many Redis replicas must confirm a message before it is acknowledged
 * (see {@link OutboxProducerOptions.replicas}).
 * @example
 * const replicas: OutboxReplicas = { count: 1, timeoutMs: 500 };
 */
export interface OutboxReplicas {
  /** Replicas that must confirm, at least 1. */
  count: number;
  /**
   * How long to wait for them, in ms.
   * @default 1000
   */
  timeoutMs?: number;
}

/**
 * Time limits of a producer ({@link OutboxProducer}, {@link EmlApiQueueTransport}), in milliseconds.
 * @example
 * const timeouts: QueueTransportTimeouts = { store: 10_000 };
 */
export interface QueueTransportTimeouts {
  /**
   * Time allowed to store a message and its job in Redis. A send that takes
   * longer fails with `ETIMEDOUT` (when the job may still have been stored,
   * the error says so: `mayHaveBeenAccepted`). Also bounds Redis's checks
   * (`verify()`, the first send's) and the wait for `replicas`.
   * @default 30000
   */
  store?: number;
}

/**
 * Options of {@link OutboxProducer}, the store every producer of the outbox
 * goes through. No API key: a producer only stores messages; the workers
 * that send them have the key.
 *
 * @example
 * const producer = new OutboxProducer({ connection: process.env.REDIS_URL!, queueName: 'mail' });
 */
export interface OutboxProducerOptions {
  /** Redis: a `redis://` or `rediss://` URL, ioredis options, or an ioredis instance (which you then close). */
  connection: RedisConnectionInput;
  /**
   * Name of the BullMQ queue; workers must use the same.
   * @default 'eml-api'
   */
  queueName?: string;
  /**
   * The service account this queue sends for: your account's id, or any
   * name its producers and workers share. Recorded on the queue (a
   * fingerprint) by the first producer or worker that names one; a producer
   * or worker of another account, or one that names none, then refuses the
   * queue (`ECONFIG`), and workers refuse jobs queued for another account.
   * Two apps on one Redis with the same queue name would otherwise send each
   * other's mail through their own accounts.
   * @default undefined (none named)
   * @example
   * new EmlApiQueueTransport({ connection, account: 'shop-prod' });
   */
  account?: string;
  /**
   * Prefix of every Redis key of the queue (BullMQ's `prefix`); workers must use the same.
   * @default 'bull'
   */
  prefix?: string;
  /**
   * When failed sends are tried again. See docs/outbox.md, "Retries, rate limits and failures".
   * @default { attempts: 30, delay: 5000, maxDelay: 3600000, jitter: 0.2 } (waits of 16.3 to 20.4 hours in all)
   */
  retry?: RetryScheduleOptions;
  /**
   * BullMQ options of every job, over the outbox's (`attempts` and `backoff`
   * from `retry`; sent jobs kept 24 hours, the service's idempotency window,
   * so a repeated `idempotencyKey` is still recognised; failed jobs kept 7 days).
   * `priority` (0 to 2^21 - 2, lower first) orders new messages among
   * themselves; BullMQ stores it plus 1, as retries, which go first, have 0.
   * `removeOnComplete` that removes sent jobs within the idempotency window
   * (`true`, a count of 0, an `age` under 86400) and `removeOnFail` that
   * removes failed jobs at once (`true`, a count of 0, an `age` of 0: parked
   * messages would vanish) are refused with `ECONFIG`; a count keeps that many
   * (under load, fewer than a day's).
   * @default { removeOnComplete: { age: 86400 }, removeOnFail: { age: 604800 } }
   */
  jobOptions?: OutboxJobOptions;
  /**
   * Largest message queued, in bytes: the size of the message itself (its
   * EML), as the relay's `maxMessageSize` counts it. Larger ones are refused
   * with `EMESSAGE` before anything is stored. The default is the largest
   * message whose upload (Base64 in JSON, 4/3 of its size) fits the
   * service's 50 MiB request limit; a send without EML (a JSON send) may make
   * a request as large as such a message's.
   * @default 39321591 (37.5 MiB, whose upload is the service's 50 MiB request limit)
   * @example
   * new EmlApiQueueTransport({ connection, maxMessageSize: 10 * 1024 * 1024 });
   */
  maxMessageSize?: number;
  /**
   * Messages storing at once; more wait in order.
   * @default 10
   */
  concurrency?: number;
  /**
   * Time limits in milliseconds.
   * @default { store: 30000 }
   * @example
   * new EmlApiQueueTransport({ connection, timeouts: { store: 10_000 } });
   */
  timeouts?: QueueTransportTimeouts;
  /**
   * What Redis must guarantee before mail is queued; checked on the first
   * send and by `verify()`, with `maxmemory-policy noeviction` always
   * required. `'warn'` queues in any case and logs a warning when Redis runs
   * without its append-only file (a queued message then survives no restart
   * of Redis); `'aof'` refuses (`ECONFIG`) unless `appendonly yes`;
   * `'aof-always'` also needs `appendfsync always` (every write on disk
   * before a message is acknowledged, as Postfix fsyncs before its `250`). Where
   * Redis does not let the settings be read, a warning is logged instead.
   * @default 'warn'
   * @example
   * new EmlApiQueueTransport({ connection: process.env.REDIS_URL!, durability: 'aof' });
   */
  durability?: OutboxDurability;
  /**
   * The persistence `durability` asks for is verified another way: where
   * Redis does not let it be read (a managed Redis that renames `CONFIG`,
   * whose `INFO` tells `appendonly` but not `appendfsync`), it is taken as
   * given, with a warning, instead of refused (`ECONFIG`). Say it only once
   * you checked the setting (your provider's console or parameter group).
   * @default false
   * @example
   * new EmlApiQueueTransport({ connection, durability: 'aof-always', durabilityVerified: true });
   */
  durabilityVerified?: boolean;
  /**
   * Replicas of Redis that must hold each message before it is
   * acknowledged (`sendMail` resolves). Redis replicates asynchronously: without this, a message is
   * acknowledged once its master has it, and a failover to a replica that
   * had not received it yet loses it (a master that dies mid-stream, or one
   * that hangs while its replica takes over). With it, the producer sends
   * `WAIT count timeoutMs` with the job's add, in the same round trip, and
   * resolves only once `count` replicas confirmed every write of the message
   * (its content, its job). When fewer do within `timeoutMs`, the send
   * rejects with `ETIMEDOUT` and `mayHaveBeenAccepted: true`: the message is
   * queued on the master and will most likely be sent, but it could still be
   * lost in a failover; queue it again with the same `idempotencyKey`
   * (`err.idempotencyKey`), which stores it once. Works with one Redis and its
   * replicas and on a Redis Cluster (the master of the queue's slot). Costs
   * the replicas' round trip per message (`WAIT` holds the producer's
   * connection meanwhile); see BENCHMARKS.md, "outbox replicas".
   * @default undefined (the master's acknowledgement alone)
   * @example
   * new EmlApiQueueTransport({ connection, replicas: { count: 1, timeoutMs: 500 } });
   */
  replicas?: OutboxReplicas;
  /**
   * Encrypts what is queued (AES-256-GCM): the message's content, chunk by
   * chunk, and its envelope and Message-ID; the workers hold the same keys.
   * Anyone who can read Redis otherwise reads every queued message. See
   * docs/outbox.md, "Encryption at rest", for what stays in clear (the idempotency key, the
   * group, the size, the errors the service returned).
   * @default undefined (stored in clear)
   * @example
   * new EmlApiQueueTransport({
   *   connection: process.env.REDIS_URL!,
   *   encryption: { keyId: 'k2', keys: { k2: process.env.OUTBOX_KEY_K2!, k1: process.env.OUTBOX_KEY_K1! } },
   * });
   */
  encryption?: OutboxEncryption;
  /**
   * Where the producer logs: `true` for the console, or a logger object.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
}

/**
 * Options of {@link EmlApiQueueTransport}: a producer's, and how it builds
 * messages. No API key: the workers that send them have it.
 *
 * @example
 * const transport = new EmlApiQueueTransport({ connection: process.env.REDIS_URL!, queueName: 'mail' });
 */
export interface EmlApiQueueTransportOptions extends OutboxProducerOptions {
  /**
   * Sends building and storing at once; more wait in order. `isIdle()` is
   * true while one more would start at once.
   * @default 10
   */
  concurrency?: number;
  /**
   * Where large messages are spooled while they are built (as with the direct transport).
   * @default { threshold: 2097152 (2 MiB), directory: os.tmpdir() }
   */
  spool?: SpoolOptions;
  /**
   * Build messages on this many worker threads (`'auto'`: one per core), as
   * the direct transport's `buildThreads` does: the same bytes, off the
   * thread that calls `sendMail`.
   * @default undefined (off)
   * @example
   * new EmlApiQueueTransport({ connection, buildThreads: 2 });
   */
  buildThreads?: number | 'auto' | false;
}

/**
 * The default of `maxMessageSize`: the largest message whose upload fits the
 * service's 50 MiB request limit (37.5 MiB).
 */
export const DEFAULT_MAX_MESSAGE_SIZE = maxUploadableSize(MAX_REQUEST_SIZE);

/** Every option of a producer. */
const PRODUCER_OPTIONS = [
  'connection',
  'queueName',
  'account',
  'prefix',
  'retry',
  'jobOptions',
  'maxMessageSize',
  'concurrency',
  'timeouts',
  'durability',
  'durabilityVerified',
  'replicas',
  'encryption',
  'logger',
] as const satisfies readonly (keyof OutboxProducerOptions)[];

/** Every option of the queue transport: a producer's and its own. */
const QUEUE_TRANSPORT_OPTIONS = [
  ...PRODUCER_OPTIONS,
  'spool',
  'buildThreads',
] as const satisfies readonly (keyof EmlApiQueueTransportOptions)[];
/**
 * How long sent jobs are kept, in seconds: the service's idempotency window
 * (24 hours), so a repeated `idempotencyKey` is still recognised.
 */
export const KEEP_SENT_SECONDS = 24 * 3600;
/**
 * How long failed jobs are kept, in seconds: 7 days, to be looked at and retried.
 */
export const KEEP_FAILED_SECONDS = 7 * 24 * 3600;

/**
 * Producer options after validation.
 */
export interface ResolvedProducerOptions extends QueueLocation {
  jobOptions: OutboxJobOptions;
  maxMessageSize: number;
  concurrency: number;
  /** `timeouts.store`. */
  storeTimeout: number;
  durability: OutboxDurability;
  /** `durabilityVerified`. */
  durabilityVerified: boolean;
  /** The fingerprint of `account`, if given. */
  account: string | undefined;
  /** Replicas that must confirm each message (`WAIT`), if any. */
  replicas: Required<OutboxReplicas> | undefined;
  /** The `encryption` keys, if any. */
  keyring: OutboxKeyring | undefined;
  logger: EmlApiLogger;
}

/**
 * The queue transport's own options after validation, and the producer's options as given.
 */
export interface ResolvedQueueTransportOptions {
  producer: OutboxProducerOptions;
  concurrency: number;
  spool: SpoolSettings;
  /** Build threads (0: none). */
  buildThreads: number;
}

/**
 * Checks the options of {@link EmlApiQueueTransport} of its own, and that it knows every option given
 * (the producer checks its own).
 * @throws {EmlApiError} `ECONFIG` naming the option
 */
export function resolveQueueTransportOptions(options: EmlApiQueueTransportOptions): ResolvedQueueTransportOptions {
  checkOptionsObject(options);
  refuseUnknownKeys(options, QUEUE_TRANSPORT_OPTIONS, '');
  const { spool, buildThreads, ...producer } = options;
  return {
    producer,
    concurrency: concurrencyOption(options.concurrency),
    spool: resolveSpool(spool),
    buildThreads: resolveBuildThreads(buildThreads),
  };
}

/** The largest `concurrency`. */
export const MAX_CONCURRENCY = 10_000;

function concurrencyOption(value: unknown): number {
  return wholeNumber(value, 'concurrency', 1, MAX_CONCURRENCY, 10);
}

function checkOptionsObject(options: unknown): void {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least connection', { permanent: true });
  }
}

/**
 * Checks the options of {@link OutboxProducer}.
 * @throws {EmlApiError} `ECONFIG` naming the option
 */
export function resolveProducerOptions(options: OutboxProducerOptions): ResolvedProducerOptions {
  checkOptionsObject(options);
  refuseUnknownKeys(options, PRODUCER_OPTIONS, '');
  if (options.connection === undefined || options.connection === null) {
    throw configError('connection', 'required: a redis:// URL, ioredis options or an ioredis instance');
  }
  const jobOptions = options.jobOptions ?? {};
  if (typeof jobOptions !== 'object' || jobOptions === null || Array.isArray(jobOptions)) {
    throw configError('jobOptions', `expected BullMQ job options, got ${describe(jobOptions)}`);
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
  const schedule = resolveRetrySchedule(options.retry);
  const storeTimeout = resolveTimeouts(options.timeouts).store;
  return {
    ...resolveQueueLocation(options.queueName, options.prefix),
    jobOptions: {
      ...retryJobOptions(schedule),
      removeOnComplete: { age: KEEP_SENT_SECONDS },
      removeOnFail: { age: KEEP_FAILED_SECONDS },
      ...jobOptions,
      // New messages go after retries, which BullMQ takes first (see RETRY_PRIORITY).
      priority: newMessagePriority(jobOptions.priority),
    },
    maxMessageSize: wholeNumber(options.maxMessageSize, 'maxMessageSize', 1, 2 ** 40, DEFAULT_MAX_MESSAGE_SIZE),
    concurrency: concurrencyOption(options.concurrency),
    storeTimeout,
    durability: resolveDurability(options.durability),
    durabilityVerified: booleanOption(options.durabilityVerified, 'durabilityVerified', false),
    account: fingerprintOf(resolveAccount(options.account)),
    replicas: resolveReplicas(options.replicas, storeTimeout),
    keyring: resolveEncryption(options.encryption, 'producer'),
    logger: loggerOption(options.logger),
  };
}

/** The default of `replicas.timeoutMs`. */
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

/**
 * Refuses a `removeOnComplete` / `removeOnFail` (BullMQ's `boolean | number |
 * { age, count }`) that removes jobs the outbox needs: at once (`true`, a
 * count of 0), or younger than `minAge` seconds. `false` (keep them), a count
 * of at least 1 and longer ages are the app's choice.
 */
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

function resolveDurability(value: unknown): OutboxDurability {
  return oneOf(value, 'durability', OUTBOX_DURABILITIES, 'warn');
}

/** The default of `timeouts.store`, in ms. */
const DEFAULT_STORE_TIMEOUT = 30_000;

function resolveTimeouts(value: unknown): Required<QueueTransportTimeouts> {
  if (value === undefined) return { store: DEFAULT_STORE_TIMEOUT };
  const t = objectOption(value, 'timeouts', '{ store } in milliseconds');
  refuseUnknownKeys(t, ['store'] satisfies (keyof QueueTransportTimeouts)[], 'timeouts.');
  return { store: wholeNumber(t.store, 'timeouts.store', 1, 3_600_000, DEFAULT_STORE_TIMEOUT) };
}

function fingerprintOf(account: string | undefined): string | undefined {
  return account === undefined ? undefined : accountFingerprint(account);
}
