import type { JobsOptions } from 'bullmq';
import type { SpoolOptions } from '../body/spool-options.js';
import type { EmlApiLogger } from '../shared/logger.js';
import type { RedisConnectionInput } from './redis-connection.js';
import type { OutboxDurability } from './redis-settings.js';
import type { OutboxEncryption } from './content-cipher.js';
import type { RetryScheduleOptions } from './retry-schedule.js';

/**
 * BullMQ job options a producer may set on its jobs. The job id is the
 * send's idempotency key, so it is not among them.
 *
 * @example
 * const jobOptions: OutboxJobOptions = { priority: 1, removeOnFail: { age: 30 * 86400 } };
 */
export type OutboxJobOptions = Omit<JobsOptions, 'jobId' | 'repeat' | 'parent' | 'deduplication' | 'debounce'>;

/**
 * How many Redis replicas must confirm a message before `sendMail` resolves
 * (see {@link EmlApiQueueTransportOptions.replicas}).
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
 * Time limits of {@link EmlApiQueueTransport}, in milliseconds.
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
 * Options of {@link EmlApiQueueTransport}. No API key: the producer only
 * stores messages; the workers that send them have the key.
 *
 * @example
 * const transport = new EmlApiQueueTransport({ connection: process.env.REDIS_URL!, queueName: 'mail' });
 */
export interface EmlApiQueueTransportOptions {
  /** Redis: a `redis://` or `rediss://` URL, ioredis options, or an ioredis instance (which you then close). */
  connection: RedisConnectionInput;
  /**
   * Name of the BullMQ queue; workers must use the same.
   * @default 'eml-api'
   */
  queueName?: string;
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
   * Time limits in milliseconds.
   * @default { store: 30000 }
   * @example
   * new EmlApiQueueTransport({ connection, timeouts: { store: 10_000 } });
   */
  timeouts?: QueueTransportTimeouts;
  /**
   * Build messages on this many worker threads (`'auto'`: one per core), as
   * the direct transport's `buildThreads` does: the same bytes, off the
   * thread that calls `sendMail`.
   * @default undefined (off)
   * @example
   * new EmlApiQueueTransport({ connection, buildThreads: 2 });
   */
  buildThreads?: number | 'auto' | false;
  /**
   * What Redis must guarantee before mail is queued; checked on the first
   * send and by `verify()`, with `maxmemory-policy noeviction` always
   * required. `'warn'` queues in any case and logs a warning when Redis runs
   * without its append-only file (a queued message then survives no restart
   * of Redis); `'aof'` refuses (`ECONFIG`) unless `appendonly yes`;
   * `'aof-always'` also needs `appendfsync always` (every write on disk
   * before `sendMail` resolves, as Postfix fsyncs before its `250`). Where
   * Redis does not let the settings be read, a warning is logged instead.
   * @default 'warn'
   * @example
   * new EmlApiQueueTransport({ connection: process.env.REDIS_URL!, durability: 'aof' });
   */
  durability?: OutboxDurability;
  /**
   * Replicas of Redis that must hold each message before `sendMail`
   * resolves. Redis replicates asynchronously: without this, a message is
   * acknowledged once its master has it, and a failover to a replica that
   * had not received it yet loses it (a master that dies mid-stream, or one
   * that hangs while its replica takes over). With it, the producer sends
   * `WAIT count timeoutMs` with the job's add, in the same round trip, and
   * resolves only once `count` replicas confirmed every write of the message
   * (its content, its job). When fewer do within `timeoutMs`, `sendMail`
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
   * Where the transport logs: `true` for the console, or a logger object.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
}
