import type { EmlApiClientOptions } from '../client/client-options.js';
import type { EmlApiLogger } from '../shared/logger.js';

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
}
