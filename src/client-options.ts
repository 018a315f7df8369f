import type { Dispatcher } from 'undici';
import { EmlApiError } from './errors.js';

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
}

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
  return {
    apiKey,
    resolved: {
      baseUrl,
      basePath: baseUrl.pathname.replace(/\/+$/, ''),
      maxConnections,
      dispatcher: dispatcher as Dispatcher | undefined,
      allowInsecureHttp,
      userAgent: userAgent as string | undefined,
    },
  };
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
