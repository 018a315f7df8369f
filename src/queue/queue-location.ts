import { randomBytes } from 'node:crypto';
import { configError, describe } from '../shared/options-kit.js';

/**
 * The queue's name when none is given.
 */
export const DEFAULT_QUEUE_NAME = 'eml-api';

/**
 * BullMQ's own default key prefix, so the outbox's keys are `bull:eml-api:*`.
 */
export const DEFAULT_PREFIX = 'bull';

/**
 * Where a queue lives in Redis: its name, its key prefix, and where its content keys start.
 */
export interface QueueLocation {
  queueName: string;
  prefix: string;
  contentKeyPrefix: string;
}

/**
 * Checks `queueName` and `prefix` (producers, workers and the CLI alike).
 *
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
  return { queueName: name, prefix: keyPrefix, contentKeyPrefix: contentKeyPrefix(keyPrefix, name) };
}

/**
 * The names of the outbox's own keys in Redis, beside BullMQ's: the content
 * of each queued send, `{prefix}:{queue}:content:{jobId}:{createdMs}-{random}`
 * (the job id lets the sweeper find keys whose job is gone, and the random
 * part keeps a second enqueue of the same job id from overwriting the first
 * one's bytes), and the content index and sweeper lock of a queue.
 */

/**
 * Where the content keys of a queue start.
 */
export function contentKeyPrefix(prefix: string, queueName: string): string {
  return `${prefix}:${queueName}:content:`;
}

/**
 * The outbox's own keys of a queue, beside BullMQ's. Their names have a colon
 * after `outbox`, which no job id has (job ids escape ":"), so no job's key
 * can be one of them.
 */
export function outboxKeys(location: { prefix: string; queueName: string }): {
  /** Sorted set: every content key, scored with its producer's deadline to add the job (Redis time, ms). */
  contentIndex: string;
  /** The lock of the one sweeper at work. */
  sweepLock: string;
  /** Hash: the check value of each encryption key id in use (key-checks.ts). */
  keyChecks: string;
  /** Set, for a day, once the sweeper has looked for content written before the index. */
  legacyScanned: string;
  /** Sorted set: the failed jobs parked for a person, scored with the `processedOn` of the run that parked them. */
  parked: string;
  /** Hash: who the queue belongs to (queue-owner.ts). */
  owner: string;
} {
  const base = `${location.prefix}:${location.queueName}:outbox:`;
  return {
    contentIndex: `${base}content-index`,
    sweepLock: `${base}sweep-lock`,
    keyChecks: `${base}keys`,
    legacyScanned: `${base}legacy-scanned`,
    parked: `${base}parked`,
    owner: `${base}owner`,
  };
}

/**
 * A new content key for a job.
 * @param now the creation time written in the key @default Date.now()
 */
export function newContentKey(keyPrefix: string, jobId: string, now = Date.now()): string {
  return `${keyPrefix}${jobId}:${now}-${randomBytes(4).toString('hex')}`;
}

/**
 * The job id and creation time a content key names, or undefined for a key of another form. Job ids
 * have no colon (outboxJobId escapes it): a key with one more is another queue's whose prefix nests in
 * this one's (prefix `bull:x`, queue `content`, beside prefix `bull`, queue `x`).
 */
export function parseContentKey(keyPrefix: string, key: string): { jobId: string; createdAt: number } | undefined {
  if (!key.startsWith(keyPrefix)) return undefined;
  const rest = key.slice(keyPrefix.length);
  const colon = rest.indexOf(':');
  const match = /^(\d+)-[0-9a-f]+$/.exec(rest.slice(colon + 1));
  if (colon <= 0 || !match) return undefined;
  return { jobId: rest.slice(0, colon), createdAt: Number(match[1]) };
}
