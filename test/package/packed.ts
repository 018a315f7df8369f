import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { cp, mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { inject } from 'vitest';
import { eventually } from '../helpers/async.js';
import { PACKED_HOME, ROOT } from './packed-setup.js';

const run = promisify(execFile);

export { ROOT };

declare module 'vitest' {
  export interface ProvidedContext {
    /** The folder of this test run (test/package/packed-setup.ts makes it and removes it). */
    packedRun: string;
  }
}

/**
 * `name@version` of a package as the repository has it installed (its lock), so that a project
 * installs what `npm ci` already put in npm's cache. Other specs are returned unchanged.
 */
export function pinned(spec: string): string {
  if (/^@?[^@]+@/.test(spec)) return spec;
  // Read from node_modules by path: a package whose exports map leaves out package.json cannot be required for it.
  const { version } = JSON.parse(readFileSync(join(ROOT, 'node_modules', spec, 'package.json'), 'utf8')) as {
    version: string;
  };
  return `${spec}@${version}`;
}

/**
 * The packed package: `npm pack` of this checkout, made once per test run whichever test file
 * asks first (the others wait for it), after a build when dist/ is older than the sources.
 * `EML_API_TARBALL` names one packed already (.ci/run packs once for every step).
 */
export async function packedTarball(): Promise<string> {
  if (process.env.EML_API_TARBALL) return process.env.EML_API_TARBALL;
  const dir = join(inject('packedRun'), 'pack');
  await onceAcrossProcesses(dir, async () => {
    if (distIsStale()) await run('npm', ['run', 'build'], { cwd: ROOT, maxBuffer: 16 << 20 });
    await run('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], { cwd: ROOT });
  });
  const tarball = (await readdir(dir)).find((f) => f.endsWith('.tgz'));
  if (!tarball) throw new Error(`npm pack left no tarball in ${dir}`);
  return join(dir, tarball);
}

/** The paths the packed tarball holds, as users get them (`dist/index.js`, `README.md`...). */
export async function packedFiles(): Promise<string[]> {
  const { stdout } = await run('tar', ['-tzf', await packedTarball()], { maxBuffer: 16 << 20 });
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('package/') && !line.endsWith('/'))
    .map((line) => line.slice('package/'.length));
}

/**
 * A project with the packed package and exactly `packages` installed from the registry (npm's
 * cache first), as a user installs them: `npm install nodemailer-eml-api <packages>`. Nodemailer,
 * the one peer that is not optional, is always there (npm installs it with the package anyway):
 * the repository's version unless `packages` names one. Installed once per set of packages and tarball, across
 * test runs too: a test writes its own files into it and changes nothing else, unless it names
 * `ownUse`, which gives it a copy of its own.
 */
export async function installedProject(packages: readonly string[], ownUse?: string): Promise<string> {
  const tarball = await packedTarball();
  const withNodemailer = packages.some((p) => /^nodemailer(@|$)/.test(p)) ? packages : ['nodemailer', ...packages];
  const specs = [...new Set(withNodemailer.map(pinned))].sort();
  const tarballHash = createHash('sha256')
    .update(await readFile(tarball))
    .digest('hex')
    .slice(0, 12);
  const projectDir = (name: string) =>
    join(PACKED_HOME, 'projects', `${tarballHash}-${createHash('sha256').update(name).digest('hex').slice(0, 12)}`);
  const dir = projectDir(specs.join(' '));
  await onceAcrossProcesses(dir, async () => {
    await writeFile(
      join(dir, 'package.json'),
      JSON.stringify({ name: 'consumer', private: true, description: specs.join(' ') }, null, 2),
    );
    await run(
      'npm',
      ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball, ...specs],
      {
        cwd: dir,
      },
    );
  });
  await forgetOtherTarballs(tarballHash);
  if (ownUse === undefined) return dir;
  const own = projectDir(`${specs.join(' ')} for ${ownUse}`);
  await onceAcrossProcesses(own, async () => {
    await cp(dir, own, { recursive: true, verbatimSymlinks: true, filter: (path) => path !== join(dir, '.done') });
  });
  return own;
}

/** What a command printed and how it ended. */
export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command to its end and says how it ended, without throwing on a failure.
 * @example
 * const { code, stderr } = await runIn(project, 'node', ['check.mjs']);
 */
export async function runIn(
  cwd: string,
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string | undefined>; input?: string; timeout?: number } = {},
): Promise<Finished> {
  const child = spawn(command, args, {
    cwd,
    env: { ...process.env, ...options.env },
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    timeout: options.timeout ?? 60_000,
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  // A command that exits without reading its input closes the pipe: EPIPE, not a failure of the test.
  child.stdin?.on('error', () => undefined).end(options.input);
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  return { code, signal, stdout, stderr };
}

/** The `eml-api` command a project installed. */
export function binOf(project: string): string {
  return join(project, 'node_modules', '.bin', 'eml-api');
}

/** Whether a file under src/ (or the build's configuration) changed since dist/ was built. */
function distIsStale(): boolean {
  const built = join(ROOT, 'dist', 'index.js');
  if (!existsSync(built)) return true;
  const builtAt = statSync(built).mtimeMs;
  const newer = (path: string): boolean => statSync(path).mtimeMs > builtAt;
  if (['package.json', 'tsup.config.ts'].some((f) => newer(join(ROOT, f)))) return true;
  const src = join(ROOT, 'src');
  return readdirSync(src, { recursive: true, encoding: 'utf8' }).some((f) => newer(join(src, f)));
}

/**
 * Runs `work` once for `dir` among every process of every test run: the first caller takes the lock
 * (a folder, made atomically) and works; the others wait for its mark. A lock whose process died
 * is taken over, and a failed `work` leaves no mark, so the next caller tries again.
 */
async function onceAcrossProcesses(dir: string, work: () => Promise<void>): Promise<void> {
  const done = join(dir, '.done');
  const lock = `${dir}.lock`;
  for (;;) {
    if (existsSync(done)) return;
    await mkdir(join(dir, '..'), { recursive: true });
    const mine = await mkdir(lock).then(
      () => true,
      (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
        return false;
      },
    );
    if (mine) {
      try {
        await writeFile(join(lock, 'pid'), String(process.pid));
        if (existsSync(done)) return;
        await rm(dir, { recursive: true, force: true });
        await mkdir(dir, { recursive: true });
        await work();
        await writeFile(done, new Date().toISOString());
        return;
      } finally {
        await rm(lock, { recursive: true, force: true });
      }
    }
    await eventually(() => existsSync(done) || !existsSync(lock) || holderDied(lock), { timeout: 300_000 });
    if (!existsSync(done) && holderDied(lock)) await rm(lock, { recursive: true, force: true });
  }
}

function holderDied(lock: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(join(lock, 'pid'), 'utf8'));
  } catch {
    return false; // being written, or gone
  }
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** Removes the projects of tarballs other than the current one, once they are an hour old. */
async function forgetOtherTarballs(current: string): Promise<void> {
  const projects = join(PACKED_HOME, 'projects');
  for (const name of await readdir(projects).catch(() => [] as string[])) {
    if (name.startsWith(current)) continue;
    const path = join(projects, name);
    const age =
      Date.now() -
      (await stat(path).then(
        (s) => s.mtimeMs,
        () => Date.now(),
      ));
    if (age > 3_600_000) await rm(path, { recursive: true, force: true });
  }
}

/** A path relative to the repository, for messages. */
export function fromRoot(path: string): string {
  return relative(ROOT, path);
}

/** A long-running command (eml-api serve, relay, worker) started in a project. */
export interface Started {
  readonly child: ReturnType<typeof spawn>;
  /** Everything it printed so far, standard output and error interleaved. */
  output(): string;
  /** Resolves with the first line printed that matches; rejects when the process ends first. */
  line(pattern: RegExp): Promise<string>;
  /** SIGTERM, then how it ended. */
  stop(): Promise<Finished>;
}

/**
 * Starts a command that runs until stopped.
 * @example
 * const relay = start(project, binOf(project), ['relay', '--port', '0'], { env });
 * const port = Number((await relay.line(/listening on/)).match(/:(\d+)/)![1]);
 * await relay.stop();
 */
export function start(
  cwd: string,
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string | undefined> } = {},
): Started {
  const child = spawn(command, args, {
    cwd,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let all = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => ((stdout += s), (all += s)));
  child.stderr.setEncoding('utf8').on('data', (s: string) => ((stderr += s), (all += s)));
  const closed = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
  let ended = false;
  void closed.then(() => (ended = true));
  return {
    child,
    output: () => all,
    async line(pattern) {
      const found = () => all.split('\n').find((l) => pattern.test(l));
      let timer: NodeJS.Timeout | undefined;
      let check = (): void => undefined;
      const printed = new Promise<void>((resolve) => {
        check = () => {
          if (found() !== undefined) resolve();
        };
        child.stdout.on('data', check);
        child.stderr.on('data', check);
        check();
      });
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, 30_000)));
      await Promise.race([printed, closed, late]).finally(() => {
        clearTimeout(timer);
        child.stdout.off('data', check);
        child.stderr.off('data', check);
      });
      const line = found();
      if (line === undefined)
        throw new Error(`${command} ${args.join(' ')} did not print ${pattern} (ended: ${ended}):\n${all}`);
      return line;
    },
    async stop() {
      if (!ended) child.kill('SIGTERM');
      const [code, signal] = await closed;
      return { code, signal, stdout, stderr };
    },
  };
}
