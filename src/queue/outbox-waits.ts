/**
 * The outbox's fixed waits, in ms: bounds on how long a close waits for
 * Redis or for aborted sends. Package-internal and not an option: the
 * defaults are the product's. Only the test suite lowers them
 * (test/helpers/short-waits.ts, also preloaded into the worker processes it
 * starts), so that it does not wait them out in real time; the behaviour is
 * the same, only sooner.
 *
 * @internal
 * @example
 * await withDeadline(job.moveToWait(token), outboxWaits.handBack);
 */
export const outboxWaits = {
  /** How long a forced close of a worker waits for its aborted sends to hand their jobs back (twice this for a graceful close it overtook). */
  handBack: 5_000,
  /** How long closing waits for Redis to answer QUIT before dropping the connection. */
  quit: 2_000,
};
