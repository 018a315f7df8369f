import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Reporter, TestModule, TestRunEndReason, TestSpecification, Vitest } from 'vitest/node';
import { BaseSequencer } from 'vitest/node';

/**
 * The order test files start in: long files early, so that a run does not end waiting on a slow
 * file that started late, and files that compute beside files that wait, so that the cores stay
 * busy. A file's duration is the longer of the one vitest recorded in its cache (node_modules/.vite)
 * and the one in test/file-durations.json; its CPU seconds come from that file, which a full passing
 * run with RECORD_DURATIONS=1 rewrites when the files or their durations change a lot, to be
 * committed: a fresh clone (CI) has no cache.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DURATIONS_FILE = join(ROOT, 'test', 'file-durations.json');

/** What a file took, by `project:path` key, as vitest keys its cache. */
interface FileCost {
  /** Wall seconds. */
  seconds: number;
  /** CPU seconds, its child processes' included (test/file-cpu.ts). */
  cpuSeconds?: number;
}

type Durations = Record<string, FileCost>;

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

/**
 * Failed files first (from vitest's cache), then files of unknown duration, then the rest in the
 * order {@link fillingOrder} gives them.
 */
export class FillingOrder extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const recorded = readDurations();
    const root = this.ctx.config.root;
    const cost = (spec: TestSpecification) => {
      const key = keyOf(spec.project.name, spec.moduleId, root);
      const cached = this.ctx.cache.getFileTestResults(key);
      const seen = [cached && cached.duration / 1000, recorded[key]?.seconds].filter((s) => s !== undefined);
      // The longer of the two: vitest also records a run of some of a file's tests (-t).
      const seconds = seen.length ? Math.max(...seen) : Infinity;
      const cpuSeconds = recorded[key]?.cpuSeconds;
      return {
        spec,
        failed: cached?.failed ?? false,
        seconds,
        load: cpuSeconds === undefined || seconds === 0 ? 1 : cpuSeconds / seconds,
      };
    };
    const costs = files.map(cost);
    const first = costs.filter((c) => c.failed || c.seconds === Infinity);
    const rest = fillingOrder(
      costs.filter((c) => !first.includes(c)),
      Number(this.ctx.config.maxWorkers) || 1,
      availableParallelism(),
    );
    // A stable sort: within a project the order above stays.
    return [...first, ...rest].map((c) => c.spec).sort(projectOrder);
  }
}

/** A file to start, as {@link fillingOrder} sees it. */
interface Cost {
  seconds: number;
  /** Cores it keeps busy: its CPU seconds over its wall seconds. */
  load: number;
}

/**
 * The order in which files keep both the workers and the cores busy. Vitest hands the next file to
 * whichever worker is free, so this plays the run through from the files' recorded costs: a free
 * worker takes the longest file that the cores left idle by the running ones can take, or else the
 * longest of those that mostly wait. Started longest first alone, the files that wait (on Redis,
 * child processes, lock expiries) started together and left the cores idle for a third of a run.
 */
export function fillingOrder<T extends Cost>(files: readonly T[], workers: number, cores: number): T[] {
  const left = [...files].sort((a, b) => b.seconds - a.seconds);
  const running: { end: number; load: number }[] = [];
  const order: T[] = [];
  let now = 0;
  while (left.length > 0) {
    while (running.length < workers && left.length > 0) {
      const idle = cores - running.reduce((sum, r) => sum + Math.min(r.load, cores), 0);
      const [file] = left.splice(nextFile(left, idle), 1);
      order.push(file!);
      running.push({ end: now + file!.seconds, load: file!.load });
    }
    running.sort((a, b) => a.end - b.end);
    now = running.shift()!.end;
  }
  return order;
}

/** A file that keeps at least half a core busy computes; the others mostly wait. */
const COMPUTES = 0.5;

function nextFile(longestFirst: readonly Cost[], idle: number): number {
  if (idle >= COMPUTES) {
    const computing = longestFirst.findIndex((f) => f.load >= COMPUTES && f.load <= idle + COMPUTES / 2);
    if (computing >= 0) return computing;
  }
  return Math.max(
    0,
    longestFirst.findIndex((f) => f.load < COMPUTES),
  );
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
      const cpuSeconds = module.meta().cpuSeconds;
      if (cached)
        measured[key] = { seconds: tenths(cached.duration / 1000), cpuSeconds: cpuSeconds && tenths(cpuSeconds) };
    }
    const recorded = readDurations();
    const kept = Object.entries(recorded).filter(
      ([key]) => !(key in measured) && existsSync(join(root, key.slice(key.indexOf(':') + 1))),
    );
    const next: Durations = { ...Object.fromEntries(kept), ...measured };
    if (!changedMuch(recorded, next)) return;
    const sorted = Object.entries(next).sort(([a, x], [b, y]) => y.seconds - x.seconds || a.localeCompare(b));
    writeFileSync(DURATIONS_FILE, `${JSON.stringify(Object.fromEntries(sorted), null, 2)}\n`);
  }
}

function changedMuch(before: Durations, after: Durations): boolean {
  const keys = Object.keys(after);
  if (keys.length !== Object.keys(before).length || keys.some((key) => !(key in before))) return true;
  if (keys.some((key) => before[key]!.cpuSeconds === undefined && after[key]!.cpuSeconds !== undefined)) return true;
  const total = (d: Durations) => Object.values(d).reduce((sum, s) => sum + s.seconds, 0) || 1;
  const [was, now] = [total(before), total(after)];
  return keys.some((key) => {
    const [a, b] = [before[key]!.seconds / was, after[key]!.seconds / now];
    return Math.max(a, b) > 0.02 && (b > 3 * a || b < a / 3);
  });
}

function tenths(seconds: number): number {
  return Math.round(seconds * 10) / 10;
}
