/**
 * The deadline of {@link withDeadline} passed.
 * @example
 * if (err instanceof DeadlineError) console.log(`no answer within ${err.ms} ms`);
 */
export class DeadlineError extends Error {
  override readonly name = 'DeadlineError';
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`);
  }
}

/**
 * Resolves as `promise` does, or rejects with a {@link DeadlineError} after
 * `ms`; the promise itself runs on (a Redis command cannot be taken back).
 *
 * @example
 * await withDeadline(redis.ping(), 10_000);
 */
export function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(ms)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}
