import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { newContentKey, resolveQueueLocation } from '../../src/queue/queue-location.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * The sweeper's daily look for content written before the content index, with
 * a prefix holding glob characters (`[`, `]`, `*`, `?`, all legal in a
 * prefix): its SCAN pattern escapes them as the whole queue's purge does, so
 * it finds the queue's own keys, and only those (review, cluster finding 4).
 * A real redis-server.
 */

let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedisServer();
});

afterAll(async () => {
  await redis?.stop();
});

describe('the look for content written before the index', () => {
  it.each(['m[1]', 'm?', 'm*', 'm\\x'])(
    'finds the queue’s own keys under the prefix %s, and only those',
    async (prefix) => {
      const location = resolveQueueLocation(undefined, prefix);
      const legacy = newContentKey(location.contentKeyPrefix, 'legacy');
      // A key the raw pattern would match instead (or as well): another queue's, left alone.
      const other = newContentKey(resolveQueueLocation(undefined, 'm1').contentKeyPrefix, 'other');
      await redis.client.set(legacy, 'queued by 0.1');
      await redis.client.set(other, 'not this queue');
      try {
        expect(await sweepStoredContent(redis.client, location, { legacyScanEveryMs: 0 })).toBe(1);
        expect(await redis.client.exists(legacy)).toBe(0);
        expect(await redis.client.get(other)).toBe('not this queue');
      } finally {
        await redis.client.flushall();
      }
    },
  );
});
