import type { Dispatcher } from 'undici';
import { type SpoolOptions, defaultSpoolSettings, type SpoolSettings } from '../body/message-spool.js';
import {
  type EmlApiLogger,
  booleanOption,
  configError,
  describe,
  objectOption,
  loggerOption,
} from '../shared/options-kit.js';
import {
  bool,
  checkOptions,
  custom,
  nested,
  type OptionSchema,
  required,
  shareOf,
  whole,
} from '../shared/option-schema.js';
import {
  DEFAULT_RETRY,
  DEFAULT_TIMEOUTS,
  type RateLimitOptions,
  type RetryOptions,
  type TimeoutOptions,
} from '../http/requester.js';
import { invalidApiKeyAt } from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * Options of {@link EmlApiClient} and of the transport; a bad one throws `ECONFIG` naming it.
 * @example
 * const options: EmlApiClientOptions = {
 *   apiKey: process.env.EML_API_KEY!,
 *   baseUrl: 'https://api.mail.example.com',
 *   maxConnections: 10,
 * };
 */
export interface EmlApiClientOptions {
  /** API key for the `X-API-KEY` header, visible ASCII only; never in errors, logs or `util.inspect` output. */
  apiKey: string;
  /** Base URL of the service, without `/v1`; `http://` only to loopback hosts unless {@link allowInsecureHttp}. */
  baseUrl: string | URL;
  /** Requests in flight at once (the rest queue), and the size of the client's own connection pool. @default 5 */
  maxConnections?: number;
  /**
   * An undici dispatcher (`ProxyAgent`, an `Agent` with custom TLS...), which the client leaves open.
   * @default a keep-alive `Agent` with `maxConnections` connections
   */
  dispatcher?: Dispatcher;
  /** Allow `http://` to a non-loopback host, sending the API key in clear text. @default false */
  allowInsecureHttp?: boolean;
  /** `User-Agent` of every request. @default `nodemailer-eml-api/<version>` */
  userAgent?: string;
  /**
   * Retries of failures the service surely did not process (refused or reset connection, DNS, 429, 503), with backoff
   * and jitter, honouring `Retry-After`; `attempts` counts the first try, `false` tries once.
   * @default { attempts: 4, delay: 500, maxDelay: 30000, jitter: 0.5, retryAmbiguous: false }
   */
  retry?: false | RetryOptions;
  /** Time limits in ms, each failing with `ETIMEDOUT` naming it. @default { connect: 10000, response: 30000, total: 120000 } */
  timeouts?: TimeoutOptions;
  /** Above `threshold` bytes a message is built into a temporary file, so memory stays flat. @default { threshold: 2097152, directory: os.tmpdir() } */
  spool?: SpoolOptions;
  /** At most `max` sends started per `duration` ms, spaced evenly; membership calls are not paced. @default undefined */
  rateLimit?: RateLimitOptions;
  /** Where to log: `true` for the console, or a logger object (pino, bunyan...); never the API key. @default false */
  logger?: boolean | EmlApiLogger;
}

/**
 * What a client runs with ({@link EmlApiClient.settings}): its options validated, with their defaults, read-only.
 * @example
 * const client = new EmlApiClient({ apiKey, baseUrl: 'https://api.mail.example.com', retry: { attempts: 5 } });
 * client.settings.retry; // { attempts: 5, delay: 500, maxDelay: 30000, jitter: 0.5, retryAmbiguous: false }
 * client.settings.baseUrl.host; // 'api.mail.example.com'
 */
export interface EmlApiClientSettings {
  /** The service's base URL (a copy). */
  readonly baseUrl: URL;
  /** Requests in flight at once. @default 5 */
  readonly maxConnections: number;
  /** Whether `http://` is allowed to a non-loopback host. @default false */
  readonly allowInsecureHttp: boolean;
  /** The `User-Agent` option. @default undefined (requests carry `nodemailer-eml-api/<version>`) */
  readonly userAgent: string | undefined;
  /**
   * The retry settings (`retry: false` is `attempts: 1`).
   * @default { attempts: 4, delay: 500, maxDelay: 30000, jitter: 0.5, retryAmbiguous: false }
   */
  readonly retry: Readonly<Required<RetryOptions>>;
  /** Time limits in ms. @default { connect: 10000, response: 30000, total: 120000 } */
  readonly timeouts: Readonly<Required<TimeoutOptions>>;
  /** At most `max` sends started per `duration` ms. @default undefined (no pacing) */
  readonly rateLimit: Readonly<RateLimitOptions> | undefined;
  /** Where and above what size messages are spooled to disk. @default { threshold: 2097152, directory: os.tmpdir() } */
  readonly spool: Readonly<Required<SpoolOptions>>;
}

/** Options after validation, as the package uses them inside; the API key is kept apart. */
export interface ResolvedClientOptions {
  baseUrl: URL;
  basePath: string;
  maxConnections: number;
  dispatcher: Dispatcher | undefined;
  allowInsecureHttp: boolean;
  userAgent: string | undefined;
  retry: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  rateLimit: RateLimitOptions | undefined;
  spool: SpoolSettings;
  logger: EmlApiLogger;
}

const RETRY_SCHEMA = {
  attempts: whole(1, 101, DEFAULT_RETRY.attempts),
  delay: whole(0, 3_600_000, DEFAULT_RETRY.delay),
  maxDelay: whole(0, 3_600_000, DEFAULT_RETRY.maxDelay),
  jitter: shareOf(DEFAULT_RETRY.jitter),
  retryAmbiguous: bool(DEFAULT_RETRY.retryAmbiguous),
} as const satisfies OptionSchema<RetryOptions>;

const RATE_SCHEMA = {
  max: required(1, 1_000_000_000),
  duration: required(1, 24 * 3_600_000),
} as const satisfies OptionSchema<RateLimitOptions>;

/** A `rateLimit` rule (the same shape in every component). */
export const rateLimitRule = nested(
  RATE_SCHEMA,
  '{ max, duration } (max sends per duration ms)',
  (): RateLimitOptions | undefined => undefined,
);

export const TIMEOUT_SCHEMA = {
  connect: whole(1, 24 * 3_600_000, DEFAULT_TIMEOUTS.connect),
  response: whole(1, 24 * 3_600_000, DEFAULT_TIMEOUTS.response),
  total: whole(1, 24 * 3_600_000, DEFAULT_TIMEOUTS.total),
} as const satisfies OptionSchema<TimeoutOptions>;

const retryObject = nested(
  RETRY_SCHEMA,
  'false or { attempts, delay, maxDelay, jitter, retryAmbiguous }',
  () => ({ ...DEFAULT_RETRY }),
  (r) => {
    if (r.maxDelay < r.delay) throw configError('retry.maxDelay', 'must not be smaller than retry.delay');
    return r;
  },
);

export const CLIENT_SCHEMA = {
  apiKey: custom('visible ASCII', validateApiKey),
  baseUrl: custom('http(s) URL', (v, _, o) =>
    validateBaseUrl(v, booleanOption(o.allowInsecureHttp, 'allowInsecureHttp', false)),
  ),
  maxConnections: whole(1, 100_000, 5),
  dispatcher: custom('undici Dispatcher', (v) => {
    if (v !== undefined && (typeof v !== 'object' || v === null || typeof (v as Dispatcher).dispatch !== 'function')) {
      throw configError('dispatcher', 'expected an undici Dispatcher (an object with a dispatch() method)');
    }
    return v as Dispatcher | undefined;
  }),
  allowInsecureHttp: bool(false),
  userAgent: custom('printable ASCII', (v) => {
    if (v !== undefined && (typeof v !== 'string' || !/^[\x20-\x7e]+$/.test(v))) {
      throw configError('userAgent', 'expected a non-empty string of printable ASCII characters');
    }
    return v as string | undefined;
  }),
  retry: custom(retryObject.range, (v, option, o): Required<RetryOptions> =>
    v === false ? { ...DEFAULT_RETRY, attempts: 1 } : (retryObject.check(v, option, o, {}) as Required<RetryOptions>),
  ),
  timeouts: nested(TIMEOUT_SCHEMA, '{ connect, response, total } in milliseconds', () => ({ ...DEFAULT_TIMEOUTS })),
  spool: custom('{ threshold, directory }', resolveSpool),
  rateLimit: rateLimitRule,
  logger: custom('true, false, logger', loggerOption),
} as const satisfies OptionSchema<EmlApiClientOptions>;

/** Validates client options and splits off the API key. @throws {EmlApiError} `ECONFIG` naming the first bad option */
export function resolveClientOptions(options: unknown): { apiKey: string; resolved: ResolvedClientOptions } {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least apiKey and baseUrl', {
      permanent: true,
    });
  }
  const { apiKey, ...o } = checkOptions(options as Record<string, unknown>, CLIENT_SCHEMA);
  return { apiKey, resolved: { ...o, basePath: o.baseUrl.pathname.replace(/\/+$/, '') } };
}

const SPOOL_SCHEMA = {
  threshold: whole(0, 2 ** 40),
  directory: custom('folder path', (v) => {
    if (v !== undefined && (typeof v !== 'string' || v.length === 0)) {
      throw configError('spool.directory', 'expected a folder path');
    }
    return v as string | undefined;
  }),
} as const satisfies OptionSchema<SpoolOptions>;

export function resolveSpool(value: unknown): SpoolSettings {
  const defaults = defaultSpoolSettings();
  if (value === undefined) return defaults;
  const { threshold, directory } = checkOptions(
    objectOption(value, 'spool', '{ threshold, directory }'),
    SPOOL_SCHEMA,
    'spool.',
  );
  return { threshold: threshold ?? defaults.threshold, directory: directory ?? defaults.directory };
}

function validateApiKey(value: unknown): string {
  if (value === undefined || value === null || value === '') {
    throw configError('apiKey', 'it is missing; pass the API key generated in the dashboard');
  }
  if (typeof value !== 'string') {
    throw configError('apiKey', `expected a string, got ${describe(value)}`);
  }
  const bad = invalidApiKeyAt(value);
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
      // Not echoed: a swapped apiKey/baseUrl pair would print the key.
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
  if (/\/v1\/?$/i.test(url.pathname)) {
    // Joined as given, every request would go to /v1/v1/... and get a 404.
    const root = `${url.origin}${url.pathname.replace(/\/v1\/?$/i, '')}`;
    throw configError(
      'baseUrl',
      `it ends in /v1, which the client adds itself ({baseUrl}/v1/send/eml); drop it: ${root}`,
    );
  }
  if (url.protocol === 'http:' && !allowInsecureHttp && !isLoopbackHost(url.hostname)) {
    throw configError(
      'baseUrl',
      `http:// to the non-loopback host ${url.hostname} would send the API key in clear text; use https://, or set allowInsecureHttp: true for a trusted network`,
    );
  }
  return url;
}

/** Whether a URL hostname is loopback: `localhost`, 127.0.0.0/8 or `::1`. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase();
  // Not *.localhost: those names go through DNS, which may answer anything.
  if (host === 'localhost') return true;
  if (host === '[::1]' || host === '::1') return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** The public view of resolved options: frozen copies, without the dispatcher, the logger and the base path. */
export function clientSettingsView(resolved: ResolvedClientOptions): EmlApiClientSettings {
  return Object.freeze({
    baseUrl: new URL(resolved.baseUrl.href),
    maxConnections: resolved.maxConnections,
    allowInsecureHttp: resolved.allowInsecureHttp,
    userAgent: resolved.userAgent,
    retry: Object.freeze({ ...resolved.retry }),
    timeouts: Object.freeze({ ...resolved.timeouts }),
    rateLimit: resolved.rateLimit === undefined ? undefined : Object.freeze({ ...resolved.rateLimit }),
    spool: Object.freeze({ ...resolved.spool }),
  });
}
