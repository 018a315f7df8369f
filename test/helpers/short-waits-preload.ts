/**
 * Preloaded (`--import`) into the processes a test starts, after tsx: the outbox's fixed waits
 * shortened there too: the values of SHORT_WAITS in short-waits.ts (which this cannot import: it loads vitest).
 */
import { outboxWaits } from '../../src/queue/redis-connection.js';

Object.assign(outboxWaits, { handBack: 1_000, quit: 500, settingsCheck: 60_000 } satisfies typeof outboxWaits);
