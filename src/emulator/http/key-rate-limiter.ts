import { configError, refuseUnknownKeys } from '../../shared/options-kit.js';
/**
 * A per-API-key rate limit of the emulator.
 *
 * @example
 * await startEmulator({ rateLimit: { requestsPerSecond: 10, burst: 20 } });
 */
export interface EmulatorRateLimit {
  /** Requests each key may make per second, on average. */
  requestsPerSecond: number;
  /**
   * Requests a key may make at once after being idle.
   * @default requestsPerSecond
   */
  burst?: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Every field of {@link EmulatorRateLimit}. */
const RATE_LIMIT_FIELDS = ['requestsPerSecond', 'burst'] as const satisfies readonly (keyof EmulatorRateLimit)[];

/**
 * Token buckets per API key, on the real (monotonic) clock: the emulator's
 * `now` option is for mail-domain time and may be frozen in tests.
 */
export class KeyRateLimiter {
  readonly #rate: number;
  readonly #burst: number;
  readonly #buckets = new Map<string, Bucket>();

  /** @throws {EmlApiError} `ECONFIG` naming a bad field */
  constructor(limit: EmulatorRateLimit) {
    if (typeof limit !== 'object' || limit === null)
      throw configError('rateLimit', 'expected { requestsPerSecond, burst }');
    refuseUnknownKeys(limit, RATE_LIMIT_FIELDS, 'rateLimit.', {
      max: 'the emulator limits requests with { requestsPerSecond, burst } (the service’s token bucket)',
      duration: 'the emulator limits requests with { requestsPerSecond, burst } (the service’s token bucket)',
    });
    if (!(
      typeof limit.requestsPerSecond === 'number' &&
      limit.requestsPerSecond > 0 &&
      Number.isFinite(limit.requestsPerSecond)
    )) {
      throw configError('rateLimit.requestsPerSecond', 'expected a positive number');
    }
    const burst = limit.burst ?? limit.requestsPerSecond;
    if (!(typeof burst === 'number' && burst >= 1 && Number.isFinite(burst)))
      throw configError('rateLimit.burst', 'expected a number of at least 1');
    this.#rate = limit.requestsPerSecond;
    this.#burst = burst;
  }

  /**
   * Takes one request from a key's bucket.
   * @returns 0 when allowed, else the seconds to wait (at least 1) for `Retry-After`
   */
  take(keyLabel: string, nowMs: number = performance.now()): number {
    const bucket = this.#buckets.get(keyLabel) ?? { tokens: this.#burst, at: nowMs };
    bucket.tokens = Math.min(this.#burst, bucket.tokens + ((nowMs - bucket.at) / 1000) * this.#rate);
    bucket.at = nowMs;
    this.#buckets.set(keyLabel, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.#rate));
  }
}
