import type { OutboxRedisClient } from './redis-connection.js';
import { queueClient } from './bullmq-internals.js';

/** How often a {@link RedisClock} reads `TIME` again, in ms. */
export const REDIS_CLOCK_REFRESH = 60_000;

/** How far a worker's clock may be off Redis's before it takes no jobs, in ms. */
export const MAX_CLOCK_OFFSET_MS = 60_000;

/** Wall and monotonic clocks drifting apart by this means the machine was suspended; in ms. */
const SUSPEND_MS = 2_000;

/** Every time in ms. */
export interface ClockOptions {
  refreshEvery?: number;
  monotonic?: () => number;
  wall?: () => number;
}

/**
 * Redis's clock, the one every worker shares (machines' clocks can differ by hours). `TIME` is read once a minute and
 * carried forward on the monotonic clock, and read again when the wall clock moved otherwise (a suspended machine).
 */
export class RedisClock {
  readonly #read: () => Promise<number>;
  readonly #refreshEvery: number;
  readonly #monotonic: () => number;
  readonly #wall: () => number;
  /** Redis's time at one monotonic instant, and the wall clock then. */
  #sample: { redis: number; at: number; wall: number } | undefined;
  #syncing: Promise<void> | undefined;

  /** @param options `refreshEvery` @default REDIS_CLOCK_REFRESH; clocks @default performance.now, Date.now */
  constructor(
    read: () => Promise<number>,
    {
      refreshEvery = REDIS_CLOCK_REFRESH,
      monotonic = () => performance.now(),
      wall = () => Date.now(),
    }: ClockOptions = {},
  ) {
    this.#read = read;
    this.#refreshEvery = refreshEvery;
    this.#monotonic = monotonic;
    this.#wall = wall;
  }

  /** Calls made meanwhile share the reading. */
  sync(): Promise<void> {
    this.#syncing ??= (async () => {
      const before = this.#monotonic();
      const redis = await this.#read();
      const after = this.#monotonic();
      // Redis read its clock within the round trip: its middle is off by half of it at most.
      this.#sample = { redis, at: (before + after) / 2, wall: this.#wall() - (after - before) / 2 };
    })().finally(() => (this.#syncing = undefined));
    return this.#syncing;
  }

  /** This machine's clock ahead of Redis's (behind: negative), in ms; undefined before the first reading. */
  offset(): number | undefined {
    const sample = this.#sample;
    if (sample === undefined) return undefined;
    return this.#wall() - (sample.redis + (this.#monotonic() - sample.at));
  }

  /** In ms since the epoch; the last reading carried forward when Redis cannot be read. */
  async now(): Promise<number> {
    const last = this.#sample;
    const since = last === undefined ? 0 : this.#monotonic() - last.at;
    const stale =
      last === undefined || since >= this.#refreshEvery || Math.abs(this.#wall() - last.wall - since) > SUSPEND_MS;
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

  /** BullMQ removes old jobs by the finishing worker's clock: one days ahead would erase mail kept for a person. */
  problem(): string | undefined {
    const off = this.offset();
    if (off === undefined || Math.abs(off) <= MAX_CLOCK_OFFSET_MS) return undefined;
    const by = off > 0 ? `${duration(off)} ahead of` : `${duration(-off)} behind`;
    return (
      `This machine's clock is ${by} Redis's (TIME): BullMQ removes old sent and failed jobs by the clock of the ` +
      'worker that finishes a job, so this worker would erase mail kept for a person, or have its own removed too ' +
      `early. A worker takes no job while its clock is more than ${seconds(MAX_CLOCK_OFFSET_MS)} off Redis's: fix ` +
      "this machine's time (NTP)"
    );
  }
}

/** `TIME`, in ms since the epoch. */
export async function redisTime(redis: OutboxRedisClient): Promise<number> {
  const [secs, micros] = await redis.time();
  return Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
}

export async function queueRedisTime(queue: object): Promise<number> {
  return redisTime(await queueClient(queue));
}

/** In whole seconds (at least 1). */
export function seconds(ms: number): string {
  return `${Math.max(1, Math.round(ms / 1000))} s`;
}

function duration(ms: number): string {
  for (const [unit, size] of [
    ['days', 86_400_000],
    ['hours', 3_600_000],
    ['minutes', 60_000],
  ] as const) {
    if (ms >= 2 * size) return `${(ms / size).toFixed(1)} ${unit}`;
  }
  return seconds(ms);
}
