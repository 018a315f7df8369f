import type { EmlApiClientOptions } from '../client/client-options.js';
import { CLIENT_OPTIONS, CLIENT_RENAMED } from '../client/client-options.js';
import { refuseUnknownKeys } from '../shared/options-kit.js';
import type { EmlApiLogger } from '../shared/logger.js';
import type { MetricsOption } from '../observability/metrics.js';
import { resolveBuildThreads } from './build-threads/pool.js';

/**
 * Options of {@link EmlApiTransport}: every {@link EmlApiClientOptions} option,
 * plus the transport's own.
 *
 * @example
 * const transporter = nodemailer.createTransport(
 *   new EmlApiTransport({ apiKey: process.env.EML_API_KEY!, baseUrl: 'https://api.mail.example.com', logger: true }),
 * );
 */
export interface EmlApiTransportOptions extends EmlApiClientOptions {
  /**
   * Where the transport logs: `true` for the console, or a logger object
   * (pino, bunyan, console...). The API key is never logged.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
  /**
   * Build messages on this many worker threads instead of the thread that
   * calls `sendMail` (`'auto'`: one per core, `os.availableParallelism()`).
   * Nodemailer's build (MIME encoding, DKIM signing, reading attachment
   * files) is most of a send's CPU: on threads, the app's own thread stays
   * free and sends go out faster on a machine with cores to spare. The bytes
   * are the same as a build on the sending thread. Messages a thread cannot
   * reproduce (stream or function content, a stream plugin, values that are
   * not plain data, in-memory contents over 2 MiB) are built on the sending
   * thread, and the debug log says why. Threads start with the first send
   * that needs one, are reused, never keep the process alive while idle,
   * and end with `close()`; each costs some memory (see BENCHMARKS.md).
   * @default undefined (off: messages are built on the sending thread)
   * @example
   * new EmlApiTransport({ apiKey, baseUrl, buildThreads: 2 });
   */
  buildThreads?: number | 'auto' | false;
  /**
   * Prometheus metrics of the sends (`eml_api_sends_total`, `eml_api_send_retries_total`,
   * `eml_api_upload_bytes`, `eml_api_upload_duration_seconds`, with `component="transport"`):
   * `true` for prom-client's default registry, or `{ registry }` for yours. Needs the
   * optional peer `prom-client` (`npm install prom-client`). See docs/operations.md.
   * @default false
   * @example
   * new EmlApiTransport({ apiKey, baseUrl, metrics: { registry } });
   */
  metrics?: MetricsOption;
}

/** Names of the options the transport takes besides the client's. */
const TRANSPORT_OPTIONS = ['buildThreads', 'metrics'] as const satisfies readonly (keyof EmlApiTransportOptions)[];

/**
 * Splits the transport's own options from the client's, checking them.
 *
 * @returns the client's options and the number of build threads (0: none)
 * @throws {EmlApiError} `ECONFIG` naming the option (an unknown one too, with the nearest valid name)
 */
export function splitTransportOptions(options: EmlApiTransportOptions): {
  clientOptions: EmlApiClientOptions;
  buildThreads: number;
  /** The `metrics` option as given (checked where the metrics are made). */
  metrics?: MetricsOption;
} {
  if (typeof options !== 'object' || options === null) return { clientOptions: options, buildThreads: 0 };
  refuseUnknownKeys(options, [...CLIENT_OPTIONS, ...TRANSPORT_OPTIONS], '', CLIENT_RENAMED);
  const { buildThreads, metrics, ...clientOptions } = options;
  return {
    clientOptions,
    buildThreads: resolveBuildThreads(buildThreads),
    ...(metrics === undefined ? {} : { metrics }),
  };
}
