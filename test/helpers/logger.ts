import { inspect } from 'node:util';
import type { EmlApiLogger } from '../../src/index.js';

/** A level of {@link EmlApiLogger}. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

/** One line a {@link capturingLogger} kept. */
export interface LogLine {
  level: LogLevel;
  meta: Record<string, unknown>;
  message: string;
}

/** A logger that keeps every line it is given, for the tests to read: the one capturing logger of the suite. */
export interface CapturingLogger extends EmlApiLogger {
  /** Every line, in order. */
  readonly lines: LogLine[];
  /** The lines at `levels` (every level when none is named). */
  at(...levels: LogLevel[]): LogLine[];
  /** The messages at `levels` (every level when none is named). */
  messages(...levels: LogLevel[]): string[];
  /**
   * Every line, meta and message, as `util.inspect` printed them in full when they were logged (with
   * `{ inspect: true }`): to check that a secret shows nowhere.
   */
  inspected(): string[];
  /** Forgets the lines kept so far. */
  clear(): void;
}

/**
 * A logger that keeps what it is given.
 * @example
 * const logger = capturingLogger();
 * new EmlApiTransport({ apiKey, baseUrl, logger });
 * expect(logger.messages('warn')).toEqual([expect.stringContaining('Envelope sender differs')]);
 */
export function capturingLogger({ inspect: inspectLines = false }: { inspect?: boolean } = {}): CapturingLogger {
  const lines: LogLine[] = [];
  const inspected: string[] = [];
  const keep = (level: LogLevel) => (meta: Record<string, unknown>, message: string) => {
    lines.push({ level, meta, message });
    if (inspectLines) inspected.push(inspect([meta, message], { depth: Infinity }));
  };
  const at = (...levels: LogLevel[]) =>
    levels.length === 0 ? [...lines] : lines.filter((l) => levels.includes(l.level));
  return {
    lines,
    debug: keep('debug'),
    info: keep('info'),
    warn: keep('warn'),
    error: keep('error'),
    at,
    messages: (...levels) => at(...levels).map((l) => l.message),
    inspected: () => {
      if (!inspectLines) throw new Error('capturingLogger({ inspect: true }) keeps the inspected lines');
      return [...inspected];
    },
    clear: () => {
      lines.length = 0;
      inspected.length = 0;
    },
  };
}

/** A logger that drops everything (where a test must pass one). */
export const silentLogger: EmlApiLogger = { debug() {}, info() {}, warn() {}, error() {} };
