import { tmpdir } from 'node:os';
import type { Dispatcher } from 'undici';
import { EmlApiError } from '../shared/eml-api-error.js';

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
   * with custom TLS...). The client does not close a dispatcher it was given.
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
   * `limit`; `false` or `0` turns retries off. See the README, "Reliability".
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
}

/**
 * Where and when messages are spooled to disk.
 *
 * @example
 * new EmlApiTransport({ apiKey, baseUrl, spool: { threshold: 8 * 1024 * 1024, directory: '/var/tmp' } });
 */
export interface SpoolOptions {
  /**
   * Messages larger than this many bytes are spooled to a file.
   * @default 2097152 (2 MiB)
   */
  threshold?: number;
  /**
   * Folder for the temporary files.
   * @default os.tmpdir()
   */
  directory?: string;
}

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
   * The whole call, queueing, retries and backoff included.
   * @default 120000
   */
  total?: number;
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
  retries: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  maxMessagesPerSecond: number | undefined;
  spool: Required<SpoolOptions>;
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

const DEFAULT_MAX_CONNECTIONS = 5;

/** Throws an `ECONFIG` error naming the option. */
export function configError(option: string, problem: string): EmlApiError {
  return new EmlApiError('ECONFIG', `Invalid option ${option}: ${problem}`, { permanent: true });
}

/**
 * Validates client options and splits off the API key.
 *
 * @throws {EmlApiError} `ECONFIG` naming the first bad option.
 */
export function resolveClientOptions(options: unknown): { apiKey: string; resolved: ResolvedClientOptions } {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least apiKey and baseUrl', {
      permanent: true,
    });
  }
  const o = options as Record<string, unknown>;
  const apiKey = validateApiKey(o.apiKey);
  const allowInsecureHttp = optionalBoolean(o.allowInsecureHttp, 'allowInsecureHttp') ?? false;
  const baseUrl = validateBaseUrl(o.baseUrl, allowInsecureHttp);
  const maxConnections = o.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  if (typeof maxConnections !== 'number' || !Number.isInteger(maxConnections) || maxConnections < 1) {
    throw configError('maxConnections', `expected a whole number of at least 1, got ${describe(maxConnections)}`);
  }
  const dispatcher = o.dispatcher;
  if (
    dispatcher !== undefined &&
    (typeof dispatcher !== 'object' || dispatcher === null || typeof (dispatcher as Dispatcher).dispatch !== 'function')
  ) {
    throw configError('dispatcher', 'expected an undici Dispatcher (an object with a dispatch() method)');
  }
  const userAgent = o.userAgent;
  if (userAgent !== undefined && (typeof userAgent !== 'string' || !/^[\x20-\x7e]+$/.test(userAgent))) {
    throw configError('userAgent', 'expected a non-empty string of printable ASCII characters');
  }
  const retries = resolveRetries(o.retries);
  const timeouts = resolveTimeouts(o.timeouts);
  const maxMessagesPerSecond = o.maxMessagesPerSecond;
  if (
    maxMessagesPerSecond !== undefined &&
    (typeof maxMessagesPerSecond !== 'number' || !Number.isFinite(maxMessagesPerSecond) || maxMessagesPerSecond <= 0)
  ) {
    throw configError('maxMessagesPerSecond', `expected a positive number, got ${describe(maxMessagesPerSecond)}`);
  }
  const spool = resolveSpool(o.spool);
  return {
    apiKey,
    resolved: {
      spool,
      retries,
      timeouts,
      maxMessagesPerSecond: maxMessagesPerSecond as number | undefined,
      baseUrl,
      basePath: baseUrl.pathname.replace(/\/+$/, ''),
      maxConnections,
      dispatcher: dispatcher as Dispatcher | undefined,
      allowInsecureHttp,
      userAgent: userAgent as string | undefined,
    },
  };
}

function resolveRetries(value: unknown): Required<RetryOptions> {
  if (value === undefined) return { ...DEFAULT_RETRIES };
  if (value === false) return { ...DEFAULT_RETRIES, limit: 0 };
  if (typeof value === 'number') return { ...DEFAULT_RETRIES, limit: wholeNumber(value, 'retries', 0, 100) };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError(
      'retries',
      `expected a number, false or { limit, baseDelay, maxDelay, retryAmbiguous }, got ${describe(value)}`,
    );
  }
  const r = value as Record<string, unknown>;
  for (const key of Object.keys(r)) {
    if (!['limit', 'baseDelay', 'maxDelay', 'retryAmbiguous'].includes(key))
      throw configError(`retries.${key}`, 'unknown option');
  }
  const resolved = {
    limit: r.limit === undefined ? DEFAULT_RETRIES.limit : wholeNumber(r.limit, 'retries.limit', 0, 100),
    baseDelay:
      r.baseDelay === undefined
        ? DEFAULT_RETRIES.baseDelay
        : wholeNumber(r.baseDelay, 'retries.baseDelay', 0, 3_600_000),
    maxDelay:
      r.maxDelay === undefined ? DEFAULT_RETRIES.maxDelay : wholeNumber(r.maxDelay, 'retries.maxDelay', 0, 3_600_000),
    retryAmbiguous: optionalBoolean(r.retryAmbiguous, 'retries.retryAmbiguous') ?? DEFAULT_RETRIES.retryAmbiguous,
  };
  if (resolved.maxDelay < resolved.baseDelay)
    throw configError('retries.maxDelay', 'must not be smaller than retries.baseDelay');
  return resolved;
}

function resolveSpool(value: unknown): Required<SpoolOptions> {
  const defaults = { threshold: 2 * 1024 * 1024, directory: tmpdir() };
  if (value === undefined) return defaults;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError('spool', `expected { threshold, directory }, got ${describe(value)}`);
  }
  const v = value as Record<string, unknown>;
  for (const key of Object.keys(v)) {
    if (!['threshold', 'directory'].includes(key)) throw configError(`spool.${key}`, 'unknown option');
  }
  const threshold =
    v.threshold === undefined ? defaults.threshold : wholeNumber(v.threshold, 'spool.threshold', 0, 2 ** 40);
  if (v.directory !== undefined && (typeof v.directory !== 'string' || v.directory.length === 0)) {
    throw configError('spool.directory', 'expected a folder path');
  }
  return { threshold, directory: (v.directory as string | undefined) ?? defaults.directory };
}

function resolveTimeouts(value: unknown): Required<TimeoutOptions> {
  if (value === undefined) return { ...DEFAULT_TIMEOUTS };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError('timeouts', `expected { connect, response, total } in milliseconds, got ${describe(value)}`);
  }
  const t = value as Record<string, unknown>;
  for (const key of Object.keys(t)) {
    if (!['connect', 'response', 'total'].includes(key)) throw configError(`timeouts.${key}`, 'unknown option');
  }
  const pick = (key: 'connect' | 'response' | 'total') =>
    t[key] === undefined ? DEFAULT_TIMEOUTS[key] : wholeNumber(t[key], `timeouts.${key}`, 1, 24 * 3_600_000);
  return { connect: pick('connect'), response: pick('response'), total: pick('total') };
}

function wholeNumber(value: unknown, name: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw configError(name, `expected a whole number from ${min} to ${max}, got ${describe(value)}`);
  }
  return value;
}

function validateApiKey(value: unknown): string {
  if (value === undefined || value === null || value === '') {
    throw configError('apiKey', 'it is missing; pass the API key generated in the dashboard');
  }
  if (typeof value !== 'string') {
    throw configError('apiKey', `expected a string, got ${describe(value)}`);
  }
  // Header injection guard: CR, LF, spaces or non-ASCII in a header value are a
  // configuration mistake (often a pasted newline), never a valid key.
  const bad = value.search(/[^\x21-\x7e]/);
  if (bad !== -1) {
    const ch = value.charCodeAt(bad);
    const what =
      ch === 10
        ? 'a line feed'
        : ch === 13
          ? 'a carriage return'
          : ch === 32
            ? 'a space'
            : `character U+${ch.toString(16).toUpperCase().padStart(4, '0')}`;
    throw configError('apiKey', `it contains ${what} at position ${bad}; a key is visible ASCII only`);
  }
  return value;
}

function validateBaseUrl(value: unknown, allowInsecureHttp: boolean): URL {
  if (value === undefined || value === null || value === '') {
    throw configError('baseUrl', "it is missing; pass the service's base URL, e.g. https://api.example.com");
  }
  let url: URL;
  if (value instanceof URL) {
    url = new URL(value.href);
  } else if (typeof value === 'string') {
    try {
      url = new URL(value);
    } catch {
      // The value is not echoed: a swapped apiKey/baseUrl pair would print the key.
      throw configError('baseUrl', 'it is not an absolute URL; expected e.g. https://api.example.com');
    }
  } else {
    throw configError('baseUrl', `expected a string or URL, got ${describe(value)}`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw configError(
      'baseUrl',
      `protocol ${url.protocol} is not supported; use https:// (or http:// for a local emulator)`,
    );
  }
  if (url.username || url.password) {
    throw configError('baseUrl', 'it must not contain credentials; the API key goes in the apiKey option');
  }
  if (url.search || url.hash) {
    throw configError('baseUrl', 'it must not contain a query string or fragment');
  }
  if (url.protocol === 'http:' && !allowInsecureHttp && !isLoopbackHost(url.hostname)) {
    throw configError(
      'baseUrl',
      `http:// to the non-loopback host ${url.hostname} would send the API key in clear text; use https://, or set allowInsecureHttp: true for a trusted network`,
    );
  }
  return url;
}

/**
 * Whether a URL hostname is a loopback address: `localhost`, 127.0.0.0/8 or `::1`.
 */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (host === '[::1]' || host === '::1') return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function optionalBoolean(value: unknown, name: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'boolean') throw configError(name, `expected true or false, got ${describe(value)}`);
  return value;
}

/** Short description of a value for error messages (never the value of a secret). */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.slice(0, 50))}`;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return typeof value === 'object' ? 'an object' : typeof value;
}
