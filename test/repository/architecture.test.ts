import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };
import tsconfig from '../../tsconfig.json' with { type: 'json' };
import tsupConfig from '../../tsup.config.js';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));

/** Every .ts file under src/, relative to it. */
function sourceFiles(dir = SRC): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [relative(SRC, path)] : [];
  });
}

/** The src/ files a file imports (types included), relative to src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  const specifiers = [...text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) => m[1]!);
  return specifiers.map((s) => relative(SRC, resolve(dirname(join(SRC, file)), s)).replace(/\.js$/, '.ts'));
}

/**
 * The layer of a file: its top folder, and inside the emulator its sub-folder.
 * Files at the top of src/ (index.ts) and of the emulator (its entry and
 * composition root) are marked as roots.
 */
function layerOf(file: string): string {
  const parts = file.split('/');
  if (parts.length === 1) return 'root';
  if (parts[0] === 'emulator') return parts.length === 2 ? 'emulator/root' : `emulator/${parts[1]}`;
  return parts[0]!;
}

/** What each layer may import besides itself. */
const ALLOWED: Record<string, string[]> = {
  shared: [],
  protocol: ['shared'],
  http: ['shared'],
  body: ['http', 'protocol', 'shared'],
  // Metrics, traces and the health port: told of events by hooks (the request engine's observers), never the reverse.
  observability: ['http', 'shared'],
  client: ['http', 'body', 'protocol', 'shared'],
  transport: ['observability', 'client', 'http', 'body', 'protocol', 'shared'],
  queue: ['observability', 'transport', 'client', 'http', 'body', 'protocol', 'shared'],
  relay: ['observability', 'queue', 'transport', 'client', 'http', 'body', 'protocol', 'shared'],
  'emulator/state': ['protocol', 'shared'],
  'emulator/operations': ['emulator/state', 'protocol', 'shared'],
  'emulator/http': ['emulator/operations', 'emulator/state', 'protocol', 'shared'],
  'emulator/pages': ['emulator/http', 'emulator/operations', 'emulator/state', 'protocol', 'shared'],
  'emulator/inbox': ['emulator/pages', 'emulator/http', 'emulator/operations', 'emulator/state', 'protocol', 'shared'],
  // The composition root also starts the relay for SMTP in (smtp-ingest.ts): the emulator sits below the relay.
  'emulator/root': [
    'relay',
    'emulator/inbox',
    'emulator/pages',
    'emulator/http',
    'emulator/operations',
    'emulator/state',
    'protocol',
    'shared',
  ],
  cli: [
    'emulator/root',
    'observability',
    'relay',
    'queue',
    'transport',
    'client',
    'http',
    'body',
    'protocol',
    'shared',
  ],
  root: ['observability', 'relay', 'queue', 'transport', 'client', 'http', 'body', 'protocol', 'shared'],
};

describe('the layers of src/', () => {
  const files = sourceFiles();

  it('import one way: each layer only from the layers below it', () => {
    const wrong: string[] = [];
    for (const file of files) {
      const from = layerOf(file);
      const allowed = ALLOWED[from];
      expect(allowed, `${file}: layer ${from} has no rule`).toBeDefined();
      for (const target of importsOf(file)) {
        const to = layerOf(target);
        if (to !== from && !allowed!.includes(to)) wrong.push(`${file} (${from}) imports ${target} (${to})`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('have no import cycle', () => {
    const graph = new Map(files.map((f) => [f, importsOf(f)]));
    const cycles: string[] = [];
    const state = new Map<string, 'visiting' | 'done'>();
    const visit = (file: string, path: string[]): void => {
      if (state.get(file) === 'done') return;
      if (state.get(file) === 'visiting') {
        cycles.push([...path.slice(path.indexOf(file)), file].join(' -> '));
        return;
      }
      state.set(file, 'visiting');
      for (const next of graph.get(file) ?? []) visit(next, [...path, file]);
      state.set(file, 'done');
    };
    for (const file of files) visit(file, []);
    expect(cycles).toEqual([]);
  });

  it('let only the entry points and the CLI reach the web inbox', () => {
    const users = files.filter((f) => importsOf(f).some((t) => t.startsWith('emulator/inbox/')));
    expect(users.filter((f) => !f.startsWith('emulator/inbox/'))).toEqual(['emulator/start-emulator.ts']);
  });
});

/** A file's code without its comments. */
function codeOf(file: string): string {
  return readFileSync(join(SRC, file), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '')
    .replace(/ \/\/ .*$/gm, '');
}

describe('smtp-server', () => {
  const ADAPTER = 'relay/smtp-server-adapter.ts';
  const files = sourceFiles();

  it('is loaded and imported by its adapter alone (types included)', () => {
    const users = files.filter((f) => /['"]smtp-server(?:\/[^'"]*)?['"]/.test(codeOf(f)));
    expect(users).toEqual([ADAPTER]);
  });

  it("has its internals (underscored members) touched by its adapter alone: none in the relay, the CLI or the emulator's SMTP in", () => {
    const near = files.filter(
      (f) => (f.startsWith('relay/') || f.startsWith('cli/') || f === 'emulator/smtp-ingest.ts') && f !== ADAPTER,
    );
    const touches = near.flatMap((f) =>
      [...codeOf(f).matchAll(/(?:\.|\[\s*['"])_[A-Za-z]\w*/g)].map((m) => `${f}: ${m[0]}`),
    );
    expect(touches).toEqual([]);
  });
});

describe('the entry points', () => {
  const subpaths = Object.keys(pkg.exports).filter((key) => key !== './package.json');
  const names = subpaths.map((key) => (key === '.' ? 'index' : key.slice(2)));
  type Build = { entry: Record<string, string>; format: string[]; dts?: { entry: Record<string, string> } };
  const builds = (Array.isArray(tsupConfig) ? tsupConfig : [tsupConfig]) as Build[];
  const esm = builds.find((b) => b.format.includes('esm') && b.dts)!;
  const cjs = builds.find((b) => b.format.includes('cjs') && b.dts)!;
  const library = cjs;

  it('are built, typed and resolved alike: the exports map, typesVersions, tsup (code and .d.ts) and the tsconfig paths', () => {
    expect(Object.keys(library.entry).sort()).toEqual([...names].sort());
    expect(library.dts!.entry).toEqual(library.entry);
    // The ES module build adds the CLI, with which the entry points share their chunks.
    expect(esm.entry).toEqual({ ...library.entry, cli: 'src/cli/main.ts' });
    expect(esm.dts!.entry).toEqual(library.entry);
    expect(pkg.typesVersions['*']).toEqual(
      Object.fromEntries(names.filter((n) => n !== 'index').map((n) => [n, [`./dist/${n}.d.ts`]])),
    );
    const paths = tsconfig.compilerOptions.paths as Record<string, string[]>;
    for (const [subpath, name] of subpaths.map((key, i) => [key, names[i]!] as const)) {
      expect(paths[`nodemailer-eml-api${subpath.slice(1)}`], subpath).toEqual([`./${library.entry[name]}`]);
      expect(pkg.exports[subpath as keyof typeof pkg.exports], subpath).toEqual({
        import: { types: `./dist/${name}.d.ts`, default: `./dist/${name}.js` },
        require: { types: `./dist/${name}.d.cts`, default: `./dist/${name}.cjs` },
      });
    }
  });

  it('each have an API report in etc/ (npm run api:check compares it with the built types)', () => {
    const reports = readdirSync(fileURLToPath(new URL('../../etc', import.meta.url))).filter((f) =>
      f.endsWith('.api.md'),
    );
    expect(reports.sort()).toEqual(names.map((name) => `${name}.api.md`).sort());
  });
});
