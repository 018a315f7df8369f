import type { Dispatcher } from 'undici';
import type { EmlApiLogger } from '../shared/logger.js';

/**
 * Retry settings.
 *
 * @example
 * new EmlApiClient({ apiKey, baseUrl, retries: { limit: 5, baseDelay: 200, retryAmbiguous: true } });
 */
export interface RetryOptions {
  /**
   * Retries after the first attempt.
   * @default 3
   */
  limit?: number;
  /**
   * Delay before the first retry, in ms; doubled for each further retry, with jitter.
   * @default 500
   */
  baseDelay?: number;
  /**
   * Longest wait before a retry, in ms. A `Retry-After` longer than this is not waited for: the call fails.
   * @default 30000
   */
  maxDelay?: number;
  /**
   * Also retry failures after which the service may have accepted the request:
   * a timeout or reset after the request was sent, 502 and 504. Safe only with a
   * service that honours `Idempotency-Key` (the emulator does).
   * @default false
   */
  retryAmbiguous?: boolean;
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

/** Default retry settings. */
export const DEFAULT_RETRIES: Readonly<Required<RetryOptions>> = Object.freeze({
  limit: 3,
  baseDelay: 500,
  maxDelay: 30_000,
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
  retries: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  maxMessagesPerSecond: number | undefined;
  /** Where calls log (retries at debug level, warnings of the layers above). */
  logger: EmlApiLogger;
}
