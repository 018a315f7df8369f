import { fileURLToPath } from 'node:url';
import { outboxWaits } from '../../src/queue/outbox-waits.js';

/**
 * Shortens the outbox's fixed waits (src/queue/outbox-waits.ts) in this
 * process, for the tests that wait them out: a close while Redis does not
 * answer waits for the hand-back and QUIT bounds to pass. Only the bounds
 * are shorter; what happens when they pass is the same. Imported for its
 * effect, and preloaded into the worker processes such a test starts
 * ({@link SHORT_WAITS_IMPORT}).
 * @example
 * import '../helpers/short-waits.js';
 * spawn(process.execPath, ['--import', 'tsx', ...SHORT_WAITS_IMPORT, 'src/cli/main.ts', 'worker']);
 */
export const SHORT_WAITS = { handBack: 1_000, quit: 500 } as const satisfies typeof outboxWaits;

Object.assign(outboxWaits, SHORT_WAITS);

/** Node arguments that preload this module into a child process started with `--import tsx`. */
export const SHORT_WAITS_IMPORT: readonly string[] = ['--import', fileURLToPath(import.meta.url)];
