import { describe, expect, it } from 'vitest';
import { fillingOrder } from '../run-order.js';

/** The order `npm test` starts its files in (test/run-order.ts), from their recorded costs. */

const file = (name: string, seconds: number, load: number) => ({ name, seconds, load });
const names = (files: { name: string }[]) => files.map((f) => f.name);

describe('the run order', () => {
  it('starts a file that computes beside the long files that wait, not after them', () => {
    const files = [file('wait-a', 30, 0.1), file('wait-b', 20, 0.1), file('wait-c', 15, 0.1), file('compute', 10, 1)];
    // Longest first alone, three workers would all wait at first and the compute file would start at 15 s.
    expect(names(fillingOrder(files, 3, 2)).slice(0, 3)).toContain('compute');
  });

  it('does not start more computing files at once than the cores take', () => {
    const files = [file('compute-a', 10, 1), file('compute-b', 9, 1), file('compute-c', 8, 1), file('wait', 5, 0.1)];
    expect(names(fillingOrder(files, 3, 2))).toEqual(['compute-a', 'compute-b', 'wait', 'compute-c']);
  });

  it('starts files of the same kind longest first', () => {
    const files = [file('short', 1, 0.1), file('long', 9, 0.1), file('middle', 5, 0.1)];
    expect(names(fillingOrder(files, 1, 2))).toEqual(['long', 'middle', 'short']);
  });
});
