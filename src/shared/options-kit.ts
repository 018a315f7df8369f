import { createRequire } from 'node:module';
import { EmlApiError } from './eml-api-error.js';

// The one way every component checks its options: `ECONFIG` naming the option path, short descriptions of bad
// values, and unknown keys refused with the nearest valid name.

export function configError(option: string, problem: string): EmlApiError {
  return new EmlApiError('ECONFIG', `Invalid option ${option}: ${problem}`, { permanent: true });
}

/** A short description of a value for error messages, never the value of a secret object. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.slice(0, 50))}`;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return typeof value === 'object' ? 'an object' : typeof value;
}

/**
 * A whole number from `min` to `max`, or `fallback` when absent.
 * @param fallback the default (none: the option is required)
 */
export function wholeNumber(value: unknown, option: string, min: number, max: number, fallback?: number): number {
  const v = value === undefined ? fallback : value;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw configError(option, `expected a whole number from ${min} to ${max}, got ${describe(v)}`);
  }
  return v;
}

/** A finite number above 0 (a rate), or `fallback` when absent. */
export function positiveNumber(value: unknown, option: string, fallback?: number): number {
  const v = value === undefined ? fallback : value;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw configError(option, `expected a positive number, got ${describe(v)}`);
  }
  return v;
}

/** A share from 0 to 1 (a `jitter`), or `fallback` when absent. */
export function share(value: unknown, option: string, fallback: number): number {
  const v = value === undefined ? fallback : value;
  if (typeof v !== 'number' || !(v >= 0 && v <= 1)) {
    throw configError(option, `expected a number from 0 to 1, got ${describe(v)}`);
  }
  return v;
}

/** One of `values`, or `fallback` when absent. */
export function oneOf<T extends string>(value: unknown, option: string, values: readonly T[], fallback?: T): T {
  const v = value === undefined ? fallback : value;
  if (typeof v === 'string' && (values as readonly string[]).includes(v)) return v as T;
  throw configError(option, `expected ${values.map((x) => `'${x}'`).join(', ')}, got ${describe(v)}`);
}

export function booleanOption(value: unknown, option: string, fallback: boolean): boolean;
export function booleanOption(value: unknown, option: string, fallback?: boolean): boolean | undefined;
export function booleanOption(value: unknown, option: string, fallback?: boolean): boolean | undefined {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw configError(option, `expected true or false, got ${describe(value)}`);
  return value;
}

/** A plain object; `shape` is what it should look like, for the error, e.g. `{ max, duration }`. */
export function objectOption(value: unknown, option: string, shape: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError(option, `expected ${shape}, got ${describe(value)}`);
  }
  return value as Record<string, unknown>;
}

/** A `logger` option (`true` for the console, `false`, or a logger object) as a logger, silent when none was given. */
export function loggerOption(value: unknown): EmlApiLogger {
  if (value !== undefined && typeof value !== 'boolean' && (typeof value !== 'object' || value === null)) {
    throw configError('logger', `expected true, false or a logger object (pino, console...), got ${describe(value)}`);
  }
  return resolveLogger(value as boolean | EmlApiLogger | undefined);
}

/**
 * Refuses a key not among `known`, since a misspelt option would be ignored in silence; keep `known` a `const` list
 * `satisfies readonly (keyof XOptions)[]` so the compiler keeps it in step with the options type.
 * @param where the path of the object checked, with its dot (`'retry.'`), or '' at the top
 * @throws {EmlApiError} `ECONFIG` naming the key and the nearest valid one
 */
export function refuseUnknownKeys(options: object, known: readonly string[], where: string): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const shown = `${where}${key.slice(0, 64)}`;
    const nearest = nearestName(key, known);
    throw configError(
      shown,
      `unknown option${nearest ? `; did you mean ${where}${nearest}?` : ''} (known: ${known.join(', ')})`,
    );
  }
}

/** The name among `names` closest to `typo` (edit distance, case ignored), when close enough to be the one meant. */
export function nearestName(typo: string, names: readonly string[]): string | undefined {
  const wanted = typo.toLowerCase();
  let best: string | undefined;
  // A few edits, and fewer than the typo has letters, so short nonsense matches nothing.
  let bestDistance = Math.min(Math.max(3, Math.floor(wanted.length / 3)), wanted.length - 1);
  for (const name of names) {
    const distance = editDistance(wanted, name.toLowerCase());
    if (distance <= bestDistance) {
      best = name;
      bestDistance = distance - 1;
    }
  }
  return best;
}

/** Levenshtein distance with one row of memory: option names are short. */
function editDistance(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Infinity;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length]!;
}

/**
 * A logger: any object with these methods, such as console, pino or bunyan (object first, message second).
 * @example new EmlApiTransport({ apiKey, baseUrl, logger: pino() });
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
  debug: (meta, message) => console.debug(`[nodemailer-eml-api] DEBUG ${message}`, meta),
  info: (meta, message) => console.info(`[nodemailer-eml-api] INFO ${message}`, meta),
  warn: (meta, message) => console.warn(`[nodemailer-eml-api] WARN ${message}`, meta),
  error: (meta, message) => console.error(`[nodemailer-eml-api] ERROR ${message}`, meta),
};

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
            // A logger that throws must not fail a send the service accepted (the app would send it again) nor leave
            // its spool file behind: the line is lost, and Node's warning says so once.
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

// Synchronous, so an entry point can check its peer as it is imported, in the ESM and the CJS build alike.
const requireFromHere = createRequire(import.meta.url);

/**
 * Loads a peer dependency the part in use needs (mailparser, bullmq, smtp-server), with an error that says what to
 * install when it is missing.
 * @param install what to install, e.g. `mailparser@3.9.31`
 * @param user the part that needs it, e.g. `The emulator`
 * @throws {EmlApiError} `ECONFIG` when the package is not installed
 */
export function requirePeer<T>(name: string, install: string, user: string): T {
  try {
    return requireFromHere(name) as T;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'MODULE_NOT_FOUND' && e.message.includes(`'${name}'`)) {
      throw new EmlApiError(
        'ECONFIG',
        `${user} needs the package "${name}", an optional peer dependency of nodemailer-eml-api: run npm install ${install}`,
        { cause: err, permanent: true },
      );
    }
    throw err;
  }
}

/** Whether an error is {@link requirePeer}'s, which the CLI reports as a failure to fix by installing (exit code 1). */
export function isMissingPeer(err: unknown): boolean {
  return (
    err instanceof EmlApiError &&
    err.code === 'ECONFIG' &&
    (err.cause as NodeJS.ErrnoException | undefined)?.code === 'MODULE_NOT_FOUND'
  );
}
