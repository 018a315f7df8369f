import type { Dispatcher } from 'undici';
import type { SpoolOptions, SpoolSettings } from '../body/spool-options.js';
import type { RateLimitOptions, RetryOptions, TimeoutOptions } from '../http/requester-options.js';
import type { EmlApiLogger } from '../shared/logger.js';

/**
 * Options of {@link EmlApiClient} (and, through {@link EmlApiTransportOptions},
 * of the transport). They are validated when the client is constructed; a bad
 * option throws an {@link EmlApiError} with code `ECONFIG` naming the option.
 *
 * @example
 * const options: EmlApiClientOptions = {
 *   apiKey: process.env.EML_API_KEY!,
 *   baseUrl: 'https://api.mail.example.com',
 *   maxConnections: 10,
 * };
 */
export interface EmlApiClientOptions {
  /**
   * API key sent in the `X-API-KEY` header. Visible ASCII only. It never
   * appears in errors, logs or `util.inspect` output.
   */
  apiKey: string;
  /**
   * Base URL of the service; paths are joined under it
   * (`{baseUrl}/v1/send/eml`). A trailing slash is fine. `http://` is only
   * accepted for loopback hosts unless {@link allowInsecureHttp} is set.
   */
  baseUrl: string | URL;
  /**
   * Requests in flight at once; further sends wait in a queue. Also the size
   * of the keep-alive connection pool when the client creates its own.
   * @default 5
   */
  maxConnections?: number;
  /**
   * An undici dispatcher to send requests through (a `ProxyAgent`, an `Agent`
   * with custom TLS or interceptors...). The client does not close a
   * dispatcher it was given. Its requests are retried as the client's own
   * are: a failure before the request's last byte left is a safe retry (the
   * client watches its own upload, not what the dispatcher reports).
   * @default a keep-alive `Agent` with `maxConnections` connections
   */
  dispatcher?: Dispatcher;
  /**
   * Allow `http://` to a non-loopback host. The API key then crosses the
   * network in clear text: only for trusted private networks.
   * @default false
   */
  allowInsecureHttp?: boolean;
  /**
   * `User-Agent` header of every request.
   * @default `nodemailer-eml-api/<version>`
   */
  userAgent?: string;
  /**
   * Retries of failures the service surely did not process (connection refused,
   * connection reset before the request was written, DNS failure, 429, 503),
   * with exponential backoff and jitter, honouring `Retry-After`. `attempts`
   * counts every try, the first included; `false` tries once. See
   * docs/transport-and-client.md, "Reliability", and docs/options.md.
   * @default { attempts: 4, delay: 500, maxDelay: 30000, jitter: 0.5, retryAmbiguous: false }
   * @example
   * new EmlApiClient({ apiKey, baseUrl, retry: { attempts: 6, delay: 200 } });
   */
  retry?: false | RetryOptions;
  /**
   * Time limits in milliseconds. Each failure is an `ETIMEDOUT` error naming the limit.
   * @default { connect: 10000, response: 30000, total: 120000 }
   */
  timeouts?: TimeoutOptions;
  /**
   * Large messages are written to a temporary file while they are built and
   * uploaded from it (Base64 and JSON framing streamed, retries re-read the
   * file), so memory stays flat whatever the attachment sizes. The file is
   * removed when the send ends, whatever the outcome.
   * @default { threshold: 2097152 (2 MiB), directory: os.tmpdir() }
   */
  spool?: SpoolOptions;
  /**
   * Sends started at most: `max` per `duration` ms, spaced evenly (sends wait
   * in the queue to keep the pace). Membership calls are not paced.
   * @default undefined (no pacing)
   * @example
   * new EmlApiClient({ apiKey, baseUrl, rateLimit: { max: 20, duration: 1000 } }); // 20 a second
   */
  rateLimit?: RateLimitOptions;
  /**
   * Where the client (and the transport built on it) logs: `true` for the
   * console, or a logger object (pino, bunyan, console...). Warnings include
   * a 2xx answer that was not the service's. The API key is never logged.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
}

/** Options after validation. The API key is kept apart from them. */
export interface ResolvedClientOptions {
  baseUrl: URL;
  /** Path of the base URL without a trailing slash ('' at the root); request paths are appended to it. */
  basePath: string;
  maxConnections: number;
  dispatcher: Dispatcher | undefined;
  allowInsecureHttp: boolean;
  userAgent: string | undefined;
  retry: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  rateLimit: RateLimitOptions | undefined;
  spool: SpoolSettings;
  /** The logger, silent when none was given. */
  logger: EmlApiLogger;
}
