import { redact } from '../../http/redact.js';
import type { EmlApiLogger } from '../../shared/logger.js';
import type { CliIo, CliOutput } from '../cli-io.js';

/**
 * How `eml-api relay` and `eml-api worker` write what they log: `text`, one
 * line for a person (today's format), or `json`, one JSON object per line
 * for a log pipeline (Loki, Elasticsearch, CloudWatch), with the fields
 * below under fixed names.
 * @example
 * const format: LogFormat = 'json';
 */
export type LogFormat = 'text' | 'json';

/**
 * A JSON log line's level.
 * @example
 * const level: LogLevel = 'warn';
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

/**
 * What the package's loggers and the CLI call things, and what a JSON line
 * calls them: fixed names a query can rely on, whichever part logged it.
 */
const FIELD_NAMES: Record<string, string> = {
  job: 'queue_id',
  queueId: 'queue_id',
  messageId: 'message_id',
  session: 'session_id',
  client: 'client_address',
  bytes: 'bytes',
  recipients: 'recipients',
  delayMs: 'delay_ms',
  pauseMs: 'pause_ms',
  addedBcc: 'added_bcc',
  err: 'error',
  error: 'error',
};

/**
 * Fields never written, whatever a caller put in them: the package never
 * logs a key or content, and a JSON line keeps it so (`key` is the relay's
 * word for whose key a message went with: `relay`, or a key's fingerprint).
 */
const NEVER = /^(api_?key|password|pass|secret|authorization|token|content|body|raw|html|text|data)$/i;

/**
 * One JSON log line: `time` (ISO 8601), `level`, `msg`, then the fields
 * under their fixed names (`queue_id`, `message_id`, `id` for the
 * service's id, `reply` and `reply_code` for an SMTP reply, `code` and
 * `status` for an error). Every string has the secrets taken out.
 *
 * @param secrets strings never written (the API key, a Redis password)
 * @example
 * jsonLogLine('info', 'Message accepted', { id: 'msg_1', messageId: '<a@b>' }, []);
 * // '{"time":"...","level":"info","msg":"Message accepted","id":"msg_1","message_id":"<a@b>"}\n'
 */
export function jsonLogLine(
  level: LogLevel,
  message: string,
  meta: Record<string, unknown>,
  secrets: readonly string[],
): string {
  const line: Record<string, unknown> = { time: new Date().toISOString(), level, msg: message };
  for (const [key, value] of Object.entries(meta)) {
    if (value === undefined || NEVER.test(key)) continue;
    const name = key === 'key' ? 'key_id' : (FIELD_NAMES[key] ?? snakeCase(key));
    line[name] = value;
    if (key === 'reply' && typeof value === 'string' && /^\d{3}\b/.test(value)) {
      line.reply_code = Number(value.slice(0, 3));
    }
  }
  // The relay's `id` is the service's id, or the outbox's job id under store-and-forward.
  if (meta.destination === 'outbox' && meta.id !== undefined) line.queue_id ??= meta.id;
  if (message === 'Message accepted') line.reply_code ??= 250;
  const text = JSON.stringify(line, (_key, value: unknown) =>
    typeof value === 'string' ? secrets.reduce((said, secret) => redact(said, secret), value) : value,
  );
  return `${text}\n`;
}

/**
 * A logger writing {@link jsonLogLine}s, `debug` left out.
 * @example
 * startEmlApiRelay({ ..., logger: jsonLogger(io.stdout, [apiKey]) });
 */
export function jsonLogger(out: CliOutput, secrets: readonly string[]): EmlApiLogger {
  const write = (level: LogLevel) => (meta: Record<string, unknown>, message: string) =>
    out.write(jsonLogLine(level, message, meta ?? {}, secrets));
  return { debug: () => {}, info: write('info'), warn: write('warn'), error: write('error') };
}

/**
 * The command's streams in JSON mode: what it prints as plain text (its
 * startup lines, its notes on standard error) becomes a JSON line too
 * (`info` from standard output, `warn` from standard error), so that every
 * line of its output is one JSON object. Both go to standard output, the
 * one stream a log pipeline reads in order.
 * @example
 * const out = logFormat === 'json' ? jsonIo(io, [apiKey]) : io;
 */
export function jsonIo(io: CliIo, secrets: readonly string[]): JsonCliIo {
  const lines = (level: LogLevel): CliOutput => ({
    write: (chunk: string) => {
      for (const text of chunk.split('\n')) {
        if (text.trim() === '') continue;
        const warning = /^(warning|note): /.exec(text);
        io.stdout.write(
          jsonLogLine(warning ? 'warn' : level, warning ? text.slice(warning[0].length) : text, {}, secrets),
        );
      }
      return true;
    },
  });
  return { ...io, stdout: lines('info'), stderr: lines('warn'), jsonLogger: jsonLogger(io.stdout, secrets) };
}

/**
 * A command's streams in JSON mode, with the logger its parts (the relay, the outbox) write to.
 * @example
 * const logger = isJsonIo(io) ? io.jsonLogger : lineLogger(io);
 */
export interface JsonCliIo extends CliIo {
  readonly jsonLogger: EmlApiLogger;
}

/**
 * Whether the streams are {@link jsonIo}'s.
 * @example
 * if (isJsonIo(io)) return io.jsonLogger;
 */
export function isJsonIo(io: CliIo): io is JsonCliIo {
  return typeof (io as Partial<JsonCliIo>).jsonLogger === 'object';
}

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
