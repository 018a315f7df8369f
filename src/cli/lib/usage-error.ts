/**
 * A mistake in the command line (unknown command or option, missing argument,
 * missing configuration): printed in one line with a pointer to the help, exit code 2.
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * Exit codes scripts can rely on.
 *
 * @example
 * if ((await runCli(['group', 'check', 'news', 'ann@example.test'])) === EXIT.notMember) { ... }
 */
export const EXIT = {
  ok: 0,
  /** The operation failed (service error, unreachable, refused key, unreadable or invalid input). */
  failed: 1,
  /** The command line was wrong. */
  usage: 2,
  /** `group check`: at least one address is not a member. */
  notMember: 3,
  /** `relay`, `worker`: stopped when `--grace` ran out, with work in flight given up or handed back. */
  cutShort: 4,
} as const;

/**
 * Whether an error is a command-line mistake: a {@link UsageError} or an
 * error of `node:util` `parseArgs` (unknown option, missing value...).
 */
export function isUsageError(err: unknown): boolean {
  if (err instanceof UsageError) return true;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS');
}

/**
 * Reads a flag that takes a whole number, the CLI's one check for them.
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
