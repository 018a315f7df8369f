import type { Dispatcher } from 'undici';
import type { SpoolOptions, SpoolSettings } from '../body/spool-options.js';
import type { RetryOptions, TimeoutOptions } from '../http/requester-options.js';
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
   * with exponential backoff and jitter, honouring `Retry-After`. A number sets
   * `limit`; `false` or `0` turns retries off. See docs/transport-and-client.md, "Reliability".
   * @default { limit: 3, baseDelay: 500, maxDelay: 30000, retryAmbiguous: false }
   */
  retries?: number | false | RetryOptions;
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
   * Sends started per second at most (sends wait in the queue to keep the pace).
   * Membership calls are not paced.
   * @default undefined (no pacing)
   */
  maxMessagesPerSecond?: number;
  /**
   * Where the client (and the transport built on it) logs: `true` for the
   * console, or a logger object (pino, bunyan, console...). Warnings include
   * a 2xx answer that was not the service's. The API key is never logged.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
}

/**
 * What a client runs with, its options validated and completed with their
 * defaults: the read-only view {@link EmlApiClient.options} returns. Neither
 * the API key nor the `dispatcher` and `logger` objects are among them.
 *
 * @example
 * const client = new EmlApiClient({ apiKey, baseUrl: 'https://api.mail.example.com', retries: 5 });
 * client.options.retries; // { limit: 5, baseDelay: 500, maxDelay: 30000, retryAmbiguous: false }
 * client.options.baseUrl.host; // 'api.mail.example.com'
 */
export interface EmlApiClientSettings {
  /** The service's base URL (a copy: changing it changes nothing). */
  readonly baseUrl: URL;
  /**
   * Requests in flight at once.
   * @default 5
   */
  readonly maxConnections: number;
  /**
   * Whether `http://` is allowed to a non-loopback host.
   * @default false
   */
  readonly allowInsecureHttp: boolean;
  /**
   * The `User-Agent` given in the options.
   * @default undefined (requests carry `nodemailer-eml-api/<version>`)
   */
  readonly userAgent: string | undefined;
  /**
   * Retries, every field filled in.
   * @default { limit: 3, baseDelay: 500, maxDelay: 30000, retryAmbiguous: false }
   */
  readonly retries: Readonly<Required<RetryOptions>>;
  /**
   * Time limits in ms, every field filled in.
   * @default { connect: 10000, response: 30000, total: 120000 }
   */
  readonly timeouts: Readonly<Required<TimeoutOptions>>;
  /**
   * Sends started per second at most.
   * @default undefined (no pacing)
   */
  readonly maxMessagesPerSecond: number | undefined;
  /**
   * Where and above what size messages are spooled to disk, every field filled in.
   * @default { threshold: 2097152, directory: os.tmpdir() }
   */
  readonly spool: Readonly<Required<SpoolOptions>>;
}

/**
 * Options after validation, as the package uses them inside (the public view
 * is {@link EmlApiClientSettings}). The API key is kept apart from them.
 */
export interface ResolvedClientOptions {
  baseUrl: URL;
  /** Path of the base URL without a trailing slash ('' at the root); request paths are appended to it. */
  basePath: string;
  maxConnections: number;
  dispatcher: Dispatcher | undefined;
  allowInsecureHttp: boolean;
  userAgent: string | undefined;
  retries: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  maxMessagesPerSecond: number | undefined;
  spool: SpoolSettings;
  /** The logger, silent when none was given. */
  logger: EmlApiLogger;
}
