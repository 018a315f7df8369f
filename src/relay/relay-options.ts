import type { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import type { SecureContextOptions } from 'node:tls';
import type { EmlApiClientOptions } from '../client/client-options.js';
import type { TimeoutOptions } from '../http/requester-options.js';
import type { EmlApiLogger } from '../shared/logger.js';
import type { EmlApiRelayUser } from './relay-users.js';
import type { MetricsOption } from '../observability/metrics.js';
import type { OpsHttpOptions } from '../observability/ops-server.js';

/**
 * TLS of the relay: STARTTLS on the plain port (the default), or TLS from
 * the first byte (`implicit`, as on port 465). Any other option of
 * `tls.createSecureContext` (`ca`, `passphrase`, `minVersion`...) may be added.
 *
 * @example
 * tls: { cert: readFileSync('/etc/ssl/relay.crt'), key: readFileSync('/etc/ssl/relay.key') }
 */
export interface EmlApiRelayTlsOptions extends SecureContextOptions {
  /** The certificate chain, PEM. */
  cert: string | Buffer;
  /** The private key, PEM. */
  key: string | Buffer;
  /**
   * TLS from the first byte (SMTPS) instead of STARTTLS.
   * @default false
   */
  implicit?: boolean;
}

/**
 * Time limits of the relay, in milliseconds: its SMTP side (`idle`,
 * `stressIdle`, `data`, `tlsHandshake`) and the service's (`connect`,
 * `response`, `total`, the client's {@link TimeoutOptions}, for the
 * requests it makes).
 *
 * @example
 * await startEmlApiRelay({ baseUrl, timeouts: { idle: 60_000, data: 1_800_000, total: 60_000 } });
 */
export interface EmlApiRelayTimeouts extends TimeoutOptions {
  /**
   * How long a client may stay silent while the relay waits for it before
   * it is disconnected (`421`). RFC 5321 suggests 5 minutes.
   * @default 300000
   */
  idle?: number;
  /**
   * The idle timeout while the relay is nearly full (from 80% of
   * `maxClients` connections on), for every connection: Postfix's stress
   * mode (`smtpd_timeout = ${stress?{10}:{300}}s`). The idle clients leave
   * room for those that send.
   * @default 10000
   */
  stressIdle?: number;
  /**
   * How long a message may take to arrive, from DATA to its final dot,
   * whatever its rate (`421 4.4.2` past it: the message is abandoned, and the
   * client sends it again later). Raise it for large messages over slow links.
   * @default 600000 (10 minutes)
   */
  data?: number;
  /**
   * How long a client of an implicit TLS listener (`tls.implicit`) has to
   * complete its TLS handshake before the socket is closed, and a proxy
   * (`proxyProtocol`) to send its PROXY header. smtp-server would give it
   * the idle timeout; a socket in its handshake has no session yet, so
   * nothing else times it. Sockets count against `maxClientsPerAddress`
   * from the moment they are accepted, handshake included.
   * @default 10000
   */
  tlsHandshake?: number;
}

/**
 * Options of {@link startEmlApiRelay}: where to listen, the service to relay
 * to, and every option of {@link EmlApiClientOptions} (retry, `maxConnections`
 * to the service, spool...) for the clients it sends with.
 *
 * @example
 * const relay = await startEmlApiRelay({ baseUrl: 'https://api.mail.example.com', port: 2525 });
 */
export interface EmlApiRelayOptions extends Omit<EmlApiClientOptions, 'apiKey' | 'timeouts'> {
  /**
   * TCP port; 0 picks a free one (see `relay.port`).
   * @default 2525
   */
  port?: number;
  /**
   * Interface to listen on. Listening on another than loopback makes the
   * relay reachable from the network: see `tls` and `allowUnauthenticatedFrom`.
   * @default '127.0.0.1'
   */
  host?: string;
  /**
   * The relay's own API key. Without it, each SMTP client authenticates with
   * its own key as the password (any user name) and the relay stores none.
   * With it, clients on `allowUnauthenticatedFrom` and the `users` send with
   * this key; clients that AUTH with an API key send with their own (not under `queue`).
   * @default undefined
   */
  apiKey?: string;
  /**
   * Client addresses and networks (`10.0.0.0/8`, `fd00::/8`, `192.0.2.7`)
   * that may send without AUTH, with the relay's `apiKey` (Postfix's
   * `permit_mynetworks`). Ignored without `apiKey`. Behind a sidecar that
   * forwards from loopback (`127.0.0.6`), loopback is every client: narrow it,
   * e.g. to `['127.0.0.1/32']`, or to `[]`. Entries match their own address
   * family: `::/0` is every IPv6 client, not the IPv4 ones (an IPv4-mapped
   * entry, `::ffff:10.0.0.0/104`, is the IPv4 network `10.0.0.0/8`).
   * @default ['127.0.0.0/8', '::1/128'] (loopback)
   * @example
   * allowUnauthenticatedFrom: ['10.0.0.0/8']
   */
  allowUnauthenticatedFrom?: string[];
  /**
   * Client addresses and networks whose path to the relay is trusted, as
   * Postfix's `mynetworks` is for its per-client limits: clients there may AUTH
   * on a plain-text connection (the password crosses no network in clear), and
   * are exempt from the per-address limits (`maxClientsPerAddress`, the AUTH
   * failure budget), as Postfix exempts `smtpd_client_event_limit_exceptions`.
   * List a proxy or sidecar whose one address stands for many clients: an
   * Istio/Envoy sidecar forwards every inbound connection from `127.0.0.6`.
   * Being trusted does not let a client send without AUTH: that is
   * `allowUnauthenticatedFrom`.
   * @default ['127.0.0.0/8', '::1/128'] (loopback)
   * @example
   * trustedNetworks: ['127.0.0.1/32', '127.0.0.6/32'] // the machine itself and the sidecar
   */
  trustedNetworks?: string[];
  /**
   * The relay's own SMTP users: a client that AUTHs with one of these user
   * names and its password sends with the relay's `apiKey` (so `apiKey` is
   * needed). Give each sender its own login instead of an API key, as
   * Postfix with Dovecot SASL does; store hashes (`passwordHash`, made by
   * `hashRelayPassword` or `eml-api relay --hash-password`), not passwords.
   * A listed user name is checked only against its password, never as an
   * API key. With `queue`, only these users and the relay's own key can AUTH.
   * @default undefined (no users: clients AUTH with an API key, or with the relay's key under `queue`)
   * @example
   * users: [{ username: 'billing', passwordHash: process.env.BILLING_SMTP_HASH! }]
   */
  users?: EmlApiRelayUser[];
  /**
   * Store-and-forward through the outbox (`nodemailer-eml-api/queue`): the
   * relay answers `250` once Redis has stored the message, and the outbox's
   * workers (`eml-api worker`, `startEmlApiWorker`) send it when the service
   * can take it. A queue transport you made (left open when the relay closes),
   * or its options. Needs `apiKey` (the relay's own key; the workers send with
   * theirs), bullmq and ioredis. Every message then goes out under the
   * workers' key, so AUTH accepts only the relay's own key (as the password,
   * any user name) and the `users`, never another API key. A transport the
   * relay makes from options stores up to `maxClients` messages at once,
   * unless the options set `concurrency`.
   * @default undefined (each message is uploaded before the relay answers)
   * @example
   * await startEmlApiRelay({ baseUrl, apiKey, queue: { connection: process.env.REDIS_URL! } });
   */
  queue?: EmlApiQueueTransport | EmlApiQueueTransportOptions;
  /**
   * STARTTLS (or implicit TLS) with this certificate. Without it, STARTTLS
   * is not offered, and clients outside `trustedNetworks` cannot AUTH (the
   * password is an API key: it never crosses the network in clear).
   * @default undefined
   */
  tls?: EmlApiRelayTlsOptions;
  /**
   * Largest message accepted, in bytes, advertised as `SIZE`. The default is
   * the largest message whose upload (Base64 in JSON, 4/3 of its size) fits
   * a 50 MiB request, the emulator's limit, with room left for the `Bcc`
   * field the relay writes for `maxRecipients` envelope-only recipients
   * (766 bytes each); set your service's, less that room. Without it,
   * `maxRecipients` above about 25,000 is `ECONFIG`.
   * @default 39244983 (with maxRecipients 100)
   */
  maxMessageSize?: number;
  /**
   * Recipients per message (`452 4.5.3` past it).
   * @default 100
   */
  maxRecipients?: number;
  /**
   * SMTP connections at once (`421` past it).
   * @default 100
   */
  maxClients?: number;
  /**
   * Time limits, in milliseconds: the SMTP side's and the service's.
   * @default { idle: 300000, stressIdle: 10000, data: 600000, tlsHandshake: 10000, connect: 10000, response: 30000, total: 120000 }
   * @example
   * await startEmlApiRelay({ baseUrl, timeouts: { idle: 60_000, data: 1_800_000 } });
   */
  timeouts?: EmlApiRelayTimeouts;
  /**
   * SMTP connections at once from one client address (`421 4.7.0` past it),
   * so that one client cannot take every slot: Postfix's
   * `smtpd_client_connection_count_limit`. IPv6 clients count per /64;
   * `trustedNetworks` are exempt (a sidecar's one address stands for many clients).
   * @default 50
   * @example
   * maxClientsPerAddress: 10
   */
  maxClientsPerAddress?: number;
  /**
   * The slowest a message may arrive, in bytes a second, after a grace of the
   * idle timeout, `timeouts.idle` (Postfix's `smtpd_min_data_rate`, with its per-request
   * deadline): a client sending a byte per idle period is closed (`421 4.4.2`).
   * @default 500
   * @example
   * minDataRate: 2_000
   */
  minDataRate?: number;
  /**
   * Milliseconds a failed AUTH waits before its reply (Dovecot's
   * `auth_failure_delay`): the connection reads no further command meanwhile,
   * so a guesser gets one try per delay per connection. 0 answers at once.
   * @default 2000
   * @example
   * authFailureDelay: 5_000
   */
  authFailureDelay?: number;
  /**
   * Failed AUTHs (wrong credentials) a client address may make within
   * `authFailureWindow`, across its connections; past it, its AUTHs are
   * answered `454 4.7.0` without asking the service until the oldest failure
   * leaves the window. IPv6 clients count per /64. `trustedNetworks` are
   * exempt (a proxy's one address stands for many clients). Postfix's
   * `smtpd_client_auth_rate_limit`, counting failures only.
   * @default 10
   * @example
   * maxAuthFailuresPerAddress: 5
   */
  maxAuthFailuresPerAddress?: number;
  /**
   * The window of `maxAuthFailuresPerAddress`, in milliseconds.
   * @default 600000 (10 minutes)
   * @example
   * authFailureWindow: 3_600_000
   */
  authFailureWindow?: number;
  /**
   * The addresses of proxies in front of the relay (HAProxy with
   * `send-proxy`, stunnel with `protocol = proxy`, a load balancer) that
   * open each connection with a PROXY protocol v1 header naming the client:
   * the relay then takes the client's address from the header, for
   * `allowUnauthenticatedFrom`, `trustedNetworks` and the per-address limits.
   * Without it, a proxy or TLS terminator on the relay's machine makes every
   * client a loopback one: allowed without AUTH and exempt from the
   * per-address limits by default. Exact addresses, not networks (a host
   * listed here can claim any client address); connections from them must
   * send the header, others must not. `timeouts.tlsHandshake` bounds the wait for it.
   * @default [] (no proxy)
   * @example
   * proxyProtocol: ['127.0.0.1'] // HAProxy on this machine, `server relay 127.0.0.1:2525 send-proxy`
   */
  proxyProtocol?: string[];
  /**
   * The name the relay greets with (`220 <name> ESMTP`).
   * @default os.hostname()
   */
  hostname?: string;
  /**
   * API keys (given as SMTP passwords) whose clients are kept between
   * sessions; the least recently used idle one is closed past it.
   * @default 100
   */
  maxKeys?: number;
  /**
   * Where the relay logs: every accepted message with its id, every refusal,
   * AUTH failures. `true` for the console, or a pino/bunyan/console-like object.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
  /**
   * An HTTP port of the relay's own for `/healthz` (alive: its event loop
   * turns), `/readyz` (it can take mail now: direct with its own key, the
   * service answers and accepts the key; with `queue`, Redis answers with
   * `noeviction`; 503 with the reasons, and from `close()` on) and
   * `/metrics` (Prometheus text format). Listens on `127.0.0.1` unless
   * `host` says otherwise. Metrics need the optional peer `prom-client`.
   * See docs/operations.md.
   * @default undefined (no port)
   * @example
   * const relay = await startEmlApiRelay({ baseUrl, apiKey, http: { port: 9464, host: '0.0.0.0' } });
   */
  http?: OpsHttpOptions;
  /**
   * Prometheus metrics: `true` for prom-client's default registry, `{ registry }`
   * for yours, `false` for none. With `http` and no `metrics`, a registry of
   * the relay's own (with prom-client's process metrics) served on `/metrics`.
   * @default false (without http), a registry of its own (with http)
   * @example
   * startEmlApiRelay({ baseUrl, apiKey, metrics: { registry } });
   */
  metrics?: MetricsOption;
}
