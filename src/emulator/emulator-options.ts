import { invalidApiKeyAt, API_SCOPES, type ApiPlan, type ApiScope, MAX_REQUEST_SIZE } from '../protocol/api-types.js';
import { configError, describe, refuseUnknownKeys, wholeNumber } from '../shared/options-kit.js';
import { checkOptions, custom, whole, type OptionSchema } from '../shared/option-schema.js';
import { FaultInjector, type EmulatorFaults } from './http/fault-injector.js';
import { KeyRateLimiter } from './http/api-router.js';
import { DEFAULT_MAX_MESSAGES } from './state/mail-store.js';
import type { EmulatorSmtpOptions } from './smtp-ingest.js';
import type { EmlApiLogger } from '../shared/options-kit.js';

/**
 * The account keys belong to unless told otherwise, the ready key `emu.apiKey` included.
 * @example await startEmulator({ apiKeys: [{ key: 'k-rotated', scopes: ['sender'], account: DEFAULT_EMULATOR_ACCOUNT }] });
 */
export const DEFAULT_EMULATOR_ACCOUNT = 'default';

export type EmulatorApiKey = NonNullable<EmulatorOptions['apiKeys']>[number];

/**
 * Options of {@link startEmulator}.
 * @example const emu = await startEmulator({ apiKeys: [{ key: 'k-send', scopes: ['sender'] }], groups: ['newsletter'] });
 */
export interface EmulatorOptions {
  /** TCP port; 0 picks a free one (`emu.port`, `emu.url`). @default 0 */
  port?: number;
  /**
   * Interface to listen on; `0.0.0.0` or `::` exposes the API and public pages to the network, while the web inbox
   * still answers only `allowedHosts`. @default '127.0.0.1'
   */
  host?: string;
  /**
   * Host names besides localhost and loopback addresses under which the web inbox, its feed and the groups page answer;
   * any other Host gets 403, against DNS rebinding (a page on another site renaming itself to 127.0.0.1).
   * @default []
   * @example await startEmulator({ host: '0.0.0.0', allowedHosts: ['mail-emulator.internal'] });
   */
  allowedHosts?: string[];
  /**
   * Base URL of the emulator as mail recipients reach it, for links in delivered mail (unsubscribe, hosted images); its
   * host may also open the web inbox.
   * @default the URL it listens on (`emu.url`)
   * @example await startEmulator({ host: '0.0.0.0', port: 8025, publicUrl: 'http://emulator.lan:8025' });
   */
  publicUrl?: string;
  /** API keys besides the ready key `emu.apiKey` (all scopes, plan 'plus'). @default [] */
  apiKeys?: {
    /** The key's value, which clients send in `X-API-KEY`; visible ASCII. */
    key: string;
    /** Scopes the key holds. */
    scopes: ApiScope[];
    /** Account plan of the key. @default 'free' */
    plan?: ApiPlan;
    /**
     * The account the key belongs to. Idempotency keys are scoped to the account, as on the service: a send repeated
     * under another key of the account (a key rotated while workers retry) is answered from the first.
     * @default 'default' (the account of the ready key `emu.apiKey`)
     * @example await startEmulator({ apiKeys: [{ key: 'k-old', scopes: ['sender'], account: 'shop' }, { key: 'k-new', scopes: ['sender'], account: 'shop' }] });
     */
    account?: string;
  }[];
  /** Groups that exist from the start: the service creates groups out of band, never through the API. @default [] */
  groups?: string[];
  /**
   * Largest request body accepted, in bytes (a request limit: a message travels Base64-encoded, 4/3 of its size);
   * larger bodies get 413 `payload_too_large`.
   * @default 52428800 (50 MiB, the service's)
   * @example await startEmulator({ maxRequestSize: 1024 * 1024 }); // to test the 413 path
   */
  maxRequestSize?: number;
  /** Clock for timestamps, image expiry and idempotency windows. @default () => new Date() */
  now?: () => Date;
  /** Called with unexpected internal errors (answered with 500); bad input never lands here. @default logs to stderr */
  onInternalError?: (err: unknown) => void;
  /** Seeded faults injected into API requests (503, 429, resets, latency); `emu.setFaults()` changes them. @default undefined */
  faults?: EmulatorFaults;
  /** Per-key rate limit; requests over it get `429 rate_limited` with `Retry-After`. @default undefined (no limit) */
  rateLimit?: {
    /** Requests each key may make per second, on average. */
    requestsPerSecond: number;
    /**
     * Requests a key may make at once after being idle.
     * @default requestsPerSecond
     */
    burst?: number;
  };
  /**
   * Most messages the inbox keeps; past it the oldest are dropped (counted in `/api/v1/info`), so memory stays flat.
   * @default 10000
   * @example await startEmulator({ maxMessages: 500 });
   */
  maxMessages?: number;
  /**
   * A login (HTTP Basic) for the web inbox, its feed, the groups page and the inspection API, asked of every client:
   * beyond loopback, anyone reaching the port could otherwise read the mail by sending a loopback Host. The service API
   * keeps its keys; unsubscribe pages and hosted images stay public.
   * @default undefined (no login)
   * @example await startEmulator({ host: '0.0.0.0', inboxLogin: { username: 'team', password: process.env.INBOX_PASSWORD! } });
   */
  inboxLogin?: {
    username: string;
    password: string;
  };
  /**
   * Takes mail over SMTP too, into the same inbox (as Mailpit's port 1025), at `emu.smtp`; loopback clients send
   * without AUTH. Needs the optional peer `smtp-server`. @default undefined (no SMTP)
   * @example
   * const emu = await startEmulator({ smtp: { port: 0 } });
   * nodemailer.createTransport({ host: emu.smtp!.host, port: emu.smtp!.port });
   */
  smtp?: {
    /** TCP port; 0 picks a free one (`emu.smtp.port`). @default 0 */
    port?: number;
    /** Interface to listen on. @default the emulator's `host` */
    host?: string;
    /**
     * Clients that may send without AUTH (`172.16.0.0/12` for a docker-compose network); others AUTH with any user name
     * and the emulator's API key. @default ['127.0.0.0/8', '::1/128'] (loopback)
     */
    allowFrom?: string[];
    /** Where refused (`warn`) and accepted (`info`) messages are logged. @default nothing is logged */
    logger?: EmlApiLogger;
  };
  /**
   * A directory keeping the messages (read marks and tags included), groups, unsubscribe links, hosted images and the
   * ready API key across restarts; created with mode 0700, since it holds the key and every message. One emulator each.
   * @default undefined (everything is lost when the emulator stops)
   * @example const emu = await startEmulator({ dataDir: '.emulator-data' }); // emu.apiKey is the same next time
   */
  dataDir?: string;
}

export type EmulatorInboxLogin = NonNullable<EmulatorOptions['inboxLogin']>;

export interface ResolvedEmulatorOptions {
  port: number;
  host: string;
  /** Lower-cased. */
  allowedHosts: string[];
  /** Without a trailing slash. */
  publicUrl: string | undefined;
  apiKeys: Required<EmulatorApiKey>[];
  groups: string[];
  maxRequestSize: number;
  now: () => Date;
  onInternalError: (err: unknown) => void;
  faults: FaultInjector | undefined;
  rateLimiter: KeyRateLimiter | undefined;
  maxMessages: number;
  inboxLogin: EmulatorInboxLogin | undefined;
  smtp: EmulatorSmtpOptions | undefined;
  dataDir: string | undefined;
}

/** What {@link resolveEmulatorOptions} checks, in order, and the range column of docs/emulator.md's table. */
export const EMULATOR_SCHEMA = {
  port: whole(0, 65535, 0),
  host: custom('host name or IP address', (value) => {
    const v = value ?? '127.0.0.1';
    if (typeof v !== 'string' || v.length === 0) throw configError('host', 'expected a host name or IP address');
    return v;
  }),
  allowedHosts: custom('host names', (value) => {
    const v = value ?? [];
    if (!Array.isArray(v) || v.some((h) => typeof h !== 'string' || !HOST_NAME.test(h))) {
      throw configError('allowedHosts', 'expected an array of host names (e.g. "mail-emulator.internal")');
    }
    return (v as string[]).map((h) => h.toLowerCase());
  }),
  publicUrl: custom('http(s) URL', (v) => (v === undefined ? undefined : publicUrlOption(v))),
  apiKeys: custom('{ key, scopes, plan, account }[]', (v) => {
    if (v !== undefined && !Array.isArray(v)) {
      throw configError('apiKeys', `expected an array of { key, scopes, plan, account }, got ${describe(v)}`);
    }
    return ((v ?? []) as unknown[]).map(apiKeyOption);
  }),
  groups: custom('group ids', (value) => {
    const v = value ?? [];
    if (!Array.isArray(v) || v.some((g) => typeof g !== 'string' || g.length === 0)) {
      throw configError('groups', 'expected an array of non-empty group ids');
    }
    return [...(v as string[])];
  }),
  maxRequestSize: whole(1, 2 ** 40, MAX_REQUEST_SIZE),
  now: custom('function', (value) => {
    const v = value ?? (() => new Date());
    if (typeof v !== 'function') throw configError('now', 'expected a function returning a Date');
    return v as () => Date;
  }),
  onInternalError: custom('function', (value, option) => {
    const v = value ?? ((err: unknown) => console.error('[eml-api emulator] internal error:', err));
    if (typeof v !== 'function') throw configError(option, 'expected a function taking the error');
    return v as (err: unknown) => void;
  }),
  faults: custom('EmulatorFaults', (v) => (v === undefined ? undefined : new FaultInjector(v as EmulatorFaults))),
  rateLimit: custom('{ requestsPerSecond, burst }', (v) =>
    v === undefined ? undefined : new KeyRateLimiter(v as NonNullable<EmulatorOptions['rateLimit']>),
  ),
  maxMessages: whole(1, 10_000_000, DEFAULT_MAX_MESSAGES),
  inboxLogin: custom('{ username, password }', (v) => resolveLogin(v as EmulatorInboxLogin | undefined)),
  smtp: custom('{ port, host, allowFrom, logger }', (v) => resolveSmtp(v as EmulatorSmtpOptions | undefined)),
  dataDir: custom('directory path', (v) => {
    if (v !== undefined && (typeof v !== 'string' || v === ''))
      throw configError('dataDir', 'expected the path of a directory');
    return v as string | undefined;
  }),
} as const satisfies OptionSchema<EmulatorOptions>;

const HOST_NAME = /^[A-Za-z0-9.-]{1,253}$|^\[[0-9A-Fa-f:.]{2,45}\]$/;

const API_KEY_FIELDS = ['key', 'scopes', 'plan', 'account'] as const satisfies readonly (keyof EmulatorApiKey)[];

/** @throws {EmlApiError} `ECONFIG` naming the bad option */
export function resolveEmulatorOptions(options: EmulatorOptions = {}): ResolvedEmulatorOptions {
  if (typeof options !== 'object' || options === null) {
    throw configError('startEmulator', `expected an object of options, got ${describe(options)}`);
  }
  const { rateLimit, ...checked } = checkOptions(options as Record<string, unknown>, EMULATOR_SCHEMA);
  return { ...checked, rateLimiter: rateLimit };
}

function publicUrlOption(value: unknown): string {
  let url: URL | undefined;
  try {
    url = new URL(String(value));
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.search || url.hash || url.username) {
    throw configError('publicUrl', 'expected an http(s) URL such as "http://emulator.lan:8025"');
  }
  return url.href.replace(/\/+$/, '');
}

function apiKeyOption(value: unknown, i: number): Required<EmulatorApiKey> {
  const where = `apiKeys[${i}]`;
  if (typeof value !== 'object' || value === null) throw configError(`${where}`, `expected { key, scopes, plan }`);
  refuseUnknownKeys(value, API_KEY_FIELDS, `${where}.`);
  const entry = value as EmulatorApiKey;
  if (typeof entry.key !== 'string' || invalidApiKeyAt(entry.key) !== -1) {
    throw configError(`${where}.key`, `expected a non-empty string of visible ASCII characters`);
  }
  if (!Array.isArray(entry.scopes) || entry.scopes.some((s) => !API_SCOPES.includes(s))) {
    throw configError(`${where}.scopes`, `expected an array of ${API_SCOPES.map((s) => `'${s}'`).join(', ')}`);
  }
  const plan = entry.plan ?? 'free';
  if (plan !== 'free' && plan !== 'plus') throw configError(`${where}.plan`, `expected 'free' or 'plus'`);
  const account = entry.account ?? DEFAULT_EMULATOR_ACCOUNT;
  if (typeof account !== 'string' || !/^[\x21-\x7e]{1,100}$/.test(account)) {
    throw configError(`${where}.account`, `expected 1 to 100 visible ASCII characters, got ${JSON.stringify(account)}`);
  }
  return { key: entry.key, scopes: [...entry.scopes], plan, account };
}

function resolveSmtp(smtp: EmulatorSmtpOptions | undefined): EmulatorSmtpOptions | undefined {
  if (smtp === undefined) return undefined;
  if (typeof smtp !== 'object' || smtp === null || Array.isArray(smtp)) {
    throw configError('smtp', 'expected { port, host, allowFrom, logger }');
  }
  refuseUnknownKeys(smtp, ['port', 'host', 'allowFrom', 'logger'], 'smtp.');
  const port = wholeNumber(smtp.port, 'smtp.port', 0, 65535, 0);
  if (smtp.host !== undefined && (typeof smtp.host !== 'string' || smtp.host === '')) {
    throw configError('smtp.host', 'expected a host name or IP address');
  }
  if (
    smtp.allowFrom !== undefined &&
    (!Array.isArray(smtp.allowFrom) || smtp.allowFrom.some((a) => typeof a !== 'string'))
  ) {
    throw configError('smtp.allowFrom', 'expected an array of addresses or networks, e.g. ["172.16.0.0/12"]');
  }
  const logger = smtp.logger;
  if (logger !== undefined && (typeof logger !== 'object' || logger === null || typeof logger.warn !== 'function')) {
    throw configError('smtp.logger', 'expected { debug, info, warn, error }');
  }
  return { ...smtp, port };
}

function resolveLogin(login: EmulatorInboxLogin | undefined): EmulatorInboxLogin | undefined {
  if (login === undefined) return undefined;
  if (typeof login !== 'object' || login === null) throw configError('inboxLogin', 'expected { username, password }');
  refuseUnknownKeys(login, ['username', 'password'], 'inboxLogin.');
  if (typeof login.username !== 'string' || !/^[\x21-\x39\x3b-\x7e]{1,100}$/.test(login.username)) {
    throw configError('inboxLogin.username', 'expected 1 to 100 visible ASCII characters without ":"');
  }
  if (typeof login.password !== 'string' || !/^[\x20-\x7e]{8,200}$/.test(login.password)) {
    throw configError('inboxLogin.password', 'expected 8 to 200 printable ASCII characters');
  }
  return { username: login.username, password: login.password };
}
