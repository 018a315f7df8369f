import type { EmlApiRelay } from '../relay/start-smtp-relay.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import type { EmulatorState } from './state/emulator-state.js';

/**
 * SMTP in, as Mailpit's port 1025: the package's own SMTP relay, pointed at
 * the emulator's API with the emulator's ready key. Mail sent over SMTP
 * takes the way of an API send (parsing, recipients from the headers, Bcc
 * added for envelope-only recipients, faults and rate limits) into the same
 * inbox, and the relay's SMTP parts (limits, header checks, replies) answer
 * the client as they would in production. The relay is loaded only when
 * `smtp` is asked for: smtp-server stays an optional peer.
 */

/**
 * SMTP in of the emulator (its `smtp` option).
 * @example
 * const emu = await startEmulator({ smtp: { port: 0 } });
 * await nodemailer.createTransport({ host: emu.smtp!.host, port: emu.smtp!.port }).sendMail(message);
 */
export interface EmulatorSmtpOptions {
  /**
   * TCP port; 0 picks a free one (read it from `emu.smtp.port`).
   * @default 0
   */
  port?: number;
  /**
   * Interface to listen on.
   * @default the emulator's `host`
   */
  host?: string;
  /**
   * Client addresses and networks that may send without AUTH (`10.0.0.0/8`,
   * `172.16.0.0/12` for a docker-compose network). Others AUTH with any user
   * name and the emulator's API key as the password.
   * @default ['127.0.0.0/8', '::1/128'] (loopback)
   */
  allowFrom?: string[];
  /**
   * Where the SMTP side logs refused messages (`warn`) and accepted ones (`info`).
   * @default nothing is logged
   */
  logger?: EmlApiLogger;
}

/**
 * A running SMTP listener of the emulator (`emu.smtp`).
 * @example
 * const { host, port, url } = emu.smtp!; // url: 'smtp://127.0.0.1:40123'
 */
export interface EmulatorSmtp {
  readonly host: string;
  readonly port: number;
  /** `smtp://HOST:PORT`, a host that reaches it from this machine. */
  readonly url: string;
}

/**
 * Starts the emulator's SMTP listener.
 * @param baseUrl the emulator's own URL (loopback)
 * @throws {EmlApiError} `ECONFIG` for a bad `smtp` option, a port it cannot listen on or a missing smtp-server
 */
export async function startSmtpIngest(
  options: EmulatorSmtpOptions,
  state: EmulatorState,
  baseUrl: string,
  apiKey: string,
  defaultHost: string,
): Promise<{ smtp: EmulatorSmtp; close(): Promise<void> }> {
  const { startEmlApiRelay } = await import('../relay/start-smtp-relay.js');
  const stats = state.smtpStats;
  const log = options.logger;
  // The relay tells of each message in its log: counted here for /api/v1/info.
  const logger: EmlApiLogger = {
    debug: (meta, message) => log?.debug(meta, message),
    info(meta, message) {
      if (message === 'Message accepted') {
        stats.accepted++;
        stats.acceptedSize += typeof meta.bytes === 'number' ? meta.bytes : 0;
      }
      log?.info(meta, message);
    },
    warn(meta, message) {
      if (message.startsWith('Message refused')) stats.rejected++;
      log?.warn(meta, message);
    },
    error(meta, message) {
      if (message.startsWith('Message refused')) stats.rejected++;
      log?.error(meta, message);
    },
  };
  let relay: EmlApiRelay;
  try {
    relay = await startEmlApiRelay({
      baseUrl,
      apiKey,
      port: options.port ?? 0,
      host: options.host ?? defaultHost,
      ...(options.allowFrom === undefined ? {} : { allowUnauthenticatedFrom: options.allowFrom }),
      hostname: 'emulator.eml-api.test',
      logger,
    });
  } catch (err) {
    if (err instanceof EmlApiError && err.code === 'ECONFIG') {
      throw new EmlApiError(
        'ECONFIG',
        err.message
          .replace(/^Invalid option allowUnauthenticatedFrom/, 'Invalid option smtp.allowFrom')
          .replace(/^Invalid option (port|host)\b/, 'Invalid option smtp.$1'),
        { cause: err, permanent: true },
      );
    }
    throw err;
  }
  const host = relay.host === '0.0.0.0' ? '127.0.0.1' : relay.host === '::' ? '::1' : relay.host;
  return {
    smtp: { host, port: relay.port, url: `smtp://${host.includes(':') ? `[${host}]` : host}:${relay.port}` },
    close: async () => {
      await relay.close();
    },
  };
}
