import type { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import type { SecureContextOptions } from 'node:tls';
import {
  type EmlApiClientOptions,
  CLIENT_SCHEMA,
  TIMEOUT_SCHEMA,
  resolveClientOptions,
} from '../client/client-options.js';
import { checkOptions, custom, nested, passedOn, whole, type OptionSchema } from '../shared/option-schema.js';
import type { TimeoutOptions } from '../http/requester.js';
import {
  type EmlApiLogger,
  booleanOption,
  configError,
  loggerOption,
  objectOption,
  wholeNumber,
} from '../shared/options-kit.js';
import type { MetricsRegistry } from '../observability/metrics.js';
import type { OpsHttpOptions } from '../observability/ops-server.js';
import { isIP } from 'node:net';
import { hostname as osHostname } from 'node:os';
import type { SpoolSettings } from '../body/message-spool.js';
import { maxUploadableSize } from '../body/eml-upload-body.js';
import { MAX_REQUEST_SIZE } from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { MAX_ADDRESS_LENGTH } from '../protocol/message-format.js';
import { ClientAddressList, LOOPBACK_NETWORKS } from './client-address-list.js';
import { RelayUsers, type EmlApiRelayUser } from './relay-users.js';
import { SenderList } from './sender-lists.js';

export type EmlApiRelayTlsOptions = NonNullable<EmlApiRelayOptions['tls']>;

type EmlApiRelayTimeouts = NonNullable<EmlApiRelayOptions['timeouts']>;

/**
 * Options of {@link startEmlApiRelay}: where to listen, the service to relay to, and every option of {@link
 * EmlApiClientOptions} (retry, `maxConnections` to the service, spool...) for the clients it sends with.
 *
 * @example const relay = await startEmlApiRelay({ baseUrl: 'https://api.mail.example.com', port: 2525 });
 */
export interface EmlApiRelayOptions extends Omit<EmlApiClientOptions, 'apiKey' | 'timeouts' | 'spool'> {
  /** TCP port; 0 picks a free one (see `relay.port`). @default 2525 */
  port?: number;
  /** Interface to listen on. Beyond loopback, see `tls` and `allowUnauthenticatedFrom`. @default '127.0.0.1' */
  host?: string;
  /**
   * The relay's own API key. Without it, each SMTP client authenticates with its own key as the password.
   * @default undefined
   */
  apiKey?: string;
  /**
   * Client addresses and networks (`10.0.0.0/8`, `fd00::/8`, `192.0.2.7`) that may send without AUTH, with the
   * relay's `apiKey` (Postfix's `permit_mynetworks`). Ignored without `apiKey`. Behind a sidecar that forwards from
   * loopback, narrow it (e.g. `['127.0.0.1/32']`). `::/0` is every IPv6 client, not the IPv4 ones.
   * @default ['127.0.0.0/8', '::1/128'] (loopback)
   * @example allowUnauthenticatedFrom: ['10.0.0.0/8']
   */
  allowUnauthenticatedFrom?: string[];
  /**
   * Client addresses and networks whose path to the relay is trusted, as Postfix's `mynetworks`: clients there may
   * AUTH on a plain-text connection, and are exempt from the per-address limits (Postfix's
   * `smtpd_client_event_limit_exceptions`). List a proxy or sidecar whose one address stands for many clients.
   * @default ['127.0.0.0/8', '::1/128'] (loopback)
   * @example trustedNetworks: ['127.0.0.1/32', '127.0.0.6/32'] // the machine itself and the sidecar
   */
  trustedNetworks?: string[];
  /**
   * The relay's own SMTP users: a client that AUTHs with one of these user names and its password sends with the
   * relay's `apiKey` (so `apiKey` is needed), as Postfix with Dovecot SASL gives each sender a login. Store hashes
   * (`passwordHash`, from `hashRelayPassword` or `eml-api relay --hash-password`).
   * @default undefined (no users: clients AUTH with an API key, or with the relay's key under `queue`)
   * @example users: [{ username: 'billing', passwordHash: process.env.BILLING_SMTP_HASH! }]
   */
  users?: EmlApiRelayUser[];
  /**
   * The senders of API keys given as AUTH passwords (the relay's own key included), by the login the relay logs for
   * each: `key:` and the first 24 hex digits of the key's SHA-256 (`eml-api relay --key-login` prints it;
   * `--key-senders FILE`).
   * @default undefined
   * @example
   * await startEmlApiRelay({ baseUrl, keySenders: { 'key:3f2a9c0d41b7e6a85c1d2e3f': ['alerts@shop.example'] } });
   */
  keySenders?: Record<string, string[]>;
  /**
   * The senders of the clients on `allowUnauthenticatedFrom`, which send with the relay's key without AUTH
   * (`--allow-senders`), as a relay user's `senders`. @default undefined (any sender)
   * @example allowedSenders: ['cron@host.example', '*@host.example', '<>']
   */
  allowedSenders?: string[];
  /**
   * Store-and-forward through the outbox (`nodemailer-eml-api/queue`): the relay answers `250` once Redis has stored
   * the message, and the outbox's workers (`eml-api worker`, `startOutboxWorker`) send it when the service can take
   * it. A queue transport you made (left open when the relay closes), or its options. Needs `apiKey`; AUTH then
   * accepts only the relay's own key and the `users`.
   * @default undefined (each message is uploaded before the relay answers)
   * @example await startEmlApiRelay({ baseUrl, apiKey, queue: { connection: process.env.REDIS_URL! } });
   */
  queue?: EmlApiQueueTransport | EmlApiQueueTransportOptions;
  /**
   * STARTTLS (or implicit TLS) with this certificate. Without it, clients outside `trustedNetworks` cannot AUTH.
   * @default undefined
   */
  tls?: SecureContextOptions & {
    /** The certificate chain, PEM. */
    cert: string | Buffer;
    /** The private key, PEM. */
    key: string | Buffer;
    /** TLS from the first byte (SMTPS) instead of STARTTLS. @default false */
    implicit?: boolean;
  };
  /**
   * Largest message accepted, in bytes, advertised as `SIZE`. The default leaves room for the relay's `Bcc` field.
   * @default 39244983 (with maxRecipients 100)
   */
  maxMessageSize?: number;
  /** Recipients per message (`452 4.5.3` past it). @default 100 */
  maxRecipients?: number;
  /** SMTP connections at once (`421` past it). @default 100 */
  maxClients?: number;
  /**
   * Time limits, in milliseconds: the SMTP side's and the service's.
   * @default { idle: 300000, stressIdle: 10000, data: 600000, tlsHandshake: 10000, connect: 10000, response: 30000, total: 120000 }
   * @example await startEmlApiRelay({ baseUrl, timeouts: { idle: 60_000, data: 1_800_000 } });
   */
  timeouts?: TimeoutOptions & {
    /** How long a client may stay silent while the relay waits for it (`421` past it). @default 300000 */
    idle?: number;
    /** The idle timeout from 80% of `maxClients` connections on (Postfix's stress mode). @default 10000 */
    stressIdle?: number;
    /** How long a message may take to arrive, from DATA to its final dot (`421 4.4.2` past it). @default 600000 */
    data?: number;
    /** How long an implicit TLS handshake, or a proxy's PROXY header, may take. @default 10000 */
    tlsHandshake?: number;
  };
  /**
   * SMTP connections at once from one client address (`421 4.7.0` past it), so that one client cannot take every
   * slot: Postfix's `smtpd_client_connection_count_limit`. IPv6 clients count per /64; `trustedNetworks` are exempt.
   * @default 50
   * @example maxClientsPerAddress: 10
   */
  maxClientsPerAddress?: number;
  /**
   * The slowest a message may arrive, in bytes a second, after a grace of the idle timeout, `timeouts.idle` (Postfix's
   * `smtpd_min_data_rate`, with its per-request deadline): a client sending a byte per idle period is closed
   * (`421 4.4.2`).
   * @default 500
   * @example minDataRate: 2_000
   */
  minDataRate?: number;
  /**
   * Milliseconds a failed AUTH waits before its reply (Dovecot's `auth_failure_delay`): the connection reads no
   * further command meanwhile, so a guesser gets one try per delay per connection.
   * @default 2000
   * @example authFailureDelay: 5_000
   */
  authFailureDelay?: number;
  /**
   * Failed AUTHs (wrong credentials) one user name may make from one client address within `authFailureWindow`,
   * across connections; past it, its wrong passwords are answered `454 4.7.0` (try again later) instead of `535`,
   * while its right password still gets `235`: a misconfigured sender never locks out a correct one.
   * @default 10
   * @example maxAuthFailures: 5
   */
  maxAuthFailures?: number;
  /**
   * Failed AUTHs a client address may make within `authFailureWindow`, all user names together (the same wrong
   * password again counts once): the ceiling for guessing storms. Past it every AUTH of the address gets `454`.
   * @default 100
   * @example maxAuthFailuresPerAddress: 30
   */
  maxAuthFailuresPerAddress?: number;
  /**
   * The window of `maxAuthFailures` and `maxAuthFailuresPerAddress`, in milliseconds.
   * @default 600000 (10 minutes)
   * @example authFailureWindow: 3_600_000
   */
  authFailureWindow?: number;
  /**
   * The addresses of proxies in front of the relay (HAProxy with `send-proxy`, stunnel with `protocol = proxy`, a
   * load balancer) that open each connection with a PROXY protocol v1 header naming the client: the relay then takes
   * the client's address from the header. Exact addresses, not networks: a listed host can claim any client address.
   * @default [] (no proxy)
   * @example proxyProtocol: ['127.0.0.1'] // HAProxy on this machine, `server relay 127.0.0.1:2525 send-proxy`
   */
  proxyProtocol?: string[];
  /** The name the relay greets with (`220 <name> ESMTP`). @default os.hostname() */
  hostname?: string;
  /**
   * API keys (given as SMTP passwords) whose clients are kept between sessions; the least recently used idle one is
   * closed past it.
   * @default 100
   */
  maxKeys?: number;
  /**
   * Where the relay logs: every accepted message with its id, every refusal, AUTH failures. `true` for the console.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
  /**
   * An HTTP port of the relay's own for `/healthz` (alive: its event loop turns), `/readyz` (it can take mail now:
   * direct with its own key, the service answers and accepts the key; with `queue`, Redis answers with `noeviction`;
   * 503 with the reasons, and from `close()` on) and `/metrics` (Prometheus text format). See docs/operations.md.
   * @default undefined (no port)
   * @example const relay = await startEmlApiRelay({ baseUrl, apiKey, http: { port: 9464, host: '0.0.0.0' } });
   */
  http?: OpsHttpOptions;
  /**
   * Prometheus metrics: `true` for prom-client's default registry, `{ registry }` for yours, `false` for none.
   * @default false (without http), a registry of its own (with http)
   * @example startEmlApiRelay({ baseUrl, apiKey, metrics: { registry } });
   */
  metrics?: boolean | { registry: MetricsRegistry };
  /**
   * Above `threshold` bytes a message arriving is kept in a temporary file, so memory stays flat while up to
   * `maxClients` messages arrive at once. @default { threshold: 524288, directory: os.tmpdir() }
   * @example await startEmlApiRelay({ baseUrl, spool: { directory: '/var/spool/eml-api' } });
   */
  spool?: EmlApiClientOptions['spool'];
}

/** Up to `maxClients` messages may arrive at once. */
const DEFAULT_SPOOL_THRESHOLD = 512 * 1024;

/** Relay options after validation, without the API key. */
export interface RelaySettings {
  port: number;
  host: string;
  allowUnauthenticatedFrom: ClientAddressList;
  trustedNetworks: ClientAddressList;
  users: RelayUsers | undefined;
  keySenders: ReadonlyMap<string, SenderList>;
  allowedSenders: SenderList | undefined;
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
  maxAuthFailures: number;
  maxAuthFailuresPerAddress: number;
  authFailureWindow: number;
  tlsHandshakeTimeout: number;
  proxyProtocol: readonly string[];
  hostname: string;
  maxKeys: number;
  logger: EmlApiLogger;
  queue: EmlApiQueueTransport | EmlApiQueueTransportOptions | undefined;
  /** Options of every client the relay makes, without a key. */
  clientOptions: Omit<EmlApiClientOptions, 'apiKey'>;
  spool: SpoolSettings;
}

export { maxUploadableSize };

/**
 * Bytes the `Bcc` field the relay writes can grow a message by, per recipient: a separator, a fold and the
 * longest address in UTF-8 (up to 3 bytes per UTF-16 unit). An address already in a Bcc field grows by less.
 */
const BCC_BYTES_PER_RECIPIENT = 4 + 3 * MAX_ADDRESS_LENGTH;

/**
 * The largest message whose upload still fits `requestLimit` once the relay has written `maxRecipients` into a `Bcc`
 * field; undefined when that is less than half of {@link maxUploadableSize}.
 */
export function defaultMaxMessageSize(requestLimit: number, maxRecipients: number): number | undefined {
  const uploadable = maxUploadableSize(requestLimit);
  const size = uploadable - (maxRecipients * BCC_BYTES_PER_RECIPIENT + 'Bcc:\r\n\r\n'.length);
  return size >= uploadable / 2 ? size : undefined;
}

/** @throws {EmlApiError} `ECONFIG` naming the first bad option */
export function resolveRelayOptions(options: EmlApiRelayOptions): {
  apiKey: string | undefined;
  settings: RelaySettings;
} {
  if (typeof options !== 'object' || options === null) {
    throw new EmlApiError('ECONFIG', 'Options must be an object with at least baseUrl', { permanent: true });
  }
  const o = options as unknown as Record<string, unknown>;
  const c = checkOptions(o, RELAY_SCHEMA);
  const clientOptions: Record<string, unknown> = {};
  for (const key of Object.keys(clientRules)) if (o[key] !== undefined) clientOptions[key] = o[key];
  const { connect, response, total } = c.timeouts;
  const clientTimeouts = Object.fromEntries(
    Object.entries({ connect, response, total }).filter(([, value]) => value !== undefined),
  );
  if (Object.keys(clientTimeouts).length > 0) clientOptions.timeouts = clientTimeouts;
  clientOptions.spool = c.spool;
  // Checks the client options (and the key's form) as every client the relay makes will.
  const { resolved } = resolveClientOptions({ ...clientOptions, apiKey: c.apiKey ?? 'relay-option-check' });
  const settings: RelaySettings = {
    port: c.port,
    host: c.host,
    allowUnauthenticatedFrom: c.allowUnauthenticatedFrom,
    trustedNetworks: c.trustedNetworks,
    users: c.users,
    keySenders: c.keySenders,
    allowedSenders: c.allowedSenders,
    tls: c.tls,
    maxMessageSize: c.maxMessageSize ?? defaultSize(c.maxRecipients),
    maxRecipients: c.maxRecipients,
    maxClients: c.maxClients,
    idleTimeout: c.timeouts.idle,
    maxClientsPerAddress: c.maxClientsPerAddress,
    stressIdleTimeout: c.timeouts.stressIdle,
    dataTimeout: c.timeouts.data,
    minDataRate: c.minDataRate,
    authFailureDelay: c.authFailureDelay,
    maxAuthFailures: c.maxAuthFailures,
    maxAuthFailuresPerAddress: c.maxAuthFailuresPerAddress,
    authFailureWindow: c.authFailureWindow,
    tlsHandshakeTimeout: c.timeouts.tlsHandshake,
    proxyProtocol: c.proxyProtocol,
    hostname: c.hostname,
    maxKeys: c.maxKeys,
    logger: c.logger,
    queue: c.queue,
    clientOptions: clientOptions as Omit<EmlApiClientOptions, 'apiKey'>,
    spool: resolved.spool,
  };
  return { apiKey: c.apiKey, settings };
}

const { apiKey: _k, timeouts: _t, logger: _l, ...clientRules } = CLIENT_SCHEMA;
const day = 24 * 3_600_000;

const RELAY_TIMEOUT_SCHEMA = {
  idle: whole(1, day, 300_000),
  stressIdle: whole(1, day, 10_000),
  data: whole(1, 7 * day, 600_000),
  tlsHandshake: whole(1, 600_000, 10_000),
  ...passedOn(TIMEOUT_SCHEMA),
} as const satisfies OptionSchema<EmlApiRelayTimeouts>;

/** What {@link resolveRelayOptions} checks, in order (the client's options are the client's), and docs/relay.md's ranges. */
export const RELAY_SCHEMA = {
  port: whole(0, 65535, 2525),
  host: custom('visible ASCII', (v, option) => text(v ?? '127.0.0.1', option)),
  apiKey: custom('visible ASCII', (v) => (v === undefined || v === null || v === '' ? undefined : (v as string))),
  allowUnauthenticatedFrom: custom(
    'addresses and networks',
    (v, option) => new ClientAddressList((v as string[] | undefined) ?? LOOPBACK_NETWORKS, option),
  ),
  trustedNetworks: custom(
    'addresses and networks',
    (v, option) => new ClientAddressList((v as string[] | undefined) ?? LOOPBACK_NETWORKS, option),
  ),
  users: custom('{ name, passwordHash, senders }[]', (v, _, _o, c) => checkUsers(v, c.apiKey)),
  keySenders: custom("{ 'key:<fingerprint>': senders }", checkKeySenders),
  allowedSenders: custom('addresses and domains', (v, option) =>
    v === undefined ? undefined : new SenderList(v, option),
  ),
  queue: custom('EmlApiQueueTransport or its options', (v, _, _o, c) => checkQueue(v, c.apiKey)),
  tls: custom('{ cert, key, implicit }', (v) => (v === undefined ? undefined : checkTls(v))),
  maxMessageSize: custom('1 to 1099511627776', (v, option) =>
    v === undefined ? undefined : wholeNumber(v, option, 1, 2 ** 40),
  ),
  maxRecipients: whole(1, 100_000, 100),
  maxClients: whole(1, 100_000, 100),
  timeouts: nested(
    RELAY_TIMEOUT_SCHEMA,
    '{ idle, stressIdle, data, tlsHandshake, connect, response, total } in milliseconds',
    () => checkOptions({}, RELAY_TIMEOUT_SCHEMA, 'timeouts.'),
  ),
  maxClientsPerAddress: whole(1, 100_000, 50),
  minDataRate: whole(1, 2 ** 40, 500),
  authFailureDelay: whole(0, 60_000, 2_000),
  maxAuthFailures: whole(1, 100_000, 10),
  maxAuthFailuresPerAddress: whole(1, 100_000, 100),
  authFailureWindow: whole(1_000, day, 600_000),
  proxyProtocol: custom('IP addresses', checkProxies),
  hostname: custom('visible ASCII', (v, option) => text(v ?? osHostname(), option)),
  maxKeys: whole(1, 100_000, 100),
  logger: custom('true, false, logger', loggerOption),
  http: custom('{ port, host }', (v) => v),
  metrics: custom('true, false, { registry }', (v) => v),
  ...passedOn(clientRules),
  // The client's shape, with the relay's default threshold.
  spool: custom(CLIENT_SCHEMA.spool.range, (v, option) => ({
    threshold: DEFAULT_SPOOL_THRESHOLD,
    ...(v === undefined ? {} : objectOption(v, option, CLIENT_SCHEMA.spool.range)),
  })),
} as const satisfies OptionSchema<EmlApiRelayOptions>;

function checkTls(value: unknown): EmlApiRelayTlsOptions {
  const tls = value as Partial<EmlApiRelayTlsOptions> | null;
  const pem = (v: unknown) => typeof v === 'string' || Buffer.isBuffer(v);
  if (typeof tls !== 'object' || tls === null || !pem(tls.cert) || !pem(tls.key)) {
    throw configError('tls', 'expected { cert, key } (PEM strings or Buffers), and optionally implicit: true');
  }
  booleanOption(tls.implicit, 'tls.implicit');
  return tls as EmlApiRelayTlsOptions;
}

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

/** The outbox sends later with its workers' key: clients' AUTH keys are never stored, so the relay needs its own. */
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

/** One IP address each: smtp-server matches a peer exactly, and a network would let any host in it claim any client. */
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

function checkKeySenders(value: unknown): ReadonlyMap<string, SenderList> {
  if (value === undefined) return new Map();
  const lists = objectOption(value, 'keySenders', "{ 'key:<fingerprint>': [senders] }");
  return new Map(
    Object.entries(lists).map(([login, senders]) => {
      if (!/^key:[0-9a-f]{24}$/.test(login)) {
        throw configError(
          'keySenders',
          `${JSON.stringify(login)} is not a key's login: expected key: and 24 hex digits, as the relay logs it`,
        );
      }
      return [login, new SenderList(senders, `keySenders[${JSON.stringify(login)}]`)];
    }),
  );
}

function checkUsers(value: unknown, apiKey: unknown): RelayUsers | undefined {
  if (value === undefined) return undefined;
  const users = new RelayUsers(value as EmlApiRelayUser[]);
  if (apiKey === undefined) {
    throw configError('users', "the relay's users send with its own apiKey: set apiKey (or EML_API_KEY) too");
  }
  return users;
}
