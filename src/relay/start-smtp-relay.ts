import { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { answeredAsNoService } from '../shared/failure.js';
import { configError, describe } from '../shared/options-kit.js';
import { isLoopbackAddress } from './client-address-list.js';
import { ClientSlots } from './client-slots.js';
import { KeyClients, keyFingerprint, secretMatcher } from './relay-users.js';
import { identitySecret, type MessageIdentities } from './message-identities.js';
import { directDestination, queueDestination, UploadShares } from './message-destination.js';
import { AUTH_NEEDS_TLS } from './smtp-replies.js';
import { loadSmtpServer, SmtpServerAdapter, type SessionHandlers, type SmtpConnection } from './smtp-server-adapter.js';
import { relaySessionHandlers, sessionLogin, type MessageOutcome } from './relay-sessions.js';
import type { SenderRefusalReason } from './sender-lists.js';
import { type EmlApiRelayOptions, resolveRelayOptions, type RelaySettings } from './relay-options.js';
import { redisPassword } from '../queue/redis-settings.js';
import { EmlApiMetrics } from '../observability/metrics.js';
import {
  resolveOpsHttpOptions,
  startOpsEndpoint,
  type OpsEndpoint,
  type ReadinessCheck,
} from '../observability/ops-server.js';
import { watchSends, startSpan } from '../observability/tracing.js';
import type { ClientCounts } from './shared-limits.js';

/**
 * A running SMTP relay.
 *
 * @example
 * const relay = await startEmlApiRelay({ baseUrl, port: 0 });
 * console.log(`SMTP relay on ${relay.host}:${relay.port}`);
 * await relay.close();
 */
export interface EmlApiRelay {
  /** The port it listens on (the one picked when `port` was 0). */
  readonly port: number;
  /** The interface it listens on. */
  readonly host: string;
  /** The health and metrics port (the `http` option), when there is one. */
  readonly http?: { readonly port: number; readonly host: string };
  /**
   * Stops the relay: no new connections or transactions (`421`), messages that arrived in full are handed on and get
   * their reply, messages still arriving are given up (`421`: the client sends them again later), then every
   * connection is closed. `{ abort: true }` aborts uploads too (`451`).
   * @example
   * process.once('SIGTERM', () => relay.close());
   */
  close(options?: {
    /**
     * Abort the messages being uploaded at once (their clients get `451`); given while another close waits out its
     * `grace`, it ends that wait. The messages given up are counted in `givenUp`. @default false
     */
    abort?: boolean;
    /**
     * Milliseconds the messages in flight, still arriving or being handed on, have to finish; then the ones left are
     * given up (`421` or `451`: their clients send them again later) and counted in `givenUp`. Without it, a message
     * still arriving is given up at once (and counted) and the ones that arrived are waited for (each within the
     * client's `timeouts.total`).
     * @default undefined
     * @example
     * process.once('SIGTERM', async () => process.exit((await relay.close({ grace: 25_000 })).givenUp ? 4 : 0));
     */
    grace?: number;
  }): Promise<{
    /**
     * Messages the relay gave up, which got no `250`: their clients retry them. Those in flight when the grace period
     * ran out (or `abort` ended it); without `grace`, those still arriving (and with `abort`, those being handed on);
     * and any whose DATA came after. One whose write to the outbox had started, and then ended, got its `250` and is
     * not counted.
     */
    givenUp: number;
  }>;
}

type EmlApiRelayClosed = Awaited<ReturnType<EmlApiRelay['close']>>;

/**
 * Starts an SMTP server that hands every message it accepts to the email service's `POST /v1/send/eml`, or with
 * `queue` to the outbox, whose workers post it there, for the senders that still speak SMTP (Postfix, PHP, Django,
 * Rails, cron, monitoring tools...). It answers `250` only once the service accepted the message
 * (`250 2.0.0 Ok: <id>`), or with `queue` once Redis stored it, `451` when the failure is transient (the client's
 * queue retries), `5xx` with the service's reason when the message can never be sent as it is.
 *
 * Needs the optional peer `smtp-server` (`npm install smtp-server`).
 *
 * @returns the running relay, once it listens
 * @throws {EmlApiError} `ECONFIG` for a bad option (`queue` without the relay's own `apiKey`...), a port
 *   it cannot listen on, or an outbox Redis that would lose queued mail (`maxmemory-policy` other than `noeviction`, or less
 *   persistence than the queue's `durability` asks); `EAUTH` when the service refuses the relay's `apiKey`; `EAPI`
 *   when the base URL answers the key check's empty send with a 2xx (whatever answers is not the service)
 * @example
 * import { startEmlApiRelay } from 'nodemailer-eml-api/relay';
 *
 * const relay = await startEmlApiRelay({
 *   baseUrl: 'https://api.mail.example.com',
 *   apiKey: process.env.EML_API_KEY, // optional: without it, clients AUTH with their own key
 *   port: 2525,
 * });
 */
export function startEmlApiRelay(options: EmlApiRelayOptions): Promise<EmlApiRelay> {
  return startRelay(options);
}

/** What a process of `eml-api relay --processes` shares with its primary. */
export interface RelayProcessShares {
  counts?: ClientCounts;
  /** The tries of unknown outcome, shared with the other processes. */
  identities?: MessageIdentities;
  /** Takes what `/readyz` checks: the primary's port asks every process. */
  readiness?: (checks: ReadinessCheck[]) => void;
}

/** {@link startEmlApiRelay}, in one of several processes. */
export async function startRelay(options: EmlApiRelayOptions, shared: RelayProcessShares = {}): Promise<EmlApiRelay> {
  loadSmtpServer();
  const { http, metrics, ...relayOptions } = options;
  const { apiKey, settings } = resolveRelayOptions(relayOptions);
  const telemetry = new RelayTelemetry(
    http,
    metrics,
    [apiKey, redisPassword((relayOptions.queue as { connection?: unknown } | undefined)?.connection)],
    (settings.users?.size ?? 0) + settings.maxKeys + 1,
  );
  const { logger } = settings;
  const shares = new UploadShares();
  const destination =
    settings.queue === undefined
      ? directDestination(shares)
      : queueDestination(settings.queue, settings.maxClients, settings.logger);
  const makeClient = (key: string) => telemetry.watch(new EmlApiClient({ ...settings.clientOptions, apiKey: key }));
  const relayClient = apiKey === undefined ? undefined : makeClient(apiKey);
  const keyClients = new KeyClients(makeClient, settings.maxKeys);
  const stop = async () => {
    await Promise.allSettled([keyClients.close(), relayClient?.close(), destination.close()]);
  };
  if (relayClient) await checkOwnKey(relayClient, settings, stop);
  try {
    await destination.ready?.();
  } catch (err) {
    await stop();
    throw err;
  }

  const aborter = new AbortController();
  const arriving = new AbortController();
  /** The messages in progress, each resolving to how it ended. */
  const inflight = new Set<Promise<MessageOutcome>>();
  /** The messages a give-up counts itself (those in flight then); the others given up are counted in `shutOut`. */
  let counted: ReadonlySet<Promise<MessageOutcome>> = new Set();
  let shutOut = 0;
  let closing = false;
  const slots = new ClientSlots(settings, shared.counts);
  const handlers = telemetry.observe(
    relaySessionHandlers({
      settings,
      keyClients,
      relayClient,
      relaySecret: apiKey === undefined ? undefined : identitySecret(apiKey),
      isOwnKey: apiKey === undefined ? () => false : secretMatcher(apiKey),
      relayKeyLogin: apiKey === undefined ? undefined : `key:${keyFingerprint(apiKey)}`,
      destination,
      shares,
      slots,
      ...(shared.counts ? { counts: shared.counts } : {}),
      ...(shared.identities ? { identities: shared.identities } : {}),
      signal: aborter.signal,
      arriving: arriving.signal,
      connectionOf: (session): SmtpConnection | undefined => server.connectionOf(session),
      closing: () => closing,
      senderRefused: (reason, login) => telemetry.senderRefused(reason, login),
      track(work) {
        const settled = work.catch((): MessageOutcome => 'refused');
        inflight.add(settled);
        void settled.then((outcome) => {
          inflight.delete(settled);
          if (outcome === 'given-up' && !counted.has(settled)) shutOut++;
        });
      },
    }),
  );
  const { implicit, ...tlsContext } = settings.tls ?? {};
  const server = new SmtpServerAdapter(
    {
      ...(settings.tls ? { ...tlsContext, secure: implicit === true } : { disabledCommands: ['STARTTLS'] }),
      name: settings.hostname,
      banner: 'nodemailer-eml-api relay',
      logger: false,
      authMethods: ['PLAIN', 'LOGIN'],
      // Who may send is decided at MAIL FROM, where the reply can say what to do.
      authOptional: true,
      // AUTH is hidden per connection where it is not allowed (plain text from another host).
      allowInsecureAuth: true,
      size: settings.maxMessageSize,
      rejectOversized: true,
      maxRecipients: settings.maxRecipients,
      maxClients: settings.maxClients,
      socketTimeout: settings.idleTimeout,
      // close() runs once the messages in flight are done: the connections left are closed at once.
      closeTimeout: 1,
      disableReverseLookup: true,
      useProxy: settings.proxyProtocol.length > 0 ? [...settings.proxyProtocol] : false,
      hideENHANCEDSTATUSCODES: false,
      ...handlers,
    },
    { handshakeTimeout: settings.tlsHandshakeTimeout, authDisabledReply: AUTH_NEEDS_TLS, logger },
  );
  slots.attach(server);
  server.onError((err) => logger.warn({ err: err.message }, 'SMTP connection error'));
  try {
    await listen(server, settings);
  } catch (err) {
    await stop();
    throw err;
  }
  try {
    // Store-and-forward rides out a service outage, so it is ready with Redis alone.
    const checks: ReadinessCheck[] =
      settings.queue !== undefined
        ? [{ name: 'redis', check: () => destination.readiness?.() ?? Promise.resolve() }]
        : relayClient
          ? [{ name: 'service', check: async () => void (await relayClient.verify()) }]
          : [];
    shared.readiness?.(checks);
    await telemetry.start(server, checks);
  } catch (err) {
    await server.close();
    await stop();
    throw err;
  }
  const address = server.address();
  const listening = { port: address.port, host: settings.host };
  logger.info(
    {
      ...listening,
      tls: settings.tls ? (implicit ? 'implicit' : 'starttls') : 'none',
      keys: settings.queue
        ? "relay key: AUTH with the relay's users or its key"
        : relayClient
          ? `relay key${settings.users ? " (also for the relay's users)" : ''}, or AUTH with a client key`
          : 'AUTH with a client key',
      destination: destination.name,
    },
    'SMTP relay listening',
  );
  const unlisted = settings.users?.withoutSenders() ?? [];
  const openAllowed =
    settings.users !== undefined &&
    settings.allowUnauthenticatedFrom.entries.length > 0 &&
    settings.allowedSenders === undefined;
  if (unlisted.length > 0 || openAllowed) {
    logger.warn(
      {
        ...(unlisted.length > 0 ? { users: unlisted.slice(0, 20).join(', '), count: unlisted.length } : {}),
        ...(openAllowed ? { allowed: settings.allowUnauthenticatedFrom.entries.join(', ') } : {}),
      },
      `Without a sender list, ${[
        ...(unlisted.length > 0 ? [`${unlisted.length} relay user(s)`] : []),
        ...(openAllowed ? ['the clients that send without AUTH (allowUnauthenticatedFrom)'] : []),
      ].join(
        ' and ',
      )} may send as any address: give each its senders (eml-api relay: name:hash:senders lines in --users, --allow-senders; options: users[].senders, allowedSenders)`,
    );
  }
  const trustsOthers = settings.trustedNetworks.entries.some((entry) => !isLoopbackAddress(entry.split('/')[0]!));
  if (!isLoopbackAddress(settings.host) && !settings.tls && !relayClient && !trustsOthers) {
    logger.warn(
      listening,
      'The relay listens beyond loopback without TLS or an API key of its own: no client off this machine can send (AUTH needs TLS there, or trustedNetworks)',
    );
  }

  let closed: Promise<EmlApiRelayClosed> | undefined;
  // A close({ abort: true }) while a close waits out its grace period: what is left is given up now.
  let hurriedNow = false;
  let hurry!: () => void;
  const hurried = new Promise<void>((resolve) => (hurry = resolve)).then(() => (hurriedNow = true));
  const endpoint = telemetry.endpoint;
  const giveUpArriving = () =>
    arriving.abort(
      new EmlApiError('EABORT', 'the relay is closing and the message had not arrived in full', {
        permanent: false,
      }),
    );
  return {
    ...listening,
    ...(endpoint ? { http: { port: endpoint.port, host: endpoint.host } } : {}),
    close(closeOptions = {}) {
      const { grace } = closeOptions;
      // Checked before anything is done: a refused close leaves the relay taking mail as before.
      if (grace !== undefined && (!Number.isInteger(grace) || grace < 0)) {
        return Promise.reject(configError('grace', `expected a whole number of ms, got ${describe(grace)}`));
      }
      if (closeOptions.abort) {
        aborter.abort(new EmlApiError('EABORT', 'the relay was closed with { abort: true }', { permanent: false }));
        if (closed) hurry();
      }
      closed ??= (async () => {
        closing = true;
        // Not ready from now on: a load balancer sends no more clients while the relay finishes.
        telemetry.stopping();
        let givenUp = 0;
        server.stopAccepting();
        if (grace === undefined && !closeOptions.abort) {
          // A stalled client would otherwise hold close() for as long as it keeps its connection.
          giveUpArriving();
        } else {
          const deadline = Date.now() + (grace ?? 0);
          while (inflight.size > 0 && Date.now() < deadline && !hurriedNow) {
            let timer: NodeJS.Timeout | undefined;
            await Promise.race([
              Promise.allSettled([...inflight]),
              new Promise((resolve) => (timer = setTimeout(resolve, deadline - Date.now()))),
              hurried,
            ]);
            clearTimeout(timer);
          }
          const left = [...inflight];
          counted = new Set(left);
          if (left.length > 0 || closeOptions.abort) {
            if (left.length > 0) {
              logger.warn(
                { messages: left.length, ...(grace === undefined ? {} : { graceMs: grace }) },
                hurriedNow || grace === undefined
                  ? 'Stopping at once: giving up the messages in flight'
                  : 'Grace period over: giving up the messages in flight',
              );
            }
            giveUpArriving();
            aborter.abort(
              new EmlApiError('EABORT', 'the relay stopped: its grace period ran out', { permanent: false }),
            );
            // A write to the outbox that has started is not cut short: it may still end in a 250.
            givenUp = (await Promise.all(left)).filter((outcome) => outcome !== 'accepted').length;
          }
        }
        while (inflight.size > 0) await Promise.allSettled([...inflight]);
        // Told the relay is shutting down, and not among those in flight when it gave up: still arriving at a
        // close() without grace, or sent after the give-up.
        givenUp += shutOut;
        await server.close();
        await stop();
        await telemetry.close();
        logger.info({ ...listening, givenUp }, 'SMTP relay stopped');
        return { givenUp };
      })();
      return closed;
    },
  };
}

/** Checks the relay's own key at start: a refused key stops the start; an unreachable service only warns. */
async function checkOwnKey(client: EmlApiClient, settings: RelaySettings, stop: () => Promise<void>): Promise<void> {
  try {
    await client.verify();
  } catch (err) {
    // A refused key, or a base URL that is not the service's, would fail or lose every message.
    if (err instanceof EmlApiError && (err.code === 'EAUTH' || answeredAsNoService(err))) {
      await stop();
      throw err;
    }
    settings.logger.warn(
      { err: err instanceof Error ? err.message : String(err) },
      "Could not check the relay's API key; starting anyway (messages get 451 until the service answers)",
    );
  }
}

async function listen(server: SmtpServerAdapter, settings: RelaySettings): Promise<void> {
  try {
    await server.listen(settings.port, settings.host);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new EmlApiError(
      'ECONFIG',
      `The SMTP relay could not listen on ${settings.host}:${settings.port}: ${e.message} (${e.code ?? 'error'})`,
      { cause: err, permanent: true },
    );
  }
}

type DataHandler = SessionHandlers['onData'];

/**
 * The relay's metrics, spans (`eml-api.relay`, DATA to reply: a queued job continues its trace) and
 * health port, with `/readyz` checking what the relay's mode needs.
 */
export class RelayTelemetry {
  readonly metrics: EmlApiMetrics | undefined;
  readonly #http: ReturnType<typeof resolveOpsHttpOptions>;
  readonly #secrets: (string | undefined)[];
  readonly #removers: (() => void)[] = [];
  /** The logins counted under their own name, at most {@link #maxLogins}: the rest are `:other` (no login has a `:` first). */
  readonly #logins = new Set<string>();
  readonly #maxLogins: number;
  #endpoint: OpsEndpoint | undefined;

  /**
   * @param maxLogins the logins the message counter names at most (the relay's users, and as many keys as
   *   it keeps clients for), so that clients AUTHing with ever new keys cannot grow it without bound
   * @throws {EmlApiError} `ECONFIG` naming `http` or `metrics`, or saying to install prom-client
   */
  constructor(http: unknown, metrics: unknown, secrets: (string | undefined)[], maxLogins: number) {
    this.#maxLogins = maxLogins;
    this.#http = resolveOpsHttpOptions(http, 'http');
    this.metrics = EmlApiMetrics.resolve(
      EmlApiMetrics.defaultWithHttp(metrics, this.#http !== undefined, 'The relay’s http option'),
      "The relay's metrics option",
    );
    this.#secrets = secrets;
  }

  get endpoint(): OpsEndpoint | undefined {
    return this.#endpoint;
  }

  /** The session handlers, with each message (DATA to reply) in a span and counted by reply code. */
  observe<H extends { onData: DataHandler }>(handlers: H): H {
    const { metrics } = this;
    const onData: DataHandler = (stream, session, callback) => {
      const started = performance.now();
      const login = sessionLogin(session);
      const span = startSpan('eml-api.relay', {
        kind: 'server',
        attributes: {
          'eml_api.component': 'relay',
          'eml_api.session': session.id,
          'eml_api.recipients': session.envelope.rcptTo.length,
          ...(login === undefined ? {} : { 'eml_api.login': login }),
        },
      });
      const reply: typeof callback = (err, message) => {
        const code = err ? ((err as { responseCode?: number }).responseCode ?? 451) : 250;
        const bytes = (stream as { byteLength?: number }).byteLength ?? 0;
        // A client that left mid-DATA hears no reply: its message is abandoned, not refused.
        const gone = (err as { clientGone?: boolean } | null | undefined)?.clientGone === true;
        const heard = gone ? undefined : code;
        metrics?.recordRelayMessage(heard, bytes, (performance.now() - started) / 1000, this.#loginLabel(login));
        span.set({ 'smtp.reply_code': heard, 'eml_api.bytes': bytes });
        if (err) span.fail(Object.assign(new Error(err.message), { code: gone ? 'ESTREAM' : `SMTP_${code}` }));
        span.end();
        callback(err, message);
      };
      span.run(() => handlers.onData(stream, session, reply));
    };
    return { ...handlers, onData };
  }

  senderRefused(reason: SenderRefusalReason, login: string | undefined): void {
    this.metrics?.recordSenderRefusal(reason, this.#loginLabel(login));
  }

  /** The `login` label of a message: the login, or `:other` past the logins the counter names. */
  #loginLabel(login: string | undefined): string | undefined {
    if (login === undefined || this.#logins.has(login)) return login;
    if (this.#logins.size >= this.#maxLogins) return ':other';
    this.#logins.add(login);
    return login;
  }

  /** Measures the uploads and retries of a client the relay sends with. */
  watch(client: EmlApiClient): EmlApiClient {
    // Never removed: the observer goes with the client's engine when the client is evicted.
    watchSends(client, 'relay', this.metrics);
    return client;
  }

  /**
   * Counts the server's connections; starts the health and metrics port for the `http` option.
   * @param checks what `/readyz` checks in the relay's mode
   * @throws {EmlApiError} `ECONFIG` when the port cannot listen
   */
  async start(server: SmtpServerAdapter, checks: ReadinessCheck[]): Promise<void> {
    if (this.metrics) this.#removers.push(this.metrics.addConnections(() => server.connectionCount));
    if (!this.#http) return;
    this.#endpoint = await startOpsEndpoint(this.#http, { checks, secrets: this.#secrets }, this.metrics);
  }

  /** `/readyz` fails from now on: the relay is stopping. */
  stopping(): void {
    this.#endpoint?.stopping();
  }

  /** Stops the port and the gauges' sources. */
  async close(): Promise<void> {
    for (const remove of this.#removers.splice(0)) remove();
    await this.#endpoint?.close();
  }
}
