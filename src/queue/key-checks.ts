import type { OutboxRedisClient } from './redis-connection.js';
import { configError } from '../shared/options-kit.js';
import type { EmlApiError } from '../shared/eml-api-error.js';
import type { OutboxKeyring } from './content-cipher.js';
import { outboxKeys } from './content-keys.js';
import type { QueueLocation } from './queue-location.js';

/**
 * Which bytes each encryption key id of a queue stands for, kept in Redis
 * as a check value per id (`{prefix}:{queue}:outbox:keys`, a hash from key
 * id to {@link OutboxKeyring.checkValue}), never the key. A worker given
 * other bytes under an id the producers use (a typo in one machine's
 * EML_API_OUTBOX_KEYS, a key regenerated under its old id) used to start
 * and fail every encrypted job for good, as if Redis had changed them.
 * Producers write the check value of the key they encrypt with when they
 * first use it; producers and workers refuse to start with a key that does
 * not match it; and a worker that cannot decrypt a job asks it whether its
 * key is the right one (see content-store.ts).
 */

/**
 * Records the check value of the producer's current key (the first producer
 * to use an id writes it), then compares every key it holds with what Redis
 * has: a producer encrypting with other bytes than the workers hold under the
 * id would queue mail no worker can read.
 * @throws {EmlApiError} `ECONFIG` naming `encryption.keys.<id>` on a mismatch; Redis's errors
 * @example
 * await registerKeyChecks(redis, location, keyring);
 */
export async function registerKeyChecks(
  redis: OutboxRedisClient,
  location: QueueLocation,
  keyring: OutboxKeyring,
): Promise<void> {
  const { keyChecks } = outboxKeys(location);
  if (keyring.keyId !== undefined) await redis.hsetnx(keyChecks, keyring.keyId, keyring.checkValue(keyring.keyId));
  await compareKeyChecks(redis, location, keyring, 'producers');
}

/**
 * Compares every key held with the check values in Redis (ids Redis has none
 * for pass: their producers predate the checks).
 * @param others who else uses the keys, for the message
 * @throws {EmlApiError} `ECONFIG` naming `encryption.keys.<id>` on a mismatch; Redis's errors
 * @example
 * await compareKeyChecks(redis, location, keyring); // a worker, as it starts
 */
export async function compareKeyChecks(
  redis: OutboxRedisClient,
  location: QueueLocation,
  keyring: OutboxKeyring,
  others = 'producers',
): Promise<void> {
  const ids = keyring.keyIds;
  if (ids.length === 0) return;
  const stored = await redis.hmget(outboxKeys(location).keyChecks, ...ids);
  ids.forEach((id, i) => {
    const check = stored[i];
    if (check !== null && check !== undefined && check !== keyring.checkValue(id)) {
      throw keyMismatch(location, id, others);
    }
  });
}

/**
 * Whether this keyring's key `keyId` is the one the producers use, as Redis
 * tells: `right`, `wrong`, or `unknown` when Redis has no check value of it.
 * @example
 * if ((await keyVerdict(redis, location, keyring, 'k1')) === 'right') throw changedInRedis();
 */
export async function keyVerdict(
  redis: OutboxRedisClient,
  location: QueueLocation,
  keyring: OutboxKeyring,
  keyId: string,
): Promise<'right' | 'wrong' | 'unknown'> {
  const check = await redis.hget(outboxKeys(location).keyChecks, keyId);
  if (check === null) return 'unknown';
  return check === keyring.checkValue(keyId) ? 'right' : 'wrong';
}

function keyMismatch(location: QueueLocation, id: string, others: string): EmlApiError {
  return configError(
    `encryption.keys.${id}`,
    `these are not the bytes the ${others} of queue "${location.queueName}" use under the key id "${id}" ` +
      `(its check value in Redis, ${outboxKeys(location).keyChecks}, differs): mail encrypted with one could not be ` +
      'read with the other. Give every producer and worker the same key under an id (EML_API_OUTBOX_KEYS), and a ' +
      'new key a new id',
  );
}
