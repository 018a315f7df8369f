import { inspect } from 'node:util';
import { expect } from 'vitest';
import { EmlApiError } from '../../src/index.js';

/**
 * Resolves once `condition()` is true, checking every 5 ms; rejects after
 * `timeout` ms. For states with no event to wait on (a request arrived at a
 * fake service, a send is queued).
 * @example
 * await waitFor(() => service.requests.length === 1);
 */
export async function waitFor(condition: () => boolean, { timeout = 5000 }: { timeout?: number } = {}): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeout) throw new Error(`waitFor timed out after ${timeout} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The rejection of `promise`, which must be an EmlApiError. */
export async function rejectionOf(promise: Promise<unknown>): Promise<EmlApiError> {
  const err = await promise.then(
    (value) => {
      throw new Error(`expected a rejection, got ${inspect(value)}`);
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EmlApiError);
  return err as EmlApiError;
}

/** The error `fn` throws synchronously, which must be an EmlApiError. */
export function thrownBy(fn: () => unknown): EmlApiError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(EmlApiError);
  return caught as EmlApiError;
}
