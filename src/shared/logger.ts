/**
 * A logger the transport writes to: any object with these methods, such as
 * console, pino or bunyan (which take an object first and a message second).
 *
 * @example
 * new EmlApiTransport({ apiKey, baseUrl, logger: pino() });
 */
export interface EmlApiLogger {
  debug(meta: Record<string, unknown>, message: string): void;
  info(meta: Record<string, unknown>, message: string): void;
  warn(meta: Record<string, unknown>, message: string): void;
  error(meta: Record<string, unknown>, message: string): void;
}

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

const silentLogger: EmlApiLogger = { debug() {}, info() {}, warn() {}, error() {} };

const consoleLogger: EmlApiLogger = {
  debug: (meta, message) => console.debug(`[EmlApiTransport] DEBUG ${message}`, meta),
  info: (meta, message) => console.info(`[EmlApiTransport] INFO ${message}`, meta),
  warn: (meta, message) => console.warn(`[EmlApiTransport] WARN ${message}`, meta),
  error: (meta, message) => console.error(`[EmlApiTransport] ERROR ${message}`, meta),
};

/** Picks the logger for a `logger` option value: `true` logs to the console, `false`/absent is silent. */
export function resolveLogger(option: boolean | EmlApiLogger | undefined): EmlApiLogger {
  if (option === undefined || option === false) return silentLogger;
  if (option === true) return consoleLogger;
  const logger = {} as EmlApiLogger;
  let warned = false;
  for (const level of LEVELS) {
    // Some loggers (console) lack levels or need their own `this`.
    const fn = typeof option[level] === 'function' ? option[level] : undefined;
    logger[level] = fn
      ? (meta, message) => {
          try {
            fn.call(option, meta, message);
          } catch (err) {
            // A logger that throws must not fail a send (after the service accepted it, the app would send it
            // again) nor leave its spool file behind: the line is lost, and Node's warning says so once.
            if (warned) return;
            warned = true;
            process.emitWarning(
              `The logger passed to nodemailer-eml-api threw (${(err as Error)?.message ?? String(err)}); its lines are dropped`,
              { code: 'EML_API_LOGGER_THREW' },
            );
          }
        }
      : () => {};
  }
  return logger;
}
