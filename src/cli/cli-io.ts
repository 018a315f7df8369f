import { inspect } from 'node:util';
import { readFile } from 'node:fs/promises';
import { EmlApiError } from '../shared/eml-api-error.js';
import { nearestName } from '../shared/options-kit.js';

/** A stream the CLI writes text to: `process.stdout`, `process.stderr`, or a test's capture. */
export interface CliOutput {
  write(chunk: string): unknown;
  /** The progress bar is drawn only on a terminal. */
  isTTY?: boolean;
}

/** Everything the CLI reads from or writes to its process, so {@link runCli} can run in-process with captured streams. */
export interface CliIo {
  stdout: CliOutput;
  stderr: CliOutput;
  /** Read by `send -` and `group add <group> -`. */
  stdin: AsyncIterable<string | Uint8Array>;
  /** Where `EML_API_URL`, `EML_API_KEY` and `CI` are read. */
  env: Readonly<Record<string, string | undefined>>;
  /** Stops long-running commands (`serve`, `relay`), which otherwise run until SIGINT or SIGTERM. */
  signal?: AbortSignal;
}

/** The process's own streams and environment, completed with the fields a caller gave. */
export function resolveCliIo(io: Partial<CliIo> = {}): CliIo {
  return {
    stdout: io.stdout ?? processOutput(process.stdout),
    stderr: io.stderr ?? processOutput(process.stderr),
    stdin: io.stdin ?? process.stdin,
    env: io.env ?? process.env,
    ...(io.signal ? { signal: io.signal } : {}),
  };
}

const processOutputs = new Map<NodeJS.WriteStream, CliOutput>();

/**
 * The process's stream, which stops writing once its reader is gone (`eml-api inbox list | head -1`):
 * no crash on EPIPE; a command that runs until stopped stops as on SIGTERM, as SIGPIPE would stop it.
 */
function processOutput(stream: NodeJS.WriteStream): CliOutput {
  let output = processOutputs.get(stream);
  if (output) return output;
  let closed = false;
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (closed) return;
    if (err.code !== 'EPIPE') throw err;
    closed = true;
    if (process.listenerCount('SIGTERM') > 0) process.emit('SIGTERM', 'SIGTERM');
  });
  output = {
    write: (chunk: string) => closed || stream.write(chunk),
    get isTTY() {
      return stream.isTTY;
    },
  };
  processOutputs.set(stream, output);
  return output;
}

/** A mistake in the command line: printed in one line with a pointer to the help, exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Exit codes scripts can rely on. */
export const EXIT = {
  ok: 0,
  /** The operation failed (service error, unreachable, refused key, unreadable or invalid input). */
  failed: 1,
  usage: 2,
  /** `group check`: at least one address is not a member. */
  notMember: 3,
  /** `relay`, `worker`: stopped when `--grace` ran out, with work in flight given up or handed back. */
  cutShort: 4,
} as const;

/** A {@link UsageError} or an error of `node:util` `parseArgs` (unknown option, missing value...). */
export function isUsageError(err: unknown): boolean {
  if (err instanceof UsageError) return true;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS');
}

/** ` did you mean "send"?` for a mistyped command, subcommand or flag near one of `names`; '' otherwise. */
export function didYouMean(typo: string, names: readonly string[], quote = '"'): string {
  const strip = (name: string) => name.replace(/^-+/, '');
  const wanted = strip(typo);
  const nearest = nearestName(wanted, names.map(strip));
  // Or the one name the typo begins: parseArgs takes no abbreviation.
  const begun = names.filter((n) => wanted.length >= 3 && strip(n).startsWith(wanted));
  // Or the longest name the typo extends with a word of its own: --redis-url, --key-file.
  const extended = names
    .filter((n) => strip(n).length >= 3 && wanted.startsWith(`${strip(n)}-`))
    .sort((a, b) => b.length - a.length)[0];
  const name =
    nearest !== undefined ? names.find((n) => strip(n) === nearest) : begun.length === 1 ? begun[0] : extended;
  return name === undefined ? '' : `; did you mean ${quote}${name}${quote}?`;
}

/** Options whose flag is not their name in `--kebab-case`. */
const OPTION_FLAGS: Readonly<Record<string, string>> = {
  baseUrl: '--url',
  apiKey: '--key',
  connection: '--redis',
  queueName: '--queue',
};

const FLAG_VARIABLES: Readonly<Record<string, string>> = {
  '--url': 'EML_API_URL',
  '--key': 'EML_API_KEY',
  '--redis': 'REDIS_URL',
};

/**
 * A message of the package's code in the words of the command line, for the flags the command has:
 * `Invalid option baseUrl: ...` becomes `--url (or EML_API_URL): ...`, `set allowInsecureHttp: true`
 * becomes `pass --allow-insecure-http`. Options without a flag keep their name.
 */
export function inFlagWords(message: string, flags: readonly string[]): string {
  const flagOf = (option: string): string | undefined => {
    const flag = OPTION_FLAGS[option] ?? `--${option.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    return flags.includes(flag) ? flag : undefined;
  };
  const head = /^Invalid option (\w+): /.exec(message);
  const flag = head ? flagOf(head[1]!) : undefined;
  let text = head && flag ? message.slice(head[0].length) : message;
  text = text
    .replace(/\bset (\w+): true\b/g, (whole, option: string) => {
      const f = flagOf(option);
      return f ? `pass ${f}` : whole;
    })
    .replace(/\bthe (\w+) option\b/g, (whole, option: string) => flagOf(option) ?? whole);
  if (!flag) return text;
  const variable = FLAG_VARIABLES[flag];
  return `${flag}${variable ? ` (or ${variable})` : ''}: ${text}`;
}

/**
 * Reads a flag that takes a whole number.
 * @param value the flag's text, or undefined when it was not given
 * @param fallback what an absent flag means
 * @throws {UsageError} naming the flag, the range and what was given
 */
export function wholeFlag(
  value: string | undefined,
  flag: string,
  min: number,
  max: number,
  fallback?: number,
): number {
  if (value === undefined && fallback !== undefined) return fallback;
  const n = Number(value);
  if (value === undefined || !/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    const range = max >= Number.MAX_SAFE_INTEGER ? `a whole number of at least ${min}` : `${min}-${max}`;
    throw new UsageError(`${flag}: expected ${range}, got ${JSON.stringify(value ?? '')}`);
  }
  return n;
}

/**
 * The one line the CLI prints for a failure, the error code after it when the client gave one, e.g.
 * `POST /v1/send/eml failed, the service refused the API key (401 invalid_api_key): ... [EAUTH]`.
 */
export function formatErrorLine(err: unknown): string {
  // The message may quote the service: made safe for the terminal after joining its lines.
  const message = terminalText(
    (err instanceof Error ? err.message : String(err)).replace(/\s*[\r\n]+\s*/g, ' ').trim(),
  );
  const api =
    err instanceof EmlApiError ? err : err instanceof Error && err.cause instanceof EmlApiError ? err.cause : undefined;
  return api ? `${message} [${api.code}]` : message;
}

/** Everything known about a failure, stack and causes included, for `--debug`. */
export function formatErrorDetails(err: unknown): string {
  return inspect(err, { depth: 4 });
}

const ESC = 0x1b;
const BEL = 0x07;
const CSI = 0x9b;

/**
 * Text from elsewhere (the service's messages, job data) made safe to print on a terminal: escape
 * sequences and C1 controls and bidirectional overrides removed, other control characters and line
 * breaks turned into a space, so nothing a service or a job says can rewrite the screen or disguise itself.
 */
export function terminalText(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === ESC) {
      i = endOfEscape(text, i + 1);
    } else if (c === CSI) {
      i = endOfControlSequence(text, i + 1);
    } else if ((c >= 0x80 && c <= 0x9f) || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)) {
      // Other C1 controls, bidirectional overrides and isolates.
    } else if (c < 0x20 || c === 0x7f) {
      if (!out.endsWith(' ')) out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

/** The last index of the escape sequence whose ESC is just before `at`. */
function endOfEscape(text: string, at: number): number {
  const kind = text[at];
  if (kind === undefined) return at - 1;
  if (kind === '[') return endOfControlSequence(text, at + 1);
  // Strings: OSC (titles, hyperlinks) ends with BEL or ESC \; DCS, SOS, PM and APC with ESC \.
  if (kind === ']' || kind === 'P' || kind === 'X' || kind === '^' || kind === '_') {
    for (let i = at + 1; i < text.length; i++) {
      if (kind === ']' && text.charCodeAt(i) === BEL) return i;
      if (text.charCodeAt(i) === ESC && text[i + 1] === '\\') return i + 1;
    }
    return text.length - 1;
  }
  // Other escapes: intermediates (0x20-0x2f), then one final character.
  let i = at;
  while (i < text.length && text.charCodeAt(i) >= 0x20 && text.charCodeAt(i) <= 0x2f) i++;
  return Math.min(i, text.length - 1);
}

/** The final character (0x40-0x7e) of a control sequence whose parameters start at `at`. */
function endOfControlSequence(text: string, at: number): number {
  let i = at;
  while (i < text.length && text.charCodeAt(i) >= 0x20 && text.charCodeAt(i) <= 0x3f) i++;
  return Math.min(i, text.length - 1);
}

/** Resolves when the signal aborts or, without one, on SIGINT or SIGTERM. */
export function untilStopped(signal: AbortSignal | undefined): Promise<void> {
  if (signal) {
    return new Promise((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }
  return new Promise((resolve) => {
    const stop = () => {
      dispose();
      resolve();
    };
    const dispose = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      stopListeners.delete(dispose);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    stopListeners.add(dispose);
  });
}

const stopListeners = new Set<() => void>();

/** The first and second stop requests: SIGINT/SIGTERM, or the abort of `signal` (tests), which counts as the first. */
export function stopSignals(signal: AbortSignal | undefined): {
  first: Promise<void>;
  second: Promise<void>;
  /** As a second request does (a group's primary says so). */
  hurry: () => void;
  dispose: () => void;
  /** As dispose, once the command has stopped: a later signal exits with its code rather than killing the process. */
  done: () => void;
} {
  let count = 0;
  let resolveFirst!: () => void;
  let resolveSecond!: () => void;
  const first = new Promise<void>((resolve) => (resolveFirst = resolve));
  const second = new Promise<void>((resolve) => (resolveSecond = resolve));
  const onStop = () => {
    count++;
    if (count === 1) resolveFirst();
    else resolveSecond();
  };
  const hurry = () => {
    resolveFirst();
    resolveSecond();
  };
  if (signal) {
    if (signal.aborted) onStop();
    else signal.addEventListener('abort', onStop, { once: true });
    const dispose = () => signal.removeEventListener('abort', onStop);
    return { first, second, hurry, dispose, done: dispose };
  }
  process.on('SIGINT', onStop);
  process.on('SIGTERM', onStop);
  return {
    first,
    second,
    hurry,
    dispose: () => {
      process.off('SIGINT', onStop);
      process.off('SIGTERM', onStop);
    },
    done: () => {
      process.off('SIGINT', onStop);
      process.off('SIGTERM', onStop);
      // The command is done: a signal from now on exits with its code (set as it returns), instead of killing it.
      const late = () => setImmediate(() => process.exit(process.exitCode ?? 0));
      process.once('SIGINT', late);
      process.once('SIGTERM', late);
    },
  };
}

/** Removes the listeners of waiting {@link untilStopped} calls: a command that fails to start leaves none behind. */
export function stopListeningForSignals(): void {
  for (const dispose of [...stopListeners]) dispose();
}

/**
 * Reads the named file, or standard input for `-`.
 * @param what names the input in the hint printed when standard input is a terminal, e.g. `the message`
 * @throws {Error} in one line naming the file when it cannot be read
 */
export async function readInput(source: string, io: Pick<CliIo, 'stdin' | 'stderr'>, what: string): Promise<Buffer> {
  if (source === '-') {
    // Otherwise a terminal waits for its input with nothing on the screen, as if the command hung.
    if ((io.stdin as { isTTY?: boolean }).isTTY === true) {
      io.stderr.write(`eml-api: reading ${what} from the terminal; end it with Ctrl-D on a line of its own\n`);
    }
    return readAll(io.stdin);
  }
  try {
    return await readFile(source);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const reason =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EISDIR'
          ? 'it is a directory'
          : code === 'EACCES'
            ? 'permission denied'
            : (err as Error).message;
    throw new Error(`cannot read ${JSON.stringify(source)}: ${reason}`, { cause: err });
  }
}

/** Reads a stream to its end. */
export async function readAll(stream: AsyncIterable<string | Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks);
}
