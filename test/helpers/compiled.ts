import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The processes tests start run this repository's TypeScript compiled once per test run into JavaScript, instead of
 * through `--import tsx`, whose loader costs each process about 0.3 s of CPU. The compiled tree mirrors the
 * repository (src/, test/, examples/) and names itself `nodemailer-eml-api`, so the examples' imports of the package
 * resolve to the compiled src/ as tsconfig's `paths` do. It lives under node_modules/.cache, whence packages resolve
 * as from the repository, one directory per run (test/global-setup.ts makes it and removes it).
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CACHE = join(ROOT, 'node_modules', '.cache', 'eml-api-test-js');
const SOURCES = ['src', 'test', 'examples'];
const ENTRIES = ['', 'emulator', 'relay', 'queue', 'protocol'];
/** Where the test run's global setup says the compiled tree is. */
const ENV = 'EML_API_TEST_JS';

/** Compiles the tree for this run (in the run's main process, before any test file starts); returns its directory. */
export async function compileForChildren(): Promise<string> {
  const { build } = await import('esbuild');
  mkdirSync(CACHE, { recursive: true });
  // Trees of runs that were killed before their teardown.
  for (const name of readdirSync(CACHE)) {
    if (!isAlive(Number(name))) rmSync(join(CACHE, name), { recursive: true, force: true });
  }
  const out = join(CACHE, String(process.pid));
  const entryPoints = SOURCES.flatMap((dir) =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts'))
      .map((file) => join(ROOT, dir, file)),
  );
  await build({
    entryPoints,
    outdir: out,
    outbase: ROOT,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'inline',
    logLevel: 'error',
  });
  const exports = Object.fromEntries(
    ENTRIES.map((entry) => [entry ? `./${entry}` : '.', `./src/${entry ? `${entry}/` : ''}index.js`]),
  );
  writeFileSync(join(out, 'package.json'), JSON.stringify({ name: 'nodemailer-eml-api', type: 'module', exports }));
  process.env[ENV] = out;
  return out;
}

function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The compiled file of a TypeScript file of this repository (an absolute path or one relative to its root). */
export function compiledPath(file: string): string {
  const out = process.env[ENV];
  const path = resolve(ROOT, file);
  if (!out || !path.endsWith('.ts')) return file;
  const compiled = join(out, relative(ROOT, path)).replace(/\.ts$/, '.js');
  if (!existsSync(compiled)) throw new Error(`${file} was not compiled for child processes (test/helpers/compiled.ts)`);
  return compiled;
}

/**
 * Node arguments written for `--import tsx`, rewritten to run the compiled tree: `--import tsx` goes and every
 * TypeScript file of the repository among them becomes its compiled file. Without the tree (a file run outside
 * vitest's global setup) they are left as they are.
 * @example spawn(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', 'worker']));
 */
export function nodeArgs(args: readonly string[]): string[] {
  if (!process.env[ENV]) return [...args];
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--import' && args[i + 1] === 'tsx') {
      i++;
      continue;
    }
    out.push(/\.ts$/.test(args[i]!) && !args[i]!.startsWith('-') ? compiledPath(args[i]!) : args[i]!);
  }
  return out;
}
