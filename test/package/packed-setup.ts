import { createHash } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';

/** The repository's root. */
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Where packed tarballs and the projects that install them live, one folder per checkout. */
export const PACKED_HOME = join(
  tmpdir(),
  'nodemailer-eml-api-packed',
  createHash('sha256').update(ROOT).digest('hex').slice(0, 12),
);

/**
 * Vitest's global setup: a folder for this test run, where test/package/packed.ts packs the package
 * once for every test file that asks (a run that asks nothing packs nothing). Removed at the end.
 */
export async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dir = join(PACKED_HOME, 'runs', `${process.pid}-${Date.now()}`);
  await mkdir(dir, { recursive: true });
  project.provide('packedRun', dir);
  return () => rm(dir, { recursive: true, force: true });
}
