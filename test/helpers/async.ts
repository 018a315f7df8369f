import { inspect } from 'node:util';
import { expect } from 'vitest';
import { EmlApiError } from '../../src/index.js';

/** The first pause of {@link eventually}; each next one is half as long again, up to {@link LONGEST_PAUSE}. */
const FIRST_PAUSE = 5;
const LONGEST_PAUSE = 25;

/**
 * The tests' one polling helper, for states no event tells of (a request reached a fake service, a
 * job is in Redis): resolves once `condition()` (sync or async) is true, checked at once, then after
 * pauses growing from 5 to 25 ms; rejects after `timeout` ms, saying what it waited for (`what`, or a
 * function giving the state then). Wait on an event instead where there is one.
 * @example
 * await eventually(() => service.requests.length === 1);
 * await eventually(async () => (await queue.getJobCounts('completed')).completed === 3, { what: 'three sent' });
 */
export async function eventually(
  condition: () => boolean | Promise<boolean>,
  { timeout = 20_000, what = 'condition' }: { timeout?: number; what?: string | (() => string) } = {},
): Promise<void> {
  const start = Date.now();
  let pause = FIRST_PAUSE;
  while (!(await condition())) {
    if (Date.now() - start > timeout) {
      throw new Error(`timed out after ${timeout} ms waiting for ${typeof what === 'function' ? what() : what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 1.5, LONGEST_PAUSE);
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
