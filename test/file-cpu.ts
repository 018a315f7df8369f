import { readFileSync } from 'node:fs';
import { afterAll, beforeAll } from 'vitest';

/**
 * Setup file of `npm test`: puts the CPU seconds a test file spent, its worker's and its child
 * processes' (CLIs, redis-server), in the file's `cpuSeconds` meta, for the run order
 * (test/run-order.ts). A worker runs one file at a time, so the process's counters differ by
 * the file's own use.
 */

let start = 0;

beforeAll(() => {
  start = cpuSeconds();
});

// Vitest reads a hook's first parameter as the fixtures it asks for: a pattern, empty here.
// eslint-disable-next-line no-empty-pattern
afterAll(({}, file) => {
  file.meta.cpuSeconds = cpuSeconds() - start;
});

declare module 'vitest' {
  interface TaskMeta {
    /** CPU seconds the file spent, its child processes' included (test/file-cpu.ts). */
    cpuSeconds?: number;
  }
}

function cpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6 + childSeconds();
}

/**
 * CPU seconds of the child processes this one waited for, from /proc (0 elsewhere): Node reaps
 * every child it started, so an ended CLI or redis-server counts here.
 */
function childSeconds(): number {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    // The fields after the command name start at field 3 (state); cutime and cstime are 16 and 17, in ticks of 1/100 s.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[13]) + Number(fields[14])) / 100;
  } catch {
    return 0;
  }
}
