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
