import type { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import { isIP } from 'node:net';
import { hostname as osHostname } from 'node:os';
import type { SpoolSettings } from '../body/spool-options.js';
import type { EmlApiClientOptions } from '../client/client-options.js';
import { CLIENT_OPTIONS, CLIENT_RENAMED, resolveClientOptions } from '../client/resolve-client-options.js';
import { maxUploadableSize } from '../body/eml-upload-body.js';
import { MAX_REQUEST_SIZE } from '../protocol/service-limits.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import {
  booleanOption,
  configError,
  loggerOption,
  objectOption,
  refuseUnknownKeys,
  wholeNumber,
  type RenamedOptions,
} from '../shared/options-kit.js';
import { MAX_ADDRESS_LENGTH } from '../protocol/address-rules.js';
import type { EmlApiLogger } from '../shared/logger.js';
import { ClientAddressList, LOOPBACK_NETWORKS } from './client-address-list.js';
import type { EmlApiRelayOptions, EmlApiRelayTimeouts, EmlApiRelayTlsOptions } from './relay-options.js';
import { RelayUsers, type EmlApiRelayUser } from './relay-users.js';

/** The relay spools past 512 KiB unless told otherwise: up to `maxClients` messages may arrive at once. */
const DEFAULT_SPOOL_THRESHOLD = 512 * 1024;

/** Relay options after validation. The API key is not among them. */
export interface RelaySettings {
  port: number;
  host: string;
  allowUnauthenticatedFrom: ClientAddressList;
  trustedNetworks: ClientAddressList;
  /** The relay's own SMTP users, who send with its key. */
  users: RelayUsers | undefined;
  tls: EmlApiRelayTlsOptions | undefined;
  maxMessageSize: number;
  maxRecipients: number;
  maxClients: number;
  idleTimeout: number;
  maxClientsPerAddress: number;
  stressIdleTimeout: number;
  dataTimeout: number;
  minDataRate: number;
  authFailureDelay: number;
  maxAuthFailuresPerAddress: number;
  authFailureWindow: number;
  tlsHandshakeTimeout: number;
  /** Addresses of the proxies that speak the PROXY protocol (v1) to the relay; empty: none. */
  proxyProtocol: readonly string[];
  hostname: string;
  maxKeys: number;
  logger: EmlApiLogger;
  /** The outbox to store messages in, when store-and-forward is on. */
  queue: EmlApiQueueTransport | EmlApiQueueTransportOptions | undefined;
  /** Options of every client the relay makes, without a key. */
  clientOptions: Omit<EmlApiClientOptions, 'apiKey'>;
  spool: SpoolSettings;
}

/** The relay's own options, besides the client's. */
const RELAY_KEYS = [
  'port',
  'host',
  'apiKey',
  'allowUnauthenticatedFrom',
  'trustedNetworks',
  'users',
  'queue',
  'tls',
  'maxMessageSize',
  'maxRecipients',
  'maxClients',
  'timeouts',
  'maxClientsPerAddress',
  'minDataRate',
  'authFailureDelay',
  'maxAuthFailuresPerAddress',
  'authFailureWindow',
  'proxyProtocol',
  'hostname',
  'maxKeys',
  'logger',
  'http',
  'metrics',
] as const satisfies readonly (keyof EmlApiRelayOptions)[];

/** Every option of the relay: its own and the client's. */
const RELAY_OPTIONS: readonly string[] = [...new Set<string>([...RELAY_KEYS, ...CLIENT_OPTIONS])];

/** The relay's options renamed before 1.0, refused with their new name. */
const RELAY_RENAMED: RenamedOptions = {
  ...CLIENT_RENAMED,
  idleTimeout: 'renamed to timeouts: { idle }',
  stressIdleTimeout: 'renamed to timeouts: { stressIdle }',
  dataTimeout: 'renamed to timeouts: { data }',
  tlsHandshakeTimeout: 'renamed to timeouts: { tlsHandshake }',
};

/** The SMTP side's time limits; the rest of `timeouts` is the client's. */
const SMTP_TIMEOUTS = [
  'idle',
  'stressIdle',
  'data',
  'tlsHandshake',
] as const satisfies readonly (keyof EmlApiRelayTimeouts)[];
const CLIENT_TIMEOUTS = ['connect', 'response', 'total'] as const satisfies readonly (keyof EmlApiRelayTimeouts)[];

export { maxUploadableSize };

/**
 * Bytes the `Bcc` field the relay writes can grow a message by, per recipient: a separator, a fold and the
 * longest address in UTF-8 (up to 3 bytes per UTF-16 unit). An address already in a Bcc field grows by less.
 */
const BCC_BYTES_PER_RECIPIENT = 4 + 3 * MAX_ADDRESS_LENGTH;

/**
 * The default `maxMessageSize` (advertised as `SIZE`) for a service that takes requests of up to
 * `requestLimit` bytes: the largest message whose upload still fits once the relay has written its
 * `maxRecipients` recipients into a `Bcc` field, so a message the relay accepted by `SIZE` is not refused
 * by the service for the field the relay added.
 * @returns at least half of {@link maxUploadableSize}; undefined when `maxRecipients` would leave less
 * @example defaultMaxMessageSize(50 * 1024 * 1024, 100) // 39244983
 */
export function defaultMaxMessageSize(requestLimit: number, maxRecipients: number): number | undefined {
  const uploadable = maxUploadableSize(requestLimit);
  const size = uploadable - (maxRecipients * BCC_BYTES_PER_RECIPIENT + 'Bcc:\r\n\r\n'.length);
  return size >= uploadable / 2 ? size : undefined;
}

/**
 * Validates the relay's options and splits off its API key.
 *
 * @throws {EmlApiError} `ECONFIG` naming the first bad option
 */
export function resolveRelayOptions(options: EmlApiRelayOptions): {
  apiKey: string | undefined;
  settings: RelaySettings;
} {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least baseUrl', { permanent: true });
  }
  const o = options as unknown as Record<string, unknown>;
  refuseUnknownKeys(o, RELAY_OPTIONS, '', RELAY_RENAMED);
  const clientOptions: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(o)) {
    if (!(RELAY_KEYS as readonly string[]).includes(key)) clientOptions[key] = value;
  }
  const timeouts =
    o.timeouts === undefined
      ? {}
      : objectOption(
          o.timeouts,
          'timeouts',
          '{ idle, stressIdle, data, tlsHandshake, connect, response, total } in milliseconds',
        );
  refuseUnknownKeys(timeouts, [...SMTP_TIMEOUTS, ...CLIENT_TIMEOUTS], 'timeouts.');
  const clientTimeouts = Object.fromEntries(
    CLIENT_TIMEOUTS.filter((key) => timeouts[key] !== undefined).map((key) => [key, timeouts[key]]),
  );
  if (Object.keys(clientTimeouts).length > 0) clientOptions.timeouts = clientTimeouts;
  clientOptions.spool = { threshold: DEFAULT_SPOOL_THRESHOLD, ...(o.spool as object | undefined) };
  const apiKey = o.apiKey === undefined || o.apiKey === null || o.apiKey === '' ? undefined : o.apiKey;
  // Checks the client options (and the key's form) as every client the relay makes will.
  const { resolved } = resolveClientOptions({ ...clientOptions, apiKey: apiKey ?? 'relay-option-check' });
  const tls = o.tls === undefined ? undefined : checkTls(o.tls);
  const maxRecipients = wholeNumber(o.maxRecipients, 'maxRecipients', 1, 100_000, 100);
  const settings: RelaySettings = {
    port: wholeNumber(o.port, 'port', 0, 65535, 2525),
    host: text(o.host ?? '127.0.0.1', 'host'),
    allowUnauthenticatedFrom: new ClientAddressList(
      (o.allowUnauthenticatedFrom as string[] | undefined) ?? LOOPBACK_NETWORKS,
      'allowUnauthenticatedFrom',
    ),
    trustedNetworks: new ClientAddressList(
      (o.trustedNetworks as string[] | undefined) ?? LOOPBACK_NETWORKS,
      'trustedNetworks',
    ),
    users: checkUsers(o.users, apiKey),
    tls,
    maxMessageSize: wholeNumber(o.maxMessageSize ?? defaultSize(maxRecipients), 'maxMessageSize', 1, 2 ** 40),
    maxRecipients,
    maxClients: wholeNumber(o.maxClients, 'maxClients', 1, 100_000, 100),
    idleTimeout: wholeNumber(timeouts.idle, 'timeouts.idle', 1, 24 * 3_600_000, 300_000),
    maxClientsPerAddress: wholeNumber(o.maxClientsPerAddress, 'maxClientsPerAddress', 1, 100_000, 50),
    stressIdleTimeout: wholeNumber(timeouts.stressIdle, 'timeouts.stressIdle', 1, 24 * 3_600_000, 10_000),
    dataTimeout: wholeNumber(timeouts.data, 'timeouts.data', 1, 7 * 24 * 3_600_000, 600_000),
    minDataRate: wholeNumber(o.minDataRate, 'minDataRate', 1, 2 ** 40, 500),
    authFailureDelay: wholeNumber(o.authFailureDelay, 'authFailureDelay', 0, 60_000, 2_000),
    maxAuthFailuresPerAddress: wholeNumber(o.maxAuthFailuresPerAddress, 'maxAuthFailuresPerAddress', 1, 100_000, 10),
    authFailureWindow: wholeNumber(o.authFailureWindow, 'authFailureWindow', 1_000, 24 * 3_600_000, 600_000),
    tlsHandshakeTimeout: wholeNumber(timeouts.tlsHandshake, 'timeouts.tlsHandshake', 1, 600_000, 10_000),
    proxyProtocol: checkProxies(o.proxyProtocol),
    hostname: text(o.hostname ?? osHostname(), 'hostname'),
    maxKeys: wholeNumber(o.maxKeys, 'maxKeys', 1, 100_000, 100),
    logger: loggerOption(o.logger),
    queue: checkQueue(o.queue, apiKey),
    clientOptions: clientOptions as Omit<EmlApiClientOptions, 'apiKey'>,
    spool: resolved.spool,
  };
  return { apiKey: apiKey as string | undefined, settings };
}

function checkTls(value: unknown): EmlApiRelayTlsOptions {
  const tls = value as Partial<EmlApiRelayTlsOptions> | null;
  const pem = (v: unknown) => typeof v === 'string' || Buffer.isBuffer(v);
  if (typeof tls !== 'object' || tls === null || !pem(tls.cert) || !pem(tls.key)) {
    throw configError('tls', 'expected { cert, key } (PEM strings or Buffers), and optionally implicit: true');
  }
  booleanOption(tls.implicit, 'tls.implicit');
  return tls as EmlApiRelayTlsOptions;
}

/** The default `maxMessageSize` for the emulator's request limit, or an error asking for one. */
function defaultSize(maxRecipients: number): number {
  const size = defaultMaxMessageSize(MAX_REQUEST_SIZE, maxRecipients);
  if (size !== undefined) return size;
  throw configError(
    'maxMessageSize',
    `with maxRecipients ${maxRecipients}, the Bcc field the relay may add leaves no room for a default: set maxMessageSize to fit your service's request limit`,
  );
}

function text(value: unknown, name: string): string {
  if (typeof value !== 'string' || !/^[\x21-\x7e]+$/.test(value))
    throw configError(name, 'expected a non-empty string');
  return value;
}

/**
 * The `queue` option: an object (a queue transport, or its options, checked
 * when the outbox is made). The outbox sends later with its workers' key, so
 * the relay must hold a key of its own: clients' AUTH keys are never stored.
 */
function checkQueue(value: unknown, apiKey: unknown): EmlApiQueueTransport | EmlApiQueueTransportOptions | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null) {
    throw configError(
      'queue',
      'expected an EmlApiQueueTransport or its options, e.g. { connection: process.env.REDIS_URL }',
    );
  }
  if (apiKey === undefined) {
    throw configError(
      'queue',
      "store-and-forward needs the relay's own apiKey (the outbox's workers send with theirs; client AUTH keys are never stored in Redis)",
    );
  }
  return value as EmlApiQueueTransport | EmlApiQueueTransportOptions;
}

/**
 * The `proxyProtocol` option: the proxies' own addresses, each one IP address
 * (smtp-server matches a peer against them exactly; a network would let any
 * host in it claim any client address).
 */
function checkProxies(value: unknown): readonly string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((entry) => typeof entry !== 'string' || isIP(entry.trim()) === 0)) {
    throw configError(
      'proxyProtocol',
      'expected an array of IP addresses, the proxies that send a PROXY header (e.g. ["127.0.0.1"]), not networks',
    );
  }
  return Object.freeze(value.map((entry: string) => entry.trim()));
}

/** The `users` option: they send with the relay's own key, so there must be one. */
function checkUsers(value: unknown, apiKey: unknown): RelayUsers | undefined {
  if (value === undefined) return undefined;
  const users = new RelayUsers(value as EmlApiRelayUser[]);
  if (apiKey === undefined) {
    throw configError('users', "the relay's users send with its own apiKey: set apiKey (or EML_API_KEY) too");
  }
  return users;
}
