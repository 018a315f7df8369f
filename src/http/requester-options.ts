import type { Dispatcher } from 'undici';
import type { EmlApiLogger } from '../shared/logger.js';

/**
 * When the client tries a call again (the same shape as the outbox's `retry`):
 * `attempts` tries in all, the first included, waiting `delay` after the first
 * failure, doubling up to `maxDelay`, each wait shortened by a random share of
 * up to `jitter`.
 *
 * @example
 * new EmlApiClient({ apiKey, baseUrl, retry: { attempts: 6, delay: 200, retryAmbiguous: true } });
 */
export interface RetryOptions {
  /**
   * Tries in all, the first included (1: no retry).
   * @default 4
   */
  attempts?: number;
  /**
   * Wait after the first failed try, in ms; doubled after each further one.
   * @default 500
   */
  delay?: number;
  /**
   * Longest wait before a retry, in ms. A `Retry-After` longer than this is not waited for: the call fails.
   * @default 30000
   */
  maxDelay?: number;
  /**
   * Share of each wait drawn at random (0 to 1), so that clients that failed
   * together do not retry together.
   * @default 0.5
   */
  jitter?: number;
  /**
   * Also retry failures after which the service may have accepted the request:
   * a timeout or reset after the request was sent, 502 and 504. Safe only with a
   * service that honours `Idempotency-Key` (the emulator does).
   * @default false
   */
  retryAmbiguous?: boolean;
}

/**
 * A rate: at most `max` sends start per `duration` ms (the same shape in the
 * client, the transport, the worker and the relay).
 *
 * @example
 * new EmlApiClient({ apiKey, baseUrl, rateLimit: { max: 20, duration: 1000 } }); // 20 sends a second
 */
export interface RateLimitOptions {
  /** Sends started per window, at least 1. */
  max: number;
  /** The window, in ms. */
  duration: number;
}

/**
 * Time limits in milliseconds.
 *
 * @example
 * new EmlApiClient({ apiKey, baseUrl, timeouts: { connect: 5000, response: 15000, total: 60000 } });
 */
export interface TimeoutOptions {
  /**
   * Establishing a connection (TCP and TLS). Applies to the connections the
   * client opens itself; a `dispatcher` you pass keeps its own setting.
   * @default 10000
   */
  connect?: number;
  /**
   * From sending the request to receiving the response headers, per attempt.
   * @default 30000
   */
  response?: number;
  /**
   * The whole call: waiting for a connection slot, building the message,
   * uploading it, retries and backoff included.
   * @default 120000
   */
  total?: number;
}

/** The client's default retry settings: 4 tries in all. */
export const DEFAULT_RETRY: Readonly<Required<RetryOptions>> = Object.freeze({
  attempts: 4,
  delay: 500,
  maxDelay: 30_000,
  jitter: 0.5,
  retryAmbiguous: false,
});

/** Default time limits. */
export const DEFAULT_TIMEOUTS: Readonly<Required<TimeoutOptions>> = Object.freeze({
  connect: 10_000,
  response: 30_000,
  total: 120_000,
});

/** What the {@link Requester} needs: where to send, how, and how often. */
export interface RequesterSettings {
  /** Origin of the service, e.g. `https://api.example.com`. */
  origin: string;
  /** Path of the base URL without a trailing slash ('' at the root); request paths are appended to it. */
  basePath: string;
  /** Headers of every request (the API key among them). */
  headers: Readonly<Record<string, string>>;
  /** The secret in `headers`, redacted from anything the service echoes back. */
  secret: string;
  maxConnections: number;
  /** A dispatcher the caller owns (left open on close), or undefined to create one. */
  dispatcher: Dispatcher | undefined;
  retry: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  rateLimit: RateLimitOptions | undefined;
  /** Where calls log (retries at debug level, warnings of the layers above). */
  logger: EmlApiLogger;
}
