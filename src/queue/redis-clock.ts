import type { OutboxRedisClient } from './redis-connection.js';
import { queueRedis } from './outbox-queue.js';

/**
 * Redis's clock, for every time the outbox writes on a job and compares with
 * one (`possiblyAcceptedAt`, `resendUntil`, `lastError.at`). Workers run on
 * many machines: a time written with one machine's clock and read with
 * another's is off by their skew, and a worker 2 hours behind sent a message
 * again after the service's idempotency window had passed. Redis is the one
 * clock every worker shares (the sweeper reads it too).
 *
 * A `TIME` per job would be a round trip per send. A worker instead reads
 * `TIME` once a minute and, in between, adds the time elapsed on its
 * monotonic clock (`performance.now()`, which no NTP step or manual change
 * of the wall clock moves): off by half the round trip of that `TIME` at most,
 * plus the drift of a quartz over a minute (microseconds), where wall
 * clocks differ by hours.
 */

/**
 * How often a {@link RedisClock} reads `TIME` again, in ms (1 minute).
 * @example
 * const clock = new RedisClock(() => redisTime(redis), { refreshEvery: REDIS_CLOCK_REFRESH });
 */
export const REDIS_CLOCK_REFRESH = 60_000;

/**
 * Redis's time, read once a minute and carried forward on the monotonic clock.
 *
 * @example
 * const clock = new RedisClock(() => redisTime(redis));
 * await clock.sync(); // at start
 * const now = await clock.now(); // no round trip within the minute
 */
export class RedisClock {
  readonly #read: () => Promise<number>;
  readonly #refreshEvery: number;
  readonly #monotonic: () => number;
  /** Redis's time at one instant of the monotonic clock. */
  #sample: { redis: number; at: number } | undefined;
  #syncing: Promise<void> | undefined;

  /**
   * @param read reads Redis's time, in ms ({@link redisTime})
   * @param options `refreshEvery` @default REDIS_CLOCK_REFRESH; `monotonic` @default performance.now
   */
  constructor(
    read: () => Promise<number>,
    { refreshEvery = REDIS_CLOCK_REFRESH, monotonic = () => performance.now() }: ClockOptions = {},
  ) {
    this.#read = read;
    this.#refreshEvery = refreshEvery;
    this.#monotonic = monotonic;
  }

  /**
   * Reads Redis's time now (one round trip); calls made meanwhile share it.
   * @throws Redis's errors
   */
  sync(): Promise<void> {
    this.#syncing ??= (async () => {
      const before = this.#monotonic();
      const redis = await this.#read();
      const after = this.#monotonic();
      // Redis read its clock somewhere within the round trip: its middle is off by half of it at most.
      this.#sample = { redis, at: (before + after) / 2 };
    })().finally(() => (this.#syncing = undefined));
    return this.#syncing;
  }

  /**
   * Redis's time now, in ms since the epoch: a round trip once a minute, none
   * otherwise. When Redis cannot be read, the last reading carried forward
   * (exact as long as the monotonic clock is).
   * @throws Redis's errors, when it was never read
   */
  async now(): Promise<number> {
    const stale = this.#sample === undefined || this.#monotonic() - this.#sample.at >= this.#refreshEvery;
    if (stale) {
      try {
        await this.sync();
      } catch (err) {
        if (this.#sample === undefined) throw err;
      }
    }
    const sample = this.#sample!;
    return Math.round(sample.redis + (this.#monotonic() - sample.at));
  }
}

/**
 * Options of {@link RedisClock}.
 * @example
 * const options: ClockOptions = { refreshEvery: 10_000 };
 */
export interface ClockOptions {
  /** How often `TIME` is read again, in ms. */
  refreshEvery?: number;
  /** The monotonic clock, in ms. */
  monotonic?: () => number;
}

/**
 * Redis's clock (`TIME`), in ms since the epoch.
 * @example
 * const now = await redisTime(redis);
 */
export async function redisTime(redis: OutboxRedisClient): Promise<number> {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/**
 * Redis's clock, read through a BullMQ queue's own connection (BullMQ 5's
 * `queue.client`, BullMQ 6's `queue.getBackend().client`).
 * @example
 * const now = await queueRedisTime(admin.queue);
 */
export async function queueRedisTime(queue: object): Promise<number> {
  return redisTime(await queueRedis(queue));
}
