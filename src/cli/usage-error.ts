/** A mistake in the command line: printed in one line with a hint, exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Exit codes scripts can rely on. */
export const EXIT = {
  ok: 0,
  /** The operation failed (service error, unreachable, refused key). */
  failed: 1,
  /** The command line was wrong. */
  usage: 2,
} as const;
