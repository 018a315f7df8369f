import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { outboxWaits } from '../../src/queue/redis-connection.js';

/**
 * Shortened bounds of the outbox's fixed waits (src/queue/redis-connection.ts),
 * for the tests that wait them out: a close while Redis does not answer
 * waits for the hand-back and QUIT bounds to pass. Only the bounds are
 * shorter; what happens when they pass is the same.
 */
export const SHORT_WAITS = { handBack: 1_000, quit: 500, settingsCheck: 60_000 } as const satisfies typeof outboxWaits;

/**
 * Uses {@link SHORT_WAITS} in this test file (restored after it: test files may share a process), and
 * gives the Node arguments that preload them into a process the file starts (see test/helpers/compiled.ts).
 * @example
 * const shortWaits = useShortWaits();
 * spawn(process.execPath, nodeArgs(['--import', 'tsx', ...shortWaits.nodeArgs, 'src/cli/main.ts', 'worker']));
 */
export function useShortWaits(): { nodeArgs: readonly string[] } {
  const saved = { ...outboxWaits };
  beforeAll(() => {
    Object.assign(outboxWaits, SHORT_WAITS);
  });
  afterAll(() => {
    Object.assign(outboxWaits, saved);
  });
  return { nodeArgs: ['--import', fileURLToPath(new URL('./short-waits-preload.ts', import.meta.url))] };
}
