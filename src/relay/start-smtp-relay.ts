import type { AddressInfo } from 'node:net';
import type { SMTPServer } from 'smtp-server';
import { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { configError, describe } from '../shared/options-kit.js';
import { isLoopbackAddress } from './client-address-list.js';
import { ClientSlots } from './client-slots.js';
import { KeyClients } from './key-clients.js';
import { keepCommandLines } from './mail-parameters.js';
import { identitySecret } from './message-identity.js';
import { directDestination } from './message-destination.js';
import { keepOwnStatusCodes } from './own-status-codes.js';
import { greetPromptly } from './prompt-greeting.js';
import { queueDestination } from './queue-destination.js';
import { relaySessionHandlers } from './relay-sessions.js';
import type { EmlApiRelayOptions } from './relay-options.js';
import { resolveRelayOptions, type RelaySettings } from './relay-options.js';
import { secretMatcher } from './relay-users.js';
import { loadSmtpServer } from './smtp-server-peer.js';
import { RelayTelemetry } from './relay-telemetry.js';
import { redisPassword } from '../queue/outbox-readiness.js';

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
   * Stops the relay: no new connections or transactions (`421`), messages
   * that arrived in full are handed on and get their reply, messages still
   * arriving are given up (`421`: the client sends them again later), then
   * every connection is closed and the clients with it. With `{ abort: true }` messages still being
   * uploaded are aborted instead (their clients get `451`, and try again).
   * @example
   * process.once('SIGTERM', () => relay.close());
   */
  close(options?: EmlApiRelayCloseOptions): Promise<EmlApiRelayClosed>;
}

/**
 * Options of {@link EmlApiRelay.close}.
 * @example
 * await relay.close({ grace: 25_000 });
 */
export interface EmlApiRelayCloseOptions {
  /**
   * Abort the messages being uploaded at once (their clients get `451`).
   * @default false
   */
  abort?: boolean;
  /**
   * Milliseconds the messages in flight, still arriving or being handed on,
   * have to finish; then the ones left are given up (`421` or `451`: their
   * clients send them again later) and counted in `givenUp`. Without it, a
   * message still arriving is given up at once and the ones that arrived are
   * waited for (each within the client's `timeouts.total`).
   * @default undefined
   * @example
   * process.once('SIGTERM', async () => process.exit((await relay.close({ grace: 25_000 })).givenUp ? 4 : 0));
   */
  grace?: number;
}

/**
 * What {@link EmlApiRelay.close} resolves with.
 * @example
 * const { givenUp } = await relay.close({ grace: 25_000 });
 */
export interface EmlApiRelayClosed {
  /** Messages in flight that the grace period ran out on: given up, their clients retry them. */
  givenUp: number;
}

/**
 * Starts an SMTP server that hands every message it accepts to the email
 * service's `POST /v1/send/eml`, or with `queue` to the outbox, whose workers
 * post it there, for the senders that still speak SMTP (Postfix, PHP,
 * Django, Rails, cron, monitoring tools...). It answers `250` only once the
 * service accepted the message (`250 2.0.0 Ok: <id>`), or with `queue` once
 * Redis stored it, `451` when the failure is transient (the client's queue
 * retries), `5xx` with the service's reason when the message can never be
 * sent as it is.
 *
 * Without `apiKey`, each client authenticates with its own API key as the
 * password (any user name) and the relay stores none; with it, clients on
 * `allowUnauthenticatedFrom` (loopback by default) send without AUTH, and the
 * relay's `users` with AUTH, both with the relay's key. With `queue`, AUTH
 * accepts only the `users` and the relay's own key. AUTH is offered over TLS,
 * or from `trustedNetworks` (loopback by default), only. Per-address limits,
 * stress timeouts, a DATA deadline and AUTH throttling keep one client from
 * starving the others (see the options).
 *
 * Needs the optional peer `smtp-server` (`npm install smtp-server`).
 *
 * @returns the running relay, once it listens
 * @throws {EmlApiError} `ECONFIG` for a bad option (`queue` without the relay's own `apiKey`...), a port
 *   it cannot listen on, or an outbox Redis that would lose queued mail (`maxmemory-policy` other than `noeviction`, or less
 *   persistence than the queue's `durability` asks); `EAUTH` when the service refuses the relay's `apiKey`
 * @example
 * import { startEmlApiRelay } from 'nodemailer-eml-api/relay';
 *
 * const relay = await startEmlApiRelay({
 *   baseUrl: 'https://api.mail.example.com',
 *   apiKey: process.env.EML_API_KEY, // optional: without it, clients AUTH with their own key
 *   port: 2525,
 * });
 */
export async function startEmlApiRelay(options: EmlApiRelayOptions): Promise<EmlApiRelay> {
  const { SMTPServer: Server } = loadSmtpServer();
  // The health port and metrics are the relay's telemetry's (relay-telemetry.ts), checked before anything opens.
  const { http, metrics, ...relayOptions } = options;
  const { apiKey, settings } = resolveRelayOptions(relayOptions);
  const telemetry = new RelayTelemetry(http, metrics, [
    apiKey,
    redisPassword((relayOptions.queue as { connection?: unknown } | undefined)?.connection),
  ]);
  const { logger } = settings;
  const destination =
    settings.queue === undefined ? directDestination() : queueDestination(settings.queue, settings.maxClients);
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
  const inflight = new Set<Promise<unknown>>();
  let closing = false;
  const slots = new ClientSlots(settings);
  const handlers = telemetry.observe(
    relaySessionHandlers({
      settings,
      keyClients,
      relayClient,
      relaySecret: apiKey === undefined ? undefined : identitySecret(apiKey),
      isOwnKey: apiKey === undefined ? () => false : secretMatcher(apiKey),
      destination,
      slots,
      signal: aborter.signal,
      arriving: arriving.signal,
      closing: () => closing,
      track(work) {
        const settled = work.catch(() => undefined);
        inflight.add(settled);
        void settled.finally(() => inflight.delete(settled));
      },
    }),
  );
  const { implicit, ...tlsContext } = settings.tls ?? {};
  const server: SMTPServer = new Server({
    ...(settings.tls ? { ...tlsContext, secure: implicit === true } : { disabledCommands: ['STARTTLS'] }),
    name: settings.hostname,
    banner: 'nodemailer-eml-api relay',
    logger: false,
    authMethods: ['PLAIN', 'LOGIN'],
    // Who may send is decided at MAIL FROM (session-rules), with the reply saying what to do.
    authOptional: true,
    // AUTH is hidden per connection where it is not allowed (plain text from another host).
    allowInsecureAuth: true,
    size: settings.maxMessageSize,
    rejectOversized: true,
    maxRecipients: settings.maxRecipients,
    maxClients: settings.maxClients,
    socketTimeout: settings.idleTimeout,
    disableReverseLookup: true,
    useProxy: settings.proxyProtocol.length > 0 ? [...settings.proxyProtocol] : false,
    hideENHANCEDSTATUSCODES: false,
    ...handlers,
  });
  keepOwnStatusCodes(server);
  keepCommandLines(server);
  greetPromptly(server);
  slots.attach(server);
  server.on('error', (err) => logger.warn({ err: err.message }, 'SMTP connection error'));
  try {
    await listen(server, settings);
  } catch (err) {
    await stop();
    throw err;
  }
  try {
    // What /readyz checks: what this mode needs to take mail now. Store-and-forward needs Redis only
    // (an outage of the service is what it rides out); direct needs the service to take the relay's key.
    await telemetry.start(
      server,
      settings.queue !== undefined
        ? [{ name: 'redis', check: () => destination.readiness?.() ?? Promise.resolve() }]
        : relayClient
          ? [{ name: 'service', check: async () => void (await relayClient.verify()) }]
          : [],
    );
  } catch (err) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await stop();
    throw err;
  }
  const address = server.server.address() as AddressInfo;
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
  const trustsOthers = settings.trustedNetworks.entries.some((entry) => !isLoopbackAddress(entry.split('/')[0]!));
  if (!isLoopbackAddress(settings.host) && !settings.tls && !relayClient && !trustsOthers) {
    logger.warn(
      listening,
      'The relay listens beyond loopback without TLS or an API key of its own: no client off this machine can send (AUTH needs TLS there, or trustedNetworks)',
    );
  }

  let closed: Promise<EmlApiRelayClosed> | undefined;
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
      if (closeOptions.abort) {
        aborter.abort(new EmlApiError('EABORT', 'the relay was closed with { abort: true }', { permanent: false }));
      }
      const { grace } = closeOptions;
      if (grace !== undefined && (!Number.isInteger(grace) || grace < 0)) {
        return Promise.reject(configError('grace', `expected a whole number of ms, got ${describe(grace)}`));
      }
      closed ??= (async () => {
        closing = true;
        // Not ready from now on: a load balancer sends no more clients while the relay finishes.
        telemetry.stopping();
        let givenUp = 0;
        // No new connections; messages that arrived in full are handed on and get their reply.
        server.server.close();
        if (grace === undefined) {
          // A message still arriving is given up (the client gets 421 below, and retries): a slow or
          // stalled client would otherwise hold close() for as long as it keeps the connection open.
          giveUpArriving();
        } else {
          // Messages in flight, arriving ones too, get the grace period; those left are given up then.
          const deadline = Date.now() + grace;
          while (inflight.size > 0 && Date.now() < deadline) {
            let timer: NodeJS.Timeout | undefined;
            await Promise.race([
              Promise.allSettled([...inflight]),
              new Promise((resolve) => (timer = setTimeout(resolve, deadline - Date.now()))),
            ]);
            clearTimeout(timer);
          }
          givenUp = inflight.size;
          if (givenUp > 0) {
            logger.warn({ messages: givenUp, graceMs: grace }, 'Grace period over: giving up the messages in flight');
            giveUpArriving();
            aborter.abort(
              new EmlApiError('EABORT', 'the relay stopped: its grace period ran out', { permanent: false }),
            );
          }
        }
        while (inflight.size > 0) await Promise.allSettled([...inflight]);
        // Then every connection left is told (421) and closed.
        server.options.closeTimeout = 1;
        await new Promise<void>((resolve) => server.close(() => resolve()));
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
    if (err instanceof EmlApiError && err.code === 'EAUTH') {
      await stop();
      throw err;
    }
    settings.logger.warn(
      { err: err instanceof Error ? err.message : String(err) },
      "Could not check the relay's API key; starting anyway (messages get 451 until the service answers)",
    );
  }
}

function listen(server: SMTPServer, settings: RelaySettings): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) => {
      reject(
        new EmlApiError(
          'ECONFIG',
          `The SMTP relay could not listen on ${settings.host}:${settings.port}: ${err.message} (${err.code ?? 'error'})`,
          { cause: err, permanent: true },
        ),
      );
    };
    server.server.once('error', onError);
    server.listen(settings.port, settings.host, () => {
      server.server.off('error', onError);
      resolve();
    });
  });
}
