import { configError, describe } from '../shared/options-kit.js';
import { contentKeyPrefix } from './content-keys.js';

/**
 * The queue's name when none is given.
 * @example
 * new EmlApiQueueTransport({ connection }); // queue "eml-api"
 */
export const DEFAULT_QUEUE_NAME = 'eml-api';

/**
 * BullMQ's own default key prefix, so the outbox's keys are `bull:eml-api:*`.
 * @example
 * new EmlApiQueueTransport({ connection, prefix: 'mail' }); // keys mail:eml-api:*
 */
export const DEFAULT_PREFIX = 'bull';

/**
 * Where a queue lives in Redis: its name, its key prefix, and where its content keys start.
 * @example
 * const location: QueueLocation = resolveQueueLocation('eml-api', 'bull');
 * // { queueName: 'eml-api', prefix: 'bull', contentKeyPrefix: 'bull:eml-api:content:' }
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
 * @example
 * const { queueName, prefix } = resolveQueueLocation(options.queueName, options.prefix);
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
