import { randomUUID } from 'node:crypto';
import { configError, describe } from '../shared/options-kit.js';

/*
 * Every Redis key name the outbox uses is built here. A content key holds the job id (for the
 * sweeper) and a random part (a second enqueue of the id must not overwrite the first one's bytes).
 * Job ids escape ":", so no job's key is one of the outbox's.
 */

/** The queue's name when none is given. */
export const DEFAULT_QUEUE_NAME = 'eml-api';

/** BullMQ's own default key prefix. */
export const DEFAULT_PREFIX = 'bull';

/** A queue's name, key prefix, and where its content keys start. */
export interface QueueLocation {
  queueName: string;
  prefix: string;
  contentKeyPrefix: string;
}

/**
 * Checks `queueName` and `prefix` (producers, workers and the CLI alike).
 * @param queueName @default 'eml-api'
 * @param prefix @default 'bull'
 * @throws {EmlApiError} `ECONFIG` naming the option
 */
export function resolveQueueLocation(queueName: unknown, prefix: unknown): QueueLocation {
  const name = queueName ?? DEFAULT_QUEUE_NAME;
  if (typeof name !== 'string' || !/^[\x21-\x7e]{1,200}$/.test(name) || name.includes(':')) {
    throw configError('queueName', `expected 1 to 200 visible ASCII characters without ":", got ${describe(name)}`);
  }
  const keyPrefix = prefix ?? DEFAULT_PREFIX;
  if (typeof keyPrefix !== 'string' || !/^[\x21-\x7e]{1,100}$/.test(keyPrefix)) {
    throw configError('prefix', `expected 1 to 100 visible ASCII characters, got ${describe(keyPrefix)}`);
  }
  return { queueName: name, prefix: keyPrefix, contentKeyPrefix: `${keyPrefix}:${name}:content:` };
}

/** The location of an open BullMQ queue. */
export function queueLocationOf(queue: { name: string; opts: { prefix?: string | undefined } }): QueueLocation {
  return resolveQueueLocation(queue.name, queue.opts.prefix);
}

type Where = Pick<QueueLocation, 'prefix' | 'queueName'>;

/** One of BullMQ's keys of the queue, or with a job id the job's hash. `meta` also routes a command to the queue's master on a cluster. */
export function queueKey(location: Where, name: string): string {
  return `${location.prefix}:${location.queueName}:${name}`;
}

/** Holds the token of the worker running the job. */
export function jobLockKey(location: Where, jobId: string): string {
  return `${queueKey(location, jobId)}:lock`;
}

/** Beside BullMQ's. */
export function outboxKeys(location: Where): {
  /** Sorted set: every content key, scored with its producer's deadline to add the job (Redis time, ms). */
  contentIndex: string;
  sweepLock: string;
  /** Hash: the check value of each encryption key id. */
  keyChecks: string;
  /** Sorted set: jobs parked for a person, scored with the `processedOn` of the run that parked them. */
  parked: string;
  owner: string;
} {
  const base = queueKey(location, 'outbox:');
  return {
    contentIndex: `${base}content-index`,
    sweepLock: `${base}sweep-lock`,
    keyChecks: `${base}keys`,
    parked: `${base}parked`,
    owner: `${base}owner`,
  };
}

/**
 * A new content key for a job.
 * @param now the creation time written in the key @default Date.now()
 */
export function newContentKey(keyPrefix: string, jobId: string, now = Date.now()): string {
  // A UUID's first 8 hex digits are random, drawn from Node's cached pool rather than from OpenSSL each time.
  return `${keyPrefix}${jobId}:${now}-${randomUUID().slice(0, 8)}`;
}

/**
 * The job id and creation time a content key names, or undefined. A key with one more colon is
 * another queue's whose prefix nests in this one's (job ids have none).
 */
export function parseContentKey(keyPrefix: string, key: string): { jobId: string; createdAt: number } | undefined {
  if (!key.startsWith(keyPrefix)) return undefined;
  const rest = key.slice(keyPrefix.length);
  const colon = rest.indexOf(':');
  const match = /^(\d+)-[0-9a-f]+$/.exec(rest.slice(colon + 1));
  if (colon <= 0 || !match) return undefined;
  return { jobId: rest.slice(0, colon), createdAt: Number(match[1]) };
}
