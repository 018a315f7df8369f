import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openOutboxQueue, purgeOutbox } from '../../src/queue/index.js';
import { newContentKey, resolveQueueLocation } from '../../src/queue/queue-location.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * The whole queue's purge finds the stored content its index does not name
 * (a tombstone, an entry removed by hand) with a SCAN of the queue's content
 * keys. A prefix may hold glob characters (`[`, `]`, `*`, `?`, `\`, all legal
 * in a prefix): the pattern escapes them, so the SCAN finds the queue's own
 * keys, and only those. A real redis-server.
 */

let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedisServer();
});

afterAll(async () => {
  await redis?.stop();
});

describe('purgeOutbox of a queue whose prefix holds glob characters', () => {
  it.each(['m[1]', 'm?', 'm*', 'm\\x'])(
    'removes the queue’s own content in no index entry under the prefix %s, and only that',
    async (prefix) => {
      const location = resolveQueueLocation(undefined, prefix);
      const unindexed = newContentKey(location.contentKeyPrefix, 'unindexed');
      // A key the raw pattern would match instead (or as well): another queue's, left alone.
      const other = newContentKey(resolveQueueLocation(undefined, 'm1').contentKeyPrefix, 'other');
      await redis.client.set(unindexed, 'no index entry');
      await redis.client.set(other, 'not this queue');
      const admin = await openOutboxQueue({ connection: redis.url, prefix });
      try {
        expect(await purgeOutbox(admin.queue)).toMatchObject({ jobs: 0, content: 1 });
        expect(await redis.client.exists(unindexed)).toBe(0);
        expect(await redis.client.get(other)).toBe('not this queue');
      } finally {
        await admin.close();
        await redis.client.flushall();
      }
    },
  );
});
