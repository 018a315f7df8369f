import { defineConfig } from 'vitest/config';
import { FillingOrder, RecordDurations } from './test/run-order.js';

/**
 * `npm run test:package`: the package as users install it (test/package/), apart from `npm test`
 * because packing, installing and type-checking projects is most of a minute of its own. A file
 * that needs Redis for some tests checks `redisServerMissing` itself.
 */
export default defineConfig({
  test: {
    name: 'package',
    include: ['test/package/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Packs the package once per run for every file that asks (test/package/packed.ts).
    globalSetup: ['test/package/packed-setup.ts'],
    pool: 'forks',
    // Most of a file's time is spent in the child processes it starts (npm, tsc, node).
    maxWorkers: 4,
    isolate: false,
    reporters: ['default', 'json', new RecordDurations()],
    outputFile: { json: 'test-output/package-results.json' },
    sequence: { sequencer: FillingOrder },
  },
});
