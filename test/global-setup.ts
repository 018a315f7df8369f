import { rmSync } from 'node:fs';
import { compileForChildren } from './helpers/compiled.js';

/** Compiles the TypeScript the tests' child processes run (test/helpers/compiled.ts), and removes it after the run. */
export async function setup(): Promise<() => void> {
  const out = await compileForChildren();
  return () => rmSync(out, { recursive: true, force: true });
}
