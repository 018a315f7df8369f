import type { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import { isIP } from 'node:net';
import { hostname as osHostname } from 'node:os';
import type { SpoolSettings } from '../body/spool-options.js';
import type { EmlApiClientOptions } from '../client/client-options.js';
import { resolveClientOptions } from '../client/resolve-client-options.js';
import { emlBodyLength } from '../body/eml-upload-body.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { MAX_ADDRESS_LENGTH } from '../protocol/address-rules.js';
import { resolveLogger, type EmlApiLogger } from '../shared/logger.js';
import { ClientAddressList, LOOPBACK_NETWORKS } from './client-address-list.js';
import type { SmtpRelayOptions, SmtpRelayTlsOptions } from './relay-options.js';
import { RelayUsers, type SmtpRelayUser } from './relay-users.js';

/** The service limit the default `maxMessageSize` is computed from: the emulator's 50 MiB per request. */
const DEFAULT_REQUEST_LIMIT = 50 * 1024 * 1024;

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
  tls: SmtpRelayTlsOptions | undefined;
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
  'idleTimeout',
  'maxClientsPerAddress',
  'stressIdleTimeout',
  'dataTimeout',
  'minDataRate',
  'authFailureDelay',
  'maxAuthFailuresPerAddress',
  'authFailureWindow',
  'tlsHandshakeTimeout',
  'proxyProtocol',
  'hostname',
  'maxKeys',
  'logger',
] as const;

/**
 * The largest message whose `{"mail":"<base64>"}` upload fits in a request of `limit` bytes.
 * @example maxUploadableSize(50 * 1024 * 1024) // 39321591
 */
export function maxUploadableSize(limit: number): number {
  return 3 * Math.floor((limit - emlBodyLength(0)) / 4);
}

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
export function resolveRelayOptions(options: SmtpRelayOptions): {
  apiKey: string | undefined;
  settings: RelaySettings;
} {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least baseUrl', { permanent: true });
  }
  const o = options as unknown as Record<string, unknown>;
  const clientOptions: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(o)) {
    if (!(RELAY_KEYS as readonly string[]).includes(key)) clientOptions[key] = value;
  }
  clientOptions.spool = { threshold: DEFAULT_SPOOL_THRESHOLD, ...(o.spool as object | undefined) };
  const apiKey = o.apiKey === undefined || o.apiKey === null || o.apiKey === '' ? undefined : o.apiKey;
  // Checks the client options (and the key's form) as every client the relay makes will.
  const { resolved } = resolveClientOptions({ ...clientOptions, apiKey: apiKey ?? 'relay-option-check' });
  const tls = o.tls === undefined ? undefined : checkTls(o.tls);
  const maxRecipients = whole(o.maxRecipients ?? 100, 'maxRecipients', 1, 100_000);
  const settings: RelaySettings = {
    port: whole(o.port ?? 2525, 'port', 0, 65535),
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
    maxMessageSize: whole(o.maxMessageSize ?? defaultSize(maxRecipients), 'maxMessageSize', 1, 2 ** 40),
    maxRecipients,
    maxClients: whole(o.maxClients ?? 100, 'maxClients', 1, 100_000),
    idleTimeout: whole(o.idleTimeout ?? 300_000, 'idleTimeout', 1, 24 * 3_600_000),
    maxClientsPerAddress: whole(o.maxClientsPerAddress ?? 50, 'maxClientsPerAddress', 1, 100_000),
    stressIdleTimeout: whole(o.stressIdleTimeout ?? 10_000, 'stressIdleTimeout', 1, 24 * 3_600_000),
    dataTimeout: whole(o.dataTimeout ?? 600_000, 'dataTimeout', 1, 7 * 24 * 3_600_000),
    minDataRate: whole(o.minDataRate ?? 500, 'minDataRate', 1, 2 ** 40),
    authFailureDelay: whole(o.authFailureDelay ?? 2_000, 'authFailureDelay', 0, 60_000),
    maxAuthFailuresPerAddress: whole(o.maxAuthFailuresPerAddress ?? 10, 'maxAuthFailuresPerAddress', 1, 100_000),
    authFailureWindow: whole(o.authFailureWindow ?? 600_000, 'authFailureWindow', 1_000, 24 * 3_600_000),
    tlsHandshakeTimeout: whole(o.tlsHandshakeTimeout ?? 10_000, 'tlsHandshakeTimeout', 1, 600_000),
    proxyProtocol: checkProxies(o.proxyProtocol),
    hostname: text(o.hostname ?? osHostname(), 'hostname'),
    maxKeys: whole(o.maxKeys ?? 100, 'maxKeys', 1, 100_000),
    logger: resolveLogger(o.logger as boolean | EmlApiLogger | undefined),
    queue: checkQueue(o.queue, apiKey),
    clientOptions: clientOptions as Omit<EmlApiClientOptions, 'apiKey'>,
    spool: resolved.spool,
  };
  return { apiKey: apiKey as string | undefined, settings };
}

function checkTls(value: unknown): SmtpRelayTlsOptions {
  const tls = value as Partial<SmtpRelayTlsOptions> | null;
  const pem = (v: unknown) => typeof v === 'string' || Buffer.isBuffer(v);
  if (typeof tls !== 'object' || tls === null || !pem(tls.cert) || !pem(tls.key)) {
    throw config('tls', 'expected { cert, key } (PEM strings or Buffers), and optionally implicit: true');
  }
  if (tls.implicit !== undefined && typeof tls.implicit !== 'boolean')
    throw config('tls.implicit', 'expected a boolean');
  return tls as SmtpRelayTlsOptions;
}

/** The default `maxMessageSize` for the emulator's request limit, or an error asking for one. */
function defaultSize(maxRecipients: number): number {
  const size = defaultMaxMessageSize(DEFAULT_REQUEST_LIMIT, maxRecipients);
  if (size !== undefined) return size;
  throw config(
    'maxMessageSize',
    `with maxRecipients ${maxRecipients}, the Bcc field the relay may add leaves no room for a default: set maxMessageSize to fit your service's request limit`,
  );
}

function whole(value: unknown, name: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw config(
      name,
      `expected a whole number from ${min} to ${max}, got ${typeof value === 'number' ? value : typeof value}`,
    );
  }
  return value;
}

function text(value: unknown, name: string): string {
  if (typeof value !== 'string' || !/^[\x21-\x7e]+$/.test(value)) throw config(name, 'expected a non-empty string');
  return value;
}

function config(option: string, problem: string): EmlApiError {
  return new EmlApiError('ECONFIG', `Invalid option ${option}: ${problem}`, { permanent: true });
}

/**
 * The `queue` option: an object (a queue transport, or its options, checked
 * when the outbox is made). The outbox sends later with its workers' key, so
 * the relay must hold a key of its own: clients' AUTH keys are never stored.
 */
function checkQueue(value: unknown, apiKey: unknown): EmlApiQueueTransport | EmlApiQueueTransportOptions | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null) {
    throw config(
      'queue',
      'expected an EmlApiQueueTransport or its options, e.g. { connection: process.env.REDIS_URL }',
    );
  }
  if (apiKey === undefined) {
    throw config(
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
    throw config(
      'proxyProtocol',
      'expected an array of IP addresses, the proxies that send a PROXY header (e.g. ["127.0.0.1"]), not networks',
    );
  }
  return Object.freeze(value.map((entry: string) => entry.trim()));
}

/** The `users` option: they send with the relay's own key, so there must be one. */
function checkUsers(value: unknown, apiKey: unknown): RelayUsers | undefined {
  if (value === undefined) return undefined;
  const users = new RelayUsers(value as SmtpRelayUser[]);
  if (apiKey === undefined) {
    throw config('users', "the relay's users send with its own apiKey: set apiKey (or EML_API_KEY) too");
  }
  return users;
}
