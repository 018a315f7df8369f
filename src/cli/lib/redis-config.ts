import type { OutboxEncryption } from '../../queue/content-cipher.js';
import { UsageError } from './usage-error.js';

/**
 * `parseArgs` options shared by the commands that use the outbox's Redis
 * (`worker`, `queue status`, `queue retry`).
 */
export const REDIS_ARG_OPTIONS = {
  redis: { type: 'string' },
  queue: { type: 'string' },
  prefix: { type: 'string' },
} as const;

/** Help lines of {@link REDIS_ARG_OPTIONS}. */
export const REDIS_OPTIONS_HELP = `  --redis <url>           Redis of the outbox, redis:// or rediss:// (or REDIS_URL)
  --queue <name>          queue name (default eml-api)
  --prefix <prefix>       Redis key prefix of the queue (default bull)
`;

/** Flag values of {@link REDIS_ARG_OPTIONS} after parsing. */
export interface RedisFlags {
  redis?: string | undefined;
  queue?: string | undefined;
  prefix?: string | undefined;
}

/**
 * The outbox's Redis and queue from flags, falling back to `REDIS_URL`.
 * @throws {UsageError} when no Redis URL is given (exit code 2)
 */
export function outboxLocation(
  flags: RedisFlags,
  env: Readonly<Record<string, string | undefined>>,
): { connection: string; queueName?: string; prefix?: string } {
  const connection = flags.redis ?? env.REDIS_URL;
  if (!connection) throw new UsageError('no Redis: pass --redis or set REDIS_URL (e.g. redis://127.0.0.1:6379)');
  return {
    connection,
    ...(flags.queue === undefined ? {} : { queueName: flags.queue }),
    ...(flags.prefix === undefined ? {} : { prefix: flags.prefix }),
  };
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
