import type { OutboxEncryption } from '../../queue/content-cipher.js';
import type { OutboxClusterConnection } from '../../queue/redis-cluster.js';
import { UsageError } from './usage-error.js';

/**
 * `parseArgs` options shared by the commands that use the outbox's Redis
 * (`worker`, `queue status`, `queue retry`; the relay's `--redis` and
 * `--redis-cluster` read the same way): `--redis` may be repeated, for the
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

/**
 * Help lines of the environment variables of the outbox's Redis.
 * @example
 * io.stdout.write(`Environment:\n${REDIS_ENV_HELP}`);
 */
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

/**
 * Where the outbox's Redis is, from flags or the environment: one server's
 * URL, or a cluster's nodes (several URLs, or `--redis-cluster`).
 * @example
 * const { connection, warning } = redisConnection({ redis: ['redis://10.0.0.1:7000'], 'redis-cluster': true }, env);
 */
export interface RedisConnectionFlags {
  connection: string | OutboxClusterConnection;
  /** Said on standard error: a password given in a flag, which `ps` shows. */
  warning?: string;
}

/**
 * The outbox's Redis from `--redis` (repeatable) and `--redis-cluster`,
 * falling back to `REDIS_URL` (comma-separated for a cluster) and
 * `REDIS_CLUSTER`; `REDIS_PASSWORD` is the password of URLs that give none.
 * @throws {UsageError} when no Redis is given, or `REDIS_CLUSTER` is not a yes or no (exit code 2)
 * @example
 * redisConnection({}, { REDIS_URL: 'redis://a:7000,redis://b:7000' }); // { connection: { cluster: [...] } }
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
  // URLs that give none share the password; the outbox checks the URLs themselves.
  return withWarning({
    connection: {
      cluster: urls,
      ...(password && !urls.some(hasPassword) ? { clusterOptions: { redisOptions: { password } } } : {}),
    },
  });
}

/**
 * The outbox's Redis and queue from flags, falling back to the environment (see {@link redisConnection}).
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

/**
 * The URLs of a comma-separated list. A node's URL starts with redis:// or rediss://: a comma
 * before anything else belongs to the URL (a password may hold one, as ioredis accepts).
 */
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

/** The URL with `password` in it, when it gives none (a URL that is not one is left for the outbox to refuse). */
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

/**
 * The environment variable holding the outbox's encryption keys: never a
 * flag, whose value every user of the machine sees in `ps`.
 * @example
 * EML_API_OUTBOX_KEYS="k2:$(openssl rand -base64 32),k1:<the old key>" eml-api worker
 */
export const OUTBOX_KEYS_VARIABLE = 'EML_API_OUTBOX_KEYS';

/**
 * Help lines of {@link OUTBOX_KEYS_VARIABLE}.
 * @example
 * io.stdout.write(`Environment:\n${OUTBOX_KEYS_HELP}`);
 */
export const OUTBOX_KEYS_HELP = `${OUTBOX_KEYS_VARIABLE}="<id>:<key>,<id>:<key>..." encrypts (relay) and decrypts (worker)
queued mail in Redis: keys of 32 bytes, Base64 or hex (openssl rand -base64 32); the first
one encrypts new mail, the others are older keys still needed to read what they encrypted.
`;

/**
 * The outbox's encryption keys from {@link OUTBOX_KEYS_VARIABLE}, the first
 * one the key new mail is encrypted with; undefined when it is not set. The
 * option's own checks run where it is used; a malformed list is a usage error
 * that never repeats the variable's value.
 * @throws {UsageError} when the variable is not a list of `<id>:<key>`
 * @example
 * outboxEncryption({ EML_API_OUTBOX_KEYS: 'k2:<key>,k1:<key>' }); // { keyId: 'k2', keys: { k2, k1 } }
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
