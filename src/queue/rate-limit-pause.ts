import type { OutboxRedisClient } from './redis-connection.js';

/**
 * The queue-wide pause a 429 sets: BullMQ's rate limit key
 * (`{prefix}:{queue}:limiter`), which `worker.rateLimit(ms)` sets far above
 * any count for `ms`, and which every worker of the queue honours (re-read
 * at least every 30 s, BullMQ's `maximumRateLimitDelay`). The same key
 * counts the sends of BullMQ's own limiter (`limiter`) in short windows: a
 * count below {@link PAUSE_MARK} is that, not a pause.
 */

/**
 * Values of the limiter key from this one up are a pause set by
 * `rateLimit()` (BullMQ writes `Number.MAX_SAFE_INTEGER`), not a count.
 * @example
 * const pauseMs = await queue.getRateLimitTtl(PAUSE_MARK); // 0 when no 429 paused the queue
 */
export const PAUSE_MARK = 1e15;

/**
 * Shortens the pause to `maxMs` when it is longer, in one step (a pause set
 * meanwhile by another worker is judged as it stands).
 * KEYS: the limiter key. ARGV: PAUSE_MARK, maxMs. Returns the pause's length before, 0 when not cut.
 */
const CAP_PAUSE = `
local value = tonumber(redis.call('GET', KEYS[1]) or '0')
if not value or value < tonumber(ARGV[1]) then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left <= tonumber(ARGV[2]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return left
`;

/**
 * Cuts a pause longer than `maxMs` to `maxMs`: one that a worker without
 * `maxRetryAfter` (before 0.2) set from a huge `Retry-After` would otherwise
 * keep every worker waiting for that long, restarts included.
 * @returns how long the pause was before it was cut, in ms; 0 when it was not
 * @example
 * const was = await capRateLimitPause(redis, 'bull:eml-api:limiter', 900_000);
 */
export async function capRateLimitPause(redis: OutboxRedisClient, limiterKey: string, maxMs: number): Promise<number> {
  return (await redis.eval(CAP_PAUSE, 1, limiterKey, PAUSE_MARK, maxMs)) as number;
}

/**
 * A duration for messages, in whole seconds (at least 1).
 * @example
 * seconds(900_000); // '900 s'
 */
export function seconds(ms: number): string {
  return `${Math.max(1, Math.round(ms / 1000))} s`;
}
