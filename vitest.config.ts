import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';
import { FillingOrder, RecordDurations } from './test/run-order.js';

const onCi = Boolean(process.env.CI) && process.env.CI !== 'false';

/**
 * A fresh machine without Debian's redis-server still passes `npm test`: the test files that
 * start one (they call `startRedisServer`, `startRedisCluster`, `startOutboxRedis` or the `useOutbox` fixture) are left out, and the run says so loudly, naming the
 * fix. A file that needs Redis for some tests only checks `redisServerMissing` itself and stays
 * in. On CI (`.ci/run` installs redis-server) a missing one fails the run instead.
 */
function redisFilesToSkip(): string[] {
  const binary = process.env.REDIS_SERVER ?? 'redis-server';
  if (spawnSync(binary, ['--version']).status === 0) return [];
  const why = `${binary} is not installed: apt-get install -y redis-server (or set REDIS_SERVER to its path)`;
  if (onCi) throw new Error(`The outbox and relay queue tests need a real Redis on CI; ${why}`);
  const files = readdirSync('test', { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.test.ts') && !file.startsWith('frameworks'))
    .map((file) => join('test', file))
    .filter((file) => {
      const text = readFileSync(file, 'utf8');
      const startsRedis = ['startRedisServer', 'startRedisCluster', 'startOutboxRedis', 'useOutbox'].some((f) =>
        text.includes(f),
      );
      return startsRedis && !text.includes('redisServerMissing');
    });
  console.warn(
    `\n\u001b[33mSKIPPING ${files.length} test files that run a real Redis; ${why}:\n  ${files.join('\n  ')}\u001b[0m\n`,
  );
  return files;
}

/** Test files that mock modules (vi.mock): they get a module graph of their own. */
const MOCKING = ['test/relay/receive-cost.test.ts'];

const include = ['test/**/*.test.ts', 'examples/emulator-vitest.test.ts'];
// The packed package's suites run apart, with `npm run test:package` (vitest.package.config.ts).
const exclude = ['**/node_modules/**', 'test/frameworks/**', 'test/package/**', ...redisFilesToSkip()];

export default defineConfig({
  test: {
    testTimeout: 30_000,
    // Child processes run the repository's TypeScript compiled once per run (test/helpers/compiled.ts).
    globalSetup: ['test/global-setup.ts'],
    // Each file's CPU seconds, for the run order (test/run-order.ts).
    setupFiles: ['test/file-cpu.ts'],
    hookTimeout: 60_000,
    // Each file starts its own servers on port 0, so files run side by side. Most of a file's time is
    // spent waiting (on Redis, sockets, child processes, lock expiries), so more files than cores run
    // at once, the run order putting files that compute beside files that wait. Not many more: each
    // worker process loads the package again, and a busier machine tries the tests' patience.
    pool: 'forks',
    maxWorkers: 5,
    // The JSON report lets CI print a plain "N passed, N failed" summary line.
    reporters: ['default', 'json', new RecordDurations()],
    outputFile: { json: 'test-output/vitest-results.json' },
    // Long files first, those that compute beside those that wait, by test/file-durations.json (test/run-order.ts).
    sequence: { sequencer: FillingOrder },
    projects: [
      {
        extends: true,
        test: {
          name: 'shared',
          include,
          exclude: [...exclude, ...MOCKING],
          // The files of a worker process share its loaded modules (the package, undici, BullMQ...): loading
          // them again for every file took about as long as the tests. A file that changes a module's
          // state puts it back after itself (e.g. test/helpers/short-waits.ts).
          isolate: false,
        },
      },
      { extends: true, test: { name: 'mocking', include: MOCKING, exclude, isolate: true } },
    ],
  },
});
