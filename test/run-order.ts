import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Reporter, TestModule, TestRunEndReason, TestSpecification, Vitest } from 'vitest/node';
import { BaseSequencer } from 'vitest/node';

/**
 * The order test files start in: longest first, so that a run does not end waiting on a slow file
 * that started late. A file's duration is the longer of the one vitest recorded in its cache
 * (node_modules/.vite) and the one in test/file-durations.json, which a full passing run with
 * RECORD_DURATIONS=1 rewrites when the files or their durations change a lot, to be committed: a fresh clone (CI) has no cache.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DURATIONS_FILE = join(ROOT, 'test', 'file-durations.json');

/** Seconds by `project:path` key, as vitest keys its cache. */
type Durations = Record<string, number>;

function readDurations(): Durations {
  try {
    return JSON.parse(readFileSync(DURATIONS_FILE, 'utf8')) as Durations;
  } catch {
    return {};
  }
}

function keyOf(project: string, moduleId: string, root: string): string {
  return `${project}:${relative(root, moduleId)}`;
}

/** Failed files first (from vitest's cache), then files of unknown duration, then the longest. */
export class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const recorded = readDurations();
    const root = this.ctx.config.root;
    const rank = (spec: TestSpecification) => {
      const key = keyOf(spec.project.name, spec.moduleId, root);
      const cached = this.ctx.cache.getFileTestResults(key);
      const seconds = [cached && cached.duration / 1000, recorded[key]].filter((s) => s !== undefined);
      // The longer of the two: vitest also records a run of some of a file's tests (-t).
      return { failed: cached?.failed ?? false, seconds: seconds.length ? Math.max(...seconds) : Infinity };
    };
    const ranks = new Map(files.map((spec) => [spec, rank(spec)]));
    return [...files].sort((a, b) => {
      const [ra, rb] = [ranks.get(a)!, ranks.get(b)!];
      return (
        projectOrder(a, b) ||
        Number(rb.failed) - Number(ra.failed) ||
        (rb.seconds === ra.seconds ? 0 : rb.seconds > ra.seconds ? 1 : -1)
      );
    });
  }
}

/** Vitest's order of projects: by group order, then name, the isolated ones first. */
function projectOrder(a: TestSpecification, b: TestSpecification): number {
  const [x, y] = [a.project, b.project];
  return (
    x.config.sequence.groupOrder - y.config.sequence.groupOrder ||
    (x.name === y.name ? 0 : x.name < y.name ? -1 : 1) ||
    Number(y.config.isolate) - Number(x.config.isolate)
  );
}

/**
 * Rewrites test/file-durations.json after a full, passing run with RECORD_DURATIONS=1, when a test file came or
 * went or a file that takes over 2% of the run now takes over three times or under a third of its
 * recorded share (less is the noise of a loaded machine). Durations of files that did not run are
 * kept, so a machine that skips some (no Redis) leaves theirs alone.
 */
export class RecordDurations implements Reporter {
  #vitest: Vitest | undefined;
  #runAll = false;

  onInit(vitest: Vitest): void {
    this.#vitest = vitest;
  }

  async onTestRunStart(specifications: ReadonlyArray<TestSpecification>): Promise<void> {
    const all = await this.#vitest!.globTestSpecifications();
    this.#runAll = specifications.length === all.length && !this.#vitest!.config.testNamePattern;
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>, _errors: unknown, reason: TestRunEndReason): void {
    // Opt-in, so that a contributor's `npm test` leaves the tree clean.
    if (!this.#runAll || reason !== 'passed' || process.env.RECORD_DURATIONS !== '1') return;
    const vitest = this.#vitest!;
    const root = vitest.config.root;
    const measured: Durations = {};
    for (const module of modules) {
      const key = keyOf(module.project.name, module.moduleId, root);
      const cached = vitest.cache.getFileTestResults(key);
      if (cached) measured[key] = Math.round(cached.duration / 100) / 10;
    }
    const recorded = readDurations();
    const kept = Object.entries(recorded).filter(
      ([key]) => !(key in measured) && existsSync(join(root, key.slice(key.indexOf(':') + 1))),
    );
    const next: Durations = { ...Object.fromEntries(kept), ...measured };
    if (!changedMuch(recorded, next)) return;
    const sorted = Object.entries(next).sort(([a, x], [b, y]) => y - x || a.localeCompare(b));
    writeFileSync(DURATIONS_FILE, `${JSON.stringify(Object.fromEntries(sorted), null, 2)}\n`);
  }
}

function changedMuch(before: Durations, after: Durations): boolean {
  const keys = Object.keys(after);
  if (keys.length !== Object.keys(before).length || keys.some((key) => !(key in before))) return true;
  const total = (d: Durations) => Object.values(d).reduce((sum, s) => sum + s, 0) || 1;
  const [was, now] = [total(before), total(after)];
  return keys.some((key) => {
    const [a, b] = [before[key]! / was, after[key]! / now];
    return Math.max(a, b) > 0.02 && (b > 3 * a || b < a / 3);
  });
}
