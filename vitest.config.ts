import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

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

/**
 * The files that take longest (seconds of waiting on Redis failovers, lock expiries, worker processes,
 * or of building and type-checking), longest first. They start first, so that the run does not end
 * waiting on one of them; vitest's own ordering needs durations cached from an earlier run, which a
 * fresh checkout (CI) does not have. A file missing here only starts later.
 */
const SLOW_FIRST = [
  'test/package/docs-blocks.test.ts',
  'test/package/types.test.ts',
  'test/package/peers.test.ts',
  'test/package/exports.test.ts',
  'test/package/entries.test.ts',
  'test/package/cli-process.test.ts',
  'test/transport/build-threads.test.ts',
  'test/observability/shutdown.test.ts',
  'test/queue/failover.test.ts',
  'test/queue/delivery.test.ts',
  'test/queue/crash.test.ts',
  'test/transport/large-messages.test.ts',
  'test/queue/poison-message.test.ts',
  'test/queue/close-without-redis.test.ts',
  'test/queue/stalls.test.ts',
  'test/queue/unreachable-redis.test.ts',
  'test/property/emulator.test.ts',
  'test/property/relay-recipients.test.ts',
  'test/emulator/faults-soak.test.ts',
  'test/package/examples.test.ts',
  'test/transport/spool-files.test.ts',
  'test/relay/replies.test.ts',
  'test/relay/limits.test.ts',
  'test/queue/clock-skew.test.ts',
];

class SlowFilesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification) => {
      const at = SLOW_FIRST.findIndex((slow) => file.moduleId.endsWith(`/${slow}`));
      return at === -1 ? SLOW_FIRST.length : at;
    };
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}

/** Test files that mock modules (vi.mock): they get a module graph of their own. */
const MOCKING = ['test/relay/receive-cost.test.ts'];

const include = ['test/**/*.test.ts', 'examples/emulator-vitest.test.ts'];
const exclude = ['**/node_modules/**', 'test/frameworks/**', ...redisFilesToSkip()];

export default defineConfig({
  test: {
    testTimeout: 30_000,
    // Packs the package once per run for the tests of what users install (test/package/packed.ts).
    globalSetup: ['test/package/packed-setup.ts'],
    hookTimeout: 60_000,
    // Each file starts its own servers on port 0, so files run side by side. Most of a file's time is
    // spent waiting (on Redis, sockets, child processes, lock expiries), so more files than cores run
    // at once: vitest's default (cores - 1) ran them one at a time on a 2-core machine.
    pool: 'forks',
    maxWorkers: 4,
    // The JSON report lets CI print a plain "N passed, N failed" summary line.
    reporters: ['default', 'json'],
    outputFile: { json: 'test-output/vitest-results.json' },
    sequence: { sequencer: SlowFilesFirst },
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
