import type { OutboxEncryption } from '../../queue/content-cipher.js';
import type { OutboxClusterConnection } from '../../queue/redis-connection.js';
import { UsageError, wholeFlag, type CliIo, type CliOutput } from '../cli-io.js';
import { loadPromClient } from '../../observability/metrics.js';
import { redact } from '../../http/request-error.js';
import { isMissingPeer, type EmlApiLogger } from '../../shared/options-kit.js';
import { EmlApiClient } from '../../client/eml-api-client.js';
import { EmlApiError } from '../../shared/eml-api-error.js';

/**
 * `parseArgs` options of the commands that use the outbox's Redis; `--redis` may be repeated, for the
 * nodes of a Redis Cluster.
 */
export const REDIS_ARG_OPTIONS = {
  redis: { type: 'string', multiple: true },
  'redis-cluster': { type: 'boolean' },
  queue: { type: 'string' },
  prefix: { type: 'string' },
} as const;

/** Help lines of {@link REDIS_ARG_OPTIONS}. */
export const REDIS_OPTIONS_HELP = `  --redis <url>           Redis of the outbox, redis:// or rediss:// (or REDIS_URL); repeated (or
                          REDIS_URL="<url>,<url>"), the nodes of a Redis Cluster
  --redis-cluster         the URL is a node of a Redis Cluster (or REDIS_CLUSTER=1; several URLs say so
                          already); the prefix then needs a hash tag, e.g. --prefix '{eml-api}'
  --queue <name>          queue name (default eml-api)
  --prefix <prefix>       Redis key prefix of the queue (default bull)
`;

/** Help lines of the environment variables of the outbox's Redis. */
export const REDIS_ENV_HELP = `REDIS_URL is the outbox's Redis (comma-separated for a cluster's nodes), REDIS_CLUSTER=1
says it is a cluster, REDIS_PASSWORD its password (every node's) when the URLs give none: a
password in a --redis flag shows in ps to every user of the machine; in the environment it does not.
`;

/** Flag values of {@link REDIS_ARG_OPTIONS} after parsing. */
export interface RedisFlags {
  redis?: string[] | undefined;
  'redis-cluster'?: boolean | undefined;
  queue?: string | undefined;
  prefix?: string | undefined;
}

/** One server's URL, or a cluster's nodes (several URLs, or `--redis-cluster`). */
export interface RedisConnectionFlags {
  connection: string | OutboxClusterConnection;
  /** A password given in a flag, which `ps` shows. */
  warning?: string;
}

/**
 * The outbox's Redis from `--redis` and `--redis-cluster`, else `REDIS_URL` (comma-separated for a
 * cluster) and `REDIS_CLUSTER`; `REDIS_PASSWORD` is the password of URLs that give none.
 * @throws {UsageError} when no Redis is given, or `REDIS_CLUSTER` is not a yes or no (exit code 2)
 */
export function redisConnection(
  flags: Pick<RedisFlags, 'redis' | 'redis-cluster'>,
  env: Readonly<Record<string, string | undefined>>,
): RedisConnectionFlags {
  const fromFlags = (flags.redis ?? []).flatMap(split);
  const urls = fromFlags.length > 0 ? fromFlags : split(env.REDIS_URL ?? '');
  if (urls.length === 0) throw new UsageError('no Redis: pass --redis or set REDIS_URL (e.g. redis://127.0.0.1:6379)');
  const cluster = urls.length > 1 || (flags['redis-cluster'] ?? yesOrNo(env.REDIS_CLUSTER, 'REDIS_CLUSTER'));
  const password = env.REDIS_PASSWORD || undefined;
  const warning = fromFlags.some(hasPassword)
    ? 'a password in --redis shows in ps to every user of this machine: put it in REDIS_PASSWORD (or the URL in REDIS_URL)'
    : undefined;
  const withWarning = <T extends object>(value: T): T & { warning?: string } =>
    warning === undefined ? value : { ...value, warning };
  if (!cluster) return withWarning({ connection: password ? withPassword(urls[0]!, password) : urls[0]! });
  return withWarning({
    connection: {
      cluster: urls,
      ...(password && !urls.some(hasPassword) ? { clusterOptions: { redisOptions: { password } } } : {}),
    },
  });
}

/**
 * The outbox's Redis and queue from flags, else the environment.
 * @throws {UsageError} when no Redis URL is given (exit code 2)
 */
export function outboxLocation(
  flags: RedisFlags,
  env: Readonly<Record<string, string | undefined>>,
): { connection: string | OutboxClusterConnection; queueName?: string; prefix?: string; warning?: string } {
  return {
    ...redisConnection(flags, env),
    ...(flags.queue === undefined ? {} : { queueName: flags.queue }),
    ...(flags.prefix === undefined ? {} : { prefix: flags.prefix }),
  };
}

/** A comma before a node's `redis://` or `rediss://` belongs to the URL before it (a password may hold one). */
function split(value: string): string[] {
  return value
    .split(/,(?=\s*rediss?:\/\/)/i)
    .map((url) => url.trim())
    .filter((url) => url !== '');
}

function yesOrNo(value: string | undefined, name: string): boolean {
  if (value === undefined || value.trim() === '') return false;
  const v = value.trim().toLowerCase();
  if (['1', 'yes', 'true', 'on'].includes(v)) return true;
  if (['0', 'no', 'false', 'off'].includes(v)) return false;
  throw new UsageError(`${name}: expected 1 or 0 (yes or no), got "${value}"`);
}

function hasPassword(url: string): boolean {
  try {
    return new URL(url).password !== '';
  } catch {
    return false;
  }
}

/** A URL that is not one is left for the outbox to refuse. */
function withPassword(url: string, password: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') return url;
    parsed.password = encodeURIComponent(password);
    return parsed.toString();
  } catch {
    return url;
  }
}

/**
 * Reads `--rate`: `N/s`, `N/m` or `N/h` (a plain `N` is per second).
 * @returns BullMQ limiter options: at most `max` sends per `duration` ms
 * @throws {UsageError} for anything else
 */
export function parseRate(value: string): { max: number; duration: number } {
  const match = /^(\d+)(?:\/(s|m|h))?$/.exec(value.trim());
  const max = match ? Number(match[1]) : NaN;
  if (!match || !Number.isSafeInteger(max) || max < 1) {
    throw new UsageError(`--rate: expected N/s, N/m or N/h with N at least 1, got "${value}"`);
  }
  const duration = { s: 1000, m: 60_000, h: 3_600_000 }[(match[2] as 's' | 'm' | 'h' | undefined) ?? 's'];
  return { max, duration };
}

/** Never a flag, whose value every user of the machine sees in `ps`. */
export const OUTBOX_KEYS_VARIABLE = 'EML_API_OUTBOX_KEYS';

/** Help lines of {@link OUTBOX_KEYS_VARIABLE}. */
export const OUTBOX_KEYS_HELP = `${OUTBOX_KEYS_VARIABLE}="<id>:<key>,<id>:<key>..." encrypts (relay) and decrypts (worker)
queued mail in Redis: keys of 32 bytes, Base64 or hex (openssl rand -base64 32); the first
one encrypts new mail, the others are older keys still needed to read what they encrypted.
`;

/**
 * The outbox's encryption keys from {@link OUTBOX_KEYS_VARIABLE}, the first one encrypting new mail;
 * undefined when it is not set. A malformed list is a usage error that never repeats the value.
 */
export function outboxEncryption(env: Readonly<Record<string, string | undefined>>): OutboxEncryption | undefined {
  const value = env[OUTBOX_KEYS_VARIABLE];
  if (value === undefined || value.trim() === '') return undefined;
  const keys: Record<string, string> = {};
  let keyId: string | undefined;
  for (const entry of value.split(',')) {
    const colon = entry.indexOf(':');
    const id = entry.slice(0, colon).trim();
    if (colon <= 0 || id in keys) {
      throw new UsageError(`${OUTBOX_KEYS_VARIABLE}: expected <id>:<key>,<id>:<key>... with different ids`);
    }
    keys[id] = entry.slice(colon + 1).trim();
    keyId ??= id;
  }
  return { keyId, keys };
}

/** `parseArgs` options of `relay` and `worker` in production: the health and metrics port, the log format, the grace period. */
export const OPERATIONS_ARG_OPTIONS = {
  'http-port': { type: 'string' },
  'http-host': { type: 'string' },
  'no-metrics': { type: 'boolean' },
  'log-format': { type: 'string' },
  grace: { type: 'string' },
} as const;

/** Help lines of {@link OPERATIONS_ARG_OPTIONS}; `what` names what a stop lets finish. */
export function operationsHelp(what: string): string {
  return `  --http-port <n>         serve /healthz, /readyz and /metrics on this port (0 picks a free one)
  --http-host <host>      interface of that port (default 127.0.0.1; 0.0.0.0 for Kubernetes probes)
  --no-metrics            serve health only (metrics need the package prom-client)
  --log-format <format>   text (default) or json: one JSON object per line
  --grace <s>             on SIGTERM, seconds ${what} get to finish (default 25)
`;
}

/** Flag values of {@link OPERATIONS_ARG_OPTIONS} after parsing. */
export interface OperationsFlags {
  'http-port'?: string | undefined;
  'http-host'?: string | undefined;
  'no-metrics'?: boolean | undefined;
  'log-format'?: string | undefined;
  grace?: string | undefined;
}

/** Inside Kubernetes' default `terminationGracePeriodSeconds` of 30, with room to exit. */
const DEFAULT_GRACE_SECONDS = 25;

/**
 * The options the flags of {@link OPERATIONS_ARG_OPTIONS} stand for.
 * @param user names the command in the error when prom-client is missing, e.g. `eml-api relay --http-port`
 * @throws {UsageError} for a malformed value (exit 2)
 * @throws {EmlApiError} `ECONFIG` (exit 1) when metrics are asked for and prom-client is not installed
 */
export function operationsOptions(
  flags: OperationsFlags,
  user: string,
): {
  http: { port: number; host: string } | undefined;
  metrics: false | undefined;
  logFormat: LogFormat;
  grace: number;
} {
  const logFormat = flags['log-format'] ?? 'text';
  if (logFormat !== 'text' && logFormat !== 'json') {
    throw new UsageError(`--log-format: expected text or json, got "${logFormat}"`);
  }
  const grace = seconds(flags.grace, '--grace', DEFAULT_GRACE_SECONDS);
  if (flags['http-port'] === undefined) {
    if (flags['http-host'] !== undefined || flags['no-metrics']) {
      throw new UsageError('--http-host and --no-metrics go with --http-port');
    }
    return { http: undefined, metrics: undefined, logFormat, grace };
  }
  const port = wholeFlag(flags['http-port'], '--http-port', 0, 65535);
  // A missing prom-client says what to install, or how to do without, before anything starts.
  if (!flags['no-metrics']) loadPromClient(`${user} (for /metrics; or pass --no-metrics)`);
  return {
    http: { port, host: flags['http-host'] ?? '127.0.0.1' },
    metrics: flags['no-metrics'] ? false : undefined,
    logFormat,
    grace,
  };
}

function seconds(value: string | undefined, flag: string, fallback: number): number {
  return wholeFlag(value, flag, 0, 86_400, fallback) * 1000;
}

/**
 * How `eml-api relay` and `eml-api worker` log: `text`, a line for a person, or `json`, one JSON
 * object per line for a log pipeline, with fixed field names.
 */
export type LogFormat = 'text' | 'json';

/** A JSON log line's level. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

/** Fixed names a query can rely on, whichever part logged the line. */
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
 * Never written, whatever a caller put in them: the package never logs a key or content (`key` is
 * the relay's word for whose key a message went with: `relay`, or a key's fingerprint).
 */
const NEVER = /^(api_?key|password|pass|secret|authorization|token|content|body|raw|html|text|data)$/i;

/**
 * One JSON log line: `time` (ISO 8601), `level`, `msg`, then the fields under their fixed names.
 * Every string has the secrets taken out.
 *
 * @param secrets strings never written (the API key, a Redis password)
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
  // The service's id, or the outbox's job id under store-and-forward.
  if (meta.destination === 'outbox' && meta.id !== undefined) line.queue_id ??= meta.id;
  if (message === 'Message accepted') line.reply_code ??= 250;
  const text = JSON.stringify(line, (_key, value: unknown) =>
    typeof value === 'string' ? secrets.reduce((said, secret) => redact(said, secret), value) : value,
  );
  return `${text}\n`;
}

/** A logger writing {@link jsonLogLine}s, `debug` left out. */
export function jsonLogger(out: CliOutput, secrets: readonly string[]): EmlApiLogger {
  const write = (level: LogLevel) => (meta: Record<string, unknown>, message: string) =>
    out.write(jsonLogLine(level, message, meta ?? {}, secrets));
  return { debug: () => {}, info: write('info'), warn: write('warn'), error: write('error') };
}

/**
 * The command's streams in JSON mode: its plain-text lines become JSON lines too (`info` from
 * stdout, `warn` from stderr), both on stdout, the one stream a log pipeline reads in order.
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

/** A command's streams in JSON mode, with the logger its parts (the relay, the outbox) write to. */
export interface JsonCliIo extends CliIo {
  readonly jsonLogger: EmlApiLogger;
}

/** Whether the streams are {@link jsonIo}'s. */
export function isJsonIo(io: CliIo): io is JsonCliIo {
  return typeof (io as Partial<JsonCliIo>).jsonLogger === 'object';
}

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** `parseArgs` options of the commands that call the service (`send`, `group add|remove|check`). */
export const SERVICE_ARG_OPTIONS = {
  url: { type: 'string' },
  key: { type: 'string' },
  'allow-insecure-http': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Help lines of {@link SERVICE_ARG_OPTIONS}, for the commands' `--help`. */
export const SERVICE_OPTIONS_HELP = `  --url <url>             base URL of the service (or EML_API_URL)
  --key <key>             API key (or EML_API_KEY; prefer the variable: flags show in ps)
  --allow-insecure-http   allow http:// to a non-loopback host (the key crosses the network in clear)
  -h, --help              show this help
`;

/** Flag values of {@link SERVICE_ARG_OPTIONS} after parsing. */
export interface ServiceFlags {
  url?: string | undefined;
  key?: string | undefined;
  'allow-insecure-http'?: boolean | undefined;
}

/**
 * Creates the client from flags, falling back to `EML_API_URL` and `EML_API_KEY`.
 * @throws {UsageError} when the URL or the key is missing or invalid (exit code 2)
 */
export function createServiceClient(
  flags: ServiceFlags,
  env: Readonly<Record<string, string | undefined>>,
): EmlApiClient {
  const options = serviceOptions(flags, env);
  return asUsageError(() => new EmlApiClient(options));
}

/**
 * The service's URL and key from flags, falling back to `EML_API_URL` and `EML_API_KEY`.
 * @throws {UsageError} when the URL or the key is missing (exit code 2)
 */
export function serviceOptions(
  flags: ServiceFlags,
  env: Readonly<Record<string, string | undefined>>,
): { apiKey: string; baseUrl: string; allowInsecureHttp: boolean } {
  const baseUrl = flags.url ?? env.EML_API_URL;
  const apiKey = flags.key ?? env.EML_API_KEY;
  if (!baseUrl) throw new UsageError('no service URL: pass --url or set EML_API_URL');
  if (!apiKey) throw new UsageError('no API key: set EML_API_KEY (or pass --key)');
  return { apiKey, baseUrl, allowInsecureHttp: flags['allow-insecure-http'] ?? false };
}

/**
 * Runs `make`, reporting an `ECONFIG` error as a usage error (exit 2). Not Redis's refusal of the
 * connection (`command` `AUTH` or `CLUSTER SLOTS`): the flags were well formed and Redis said no (exit 1).
 */
export function asUsageError<T>(make: () => T): T {
  const convert = (err: unknown): never => {
    const refused = err instanceof EmlApiError && (err.command === 'AUTH' || err.command === 'CLUSTER SLOTS');
    if (err instanceof EmlApiError && err.code === 'ECONFIG' && !refused && !isMissingPeer(err))
      throw new UsageError(err.message);
    throw err;
  };
  try {
    const made = make();
    return (made instanceof Promise ? made.catch(convert) : made) as T;
  } catch (err) {
    return convert(err);
  }
}
