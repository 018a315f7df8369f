import { configError, describe } from '../client/resolve-client-options.js';

/**
 * Checks a whole-number option, or takes its default when it is absent.
 *
 * @param fallback the default, used when `value` is undefined
 * @throws {EmlApiError} `ECONFIG` naming the option
 * @example
 * const concurrency = wholeNumberOption(options.concurrency, 'concurrency', 5, 1, 10_000);
 */
export function wholeNumberOption(value: unknown, name: string, fallback: number, min: number, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw configError(name, `expected a whole number from ${min} to ${max}, got ${describe(v)}`);
  }
  return v;
}
