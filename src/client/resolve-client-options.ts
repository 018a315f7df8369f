import type { Dispatcher } from 'undici';
import { defaultSpoolSettings, type SpoolSettings } from '../body/spool-options.js';
import {
  DEFAULT_RETRIES,
  DEFAULT_TIMEOUTS,
  type RetryOptions,
  type TimeoutOptions,
} from '../http/requester-options.js';
import { invalidApiKeyAt } from '../protocol/api-key-rule.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveLogger, type EmlApiLogger } from '../shared/logger.js';
import type { EmlApiClientOptions, EmlApiClientSettings, ResolvedClientOptions } from './client-options.js';
import { nearestName } from './nearest-name.js';

const DEFAULT_MAX_CONNECTIONS = 5;

/** Every option of the client (and of the transport, which takes the same and its own). */
export const CLIENT_OPTIONS = [
  'apiKey',
  'baseUrl',
  'maxConnections',
  'dispatcher',
  'allowInsecureHttp',
  'userAgent',
  'retries',
  'timeouts',
  'spool',
  'maxMessagesPerSecond',
  'logger',
] as const satisfies readonly (keyof EmlApiClientOptions)[];

/**
 * A misspelt option would otherwise be ignored in silence (a `timeout` that
 * never applies): refused, naming the nearest valid option.
 */
export function rejectUnknownOptions(given: Record<string, unknown>, known: readonly string[], prefix: string): void {
  for (const key of Object.keys(given)) {
    if (known.includes(key)) continue;
    const nearest = nearestName(key, known);
    throw configError(
      `${prefix}${key.slice(0, 64)}`,
      `unknown option${nearest ? `; did you mean ${prefix}${nearest}?` : ''} (known: ${known.join(', ')})`,
    );
  }
}

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
  rejectUnknownOptions(o, CLIENT_OPTIONS, '');
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
  const logger = resolveLoggerOption(o.logger);
  return {
    apiKey,
    resolved: {
      spool,
      logger,
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

/**
 * The public view of resolved options ({@link EmlApiClient.options}): frozen
 * copies of the plain settings, without the dispatcher, the logger and the
 * base path the requests are built with.
 *
 * @example
 * clientSettingsView(resolveClientOptions({ apiKey, baseUrl }).resolved).maxConnections; // 5
 */
export function clientSettingsView(resolved: ResolvedClientOptions): EmlApiClientSettings {
  return Object.freeze({
    baseUrl: new URL(resolved.baseUrl.href),
    maxConnections: resolved.maxConnections,
    allowInsecureHttp: resolved.allowInsecureHttp,
    userAgent: resolved.userAgent,
    retries: Object.freeze({ ...resolved.retries }),
    timeouts: Object.freeze({ ...resolved.timeouts }),
    maxMessagesPerSecond: resolved.maxMessagesPerSecond,
    spool: Object.freeze({ ...resolved.spool }),
  });
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
  rejectUnknownOptions(r, ['limit', 'baseDelay', 'maxDelay', 'retryAmbiguous'], 'retries.');
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

/** Validates `spool` options and completes them with the defaults. */
export function resolveSpool(value: unknown): SpoolSettings {
  const defaults = defaultSpoolSettings();
  if (value === undefined) return defaults;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError('spool', `expected { threshold, directory }, got ${describe(value)}`);
  }
  const v = value as Record<string, unknown>;
  rejectUnknownOptions(v, ['threshold', 'directory'], 'spool.');
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
  rejectUnknownOptions(t, ['connect', 'response', 'total'], 'timeouts.');
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
  // Only `localhost` itself (connections to it are resolved to loopback addresses only);
  // other *.localhost names go through DNS, which may answer anything.
  if (host === 'localhost') return true;
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

function resolveLoggerOption(value: unknown): EmlApiLogger {
  if (value !== undefined && typeof value !== 'boolean' && (typeof value !== 'object' || value === null)) {
    throw configError('logger', `expected true, false or a logger object (pino, console...), got ${describe(value)}`);
  }
  return resolveLogger(value as boolean | EmlApiLogger | undefined);
}
