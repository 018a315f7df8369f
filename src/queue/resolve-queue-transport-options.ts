import type { SpoolSettings } from '../body/spool-options.js';
import { resolveSpool } from '../client/resolve-client-options.js';
import { maxUploadableSize } from '../body/eml-upload-body.js';
import { MAX_REQUEST_SIZE } from '../protocol/service-limits.js';
import {
  configError,
  describe,
  objectOption,
  oneOf,
  refuseUnknownKeys,
  loggerOption,
  wholeNumber,
  type RenamedOptions,
} from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/logger.js';
import { resolveBuildThreads } from '../transport/build-threads/pool.js';
import { resolveQueueLocation, type QueueLocation } from './queue-location.js';
import type {
  EmlApiQueueTransportOptions,
  OutboxJobOptions,
  OutboxReplicas,
  QueueTransportTimeouts,
} from './queue-transport-options.js';
import { MAX_OUTBOX_PRIORITY, newMessagePriority, resolveRetrySchedule, retryJobOptions } from './retry-schedule.js';
import { OUTBOX_DURABILITIES, type OutboxDurability } from './redis-settings.js';
import { resolveEncryption, type OutboxKeyring } from './content-cipher.js';

/**
 * The default of `maxMessageSize`: the largest message whose upload fits the
 * service's 50 MiB request limit (37.5 MiB).
 * @example
 * new EmlApiQueueTransport({ connection, maxMessageSize: DEFAULT_MAX_MESSAGE_SIZE / 2 });
 */
export const DEFAULT_MAX_MESSAGE_SIZE = maxUploadableSize(MAX_REQUEST_SIZE);

/** Every option of the queue transport. */
const QUEUE_TRANSPORT_OPTIONS = [
  'connection',
  'queueName',
  'prefix',
  'retry',
  'jobOptions',
  'maxMessageSize',
  'concurrency',
  'spool',
  'timeouts',
  'buildThreads',
  'durability',
  'replicas',
  'encryption',
  'logger',
] as const satisfies readonly (keyof EmlApiQueueTransportOptions)[];

/** The queue transport's options renamed before 1.0, refused with their new name. */
const QUEUE_TRANSPORT_RENAMED: RenamedOptions = {
  maxMessageBytes:
    'renamed to maxMessageSize, which counts the message itself, not its Base64 upload (maxMessageBytes 52428800 is maxMessageSize 39321591)',
  storeTimeout: 'renamed to timeouts: { store }',
  retries:
    'the outbox retries on its schedule: retry { attempts, delay, maxDelay, jitter } (attempts counts the first try)',
};
/**
 * How long sent jobs are kept, in seconds: the service's idempotency window
 * (24 hours), so a repeated `idempotencyKey` is still recognised.
 * @example
 * new EmlApiQueueTransport({ connection, jobOptions: { removeOnComplete: { age: KEEP_SENT_SECONDS, count: 100_000 } } });
 */
export const KEEP_SENT_SECONDS = 24 * 3600;
/**
 * How long failed jobs are kept, in seconds: 7 days, to be looked at and retried.
 * @example
 * new EmlApiQueueTransport({ connection, jobOptions: { removeOnFail: { age: 2 * KEEP_FAILED_SECONDS } } });
 */
export const KEEP_FAILED_SECONDS = 7 * 24 * 3600;

/**
 * Producer options after validation.
 * @example
 * const { queueName, maxMessageSize } = resolveQueueTransportOptions({ connection });
 */
export interface ResolvedQueueTransportOptions extends QueueLocation {
  jobOptions: OutboxJobOptions;
  maxMessageSize: number;
  concurrency: number;
  spool: SpoolSettings;
  /** `timeouts.store`. */
  storeTimeout: number;
  /** Build threads (0: none). */
  buildThreads: number;
  durability: OutboxDurability;
  /** Replicas that must confirm each message (`WAIT`), if any. */
  replicas: Required<OutboxReplicas> | undefined;
  /** The `encryption` keys, if any. */
  keyring: OutboxKeyring | undefined;
  logger: EmlApiLogger;
}

/**
 * Checks the options of {@link EmlApiQueueTransport} (all but `connection`).
 * @throws {EmlApiError} `ECONFIG` naming the option
 * @example
 * const settings = resolveQueueTransportOptions({ connection: 'redis://127.0.0.1:6379', retry: { attempts: 10 } });
 */
export function resolveQueueTransportOptions(options: EmlApiQueueTransportOptions): ResolvedQueueTransportOptions {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least connection', { permanent: true });
  }
  refuseUnknownKeys(options, QUEUE_TRANSPORT_OPTIONS, '', QUEUE_TRANSPORT_RENAMED);
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
    concurrency: wholeNumber(options.concurrency, 'concurrency', 1, 10_000, 10),
    spool: resolveSpool(options.spool),
    storeTimeout,
    buildThreads: resolveBuildThreads(options.buildThreads),
    durability: resolveDurability(options.durability),
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
