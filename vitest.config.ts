import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/emulator-vitest.test.ts'],
    exclude: ['**/node_modules/**', 'test/frameworks/**'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Each file starts its own servers on port 0; files run in parallel on both cores.
    pool: 'forks',
    // The JSON report lets CI print a plain "N passed, N failed" summary line.
    reporters: ['default', 'json'],
    outputFile: { json: 'test-output/vitest-results.json' },
  },
});
