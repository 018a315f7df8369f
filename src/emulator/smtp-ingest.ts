import type { EmlApiRelay } from '../relay/start-smtp-relay.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import type { EmulatorState } from './state/emulator-state.js';

// SMTP in, as Mailpit's port 1025: the package's own SMTP relay pointed at the emulator's API with its ready key, so
// mail takes an API send's way into the inbox and the relay answers as in production. It is loaded only when `smtp`
// is asked for, so smtp-server stays an optional peer.

/** SMTP in of the emulator (its `smtp` option). */
export interface EmulatorSmtpOptions {
  port?: number;
  host?: string;
  allowFrom?: string[];
  logger?: EmlApiLogger;
}

/** A running SMTP listener of the emulator (`emu.smtp`). */
export interface EmulatorSmtp {
  readonly host: string;
  readonly port: number;
  readonly url: string;
}

/**
 * Starts the emulator's SMTP listener on the emulator's own loopback `baseUrl`.
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
