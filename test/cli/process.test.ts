import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { nodeArgs } from '../helpers/compiled.js';
import { eventually } from '../helpers/async.js';
import { startFakeService } from '../helpers/fake-service.js';

/**
 * `eml-api` as a shell script or a CI job runs it: a process, its exit code, its streams closed or
 * piped into `head`, its signals.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI's entry point as a process. `closeStdout` closes the reading end of its standard
 * output before it writes anything, as `| head -1` does once it has its line.
 */
function runProcess(
  args: string[],
  {
    env = {},
    closeStdout = false,
    stdin,
    onSpawn,
  }: {
    env?: Record<string, string>;
    closeStdout?: boolean;
    stdin?: string;
    onSpawn?: (child: ReturnType<typeof spawn>) => void;
  } = {},
): Promise<Exit> {
  const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', ...args]), {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  if (stdin !== undefined) child.stdin!.end(stdin);
  onSpawn?.(child);
  let stdout = '';
  let stderr = '';
  if (closeStdout) child.stdout!.destroy();
  else child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

describe('a reader of standard output that is gone (| head -1)', () => {
  it('ends a command quietly with its own exit code, without a stack trace', { timeout: 60_000 }, async () => {
    const help = await runProcess(['--help'], { closeStdout: true });
    expect(help).toMatchObject({ code: 0, stderr: '' });
    const usage = await runProcess(['group', 'check', 'news'], { closeStdout: true });
    expect(usage.code).toBe(2);
    expect(usage.stderr).toBe(
      'eml-api: group check needs a group id and at least one address (see "eml-api group check --help")\n',
    );
  });

  it('stops a command that runs until stopped, as SIGTERM does', { timeout: 60_000 }, async () => {
    const serve = await runProcess(['serve', '--port', '0'], { closeStdout: true });
    expect(serve).toMatchObject({ code: 0, stderr: '' });
  });
});

describe('group add interrupted (Ctrl-C) in the middle of an import', () => {
  it('says which batches were added and exits 1', { timeout: 60_000 }, async () => {
    const service = await startFakeService();
    try {
      service.script([{ status: 200, body: { skipped: [] } }], 'hold');
      const csv = `email\n${Array.from({ length: 5 }, (_, i) => `m${i}@example.test`).join('\n')}\n`;
      const exit = await runProcess(['group', 'add', 'news', '-', '--batch-size', '2'], {
        env: { EML_API_URL: service.url, EML_API_KEY: 'k' },
        stdin: csv,
        onSpawn: (child) => {
          void eventually(() => service.requests.length === 2, { what: 'the second batch sent' }).then(() =>
            child.kill('SIGINT'),
          );
        },
      });
      expect(exit).toMatchObject({ code: 1, signal: null, stdout: '' });
      expect(exit.stderr).toBe(
        'eml-api: interrupted during batch 2 of 3: the 2 entries of earlier batches were added, those of batch 2 may have been, the others were not; running the same import again adds the rest (re-adding a member updates it)\n',
      );
    } finally {
      service.releaseAll();
      await service.close();
    }
  });
});

describe('eml-api serve --data-dir where no directory can be made', () => {
  const children: ReturnType<typeof spawn>[] = [];
  afterEach(() => {
    for (const child of children.splice(0))
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  // /proc exists yet refuses every new entry with ENOENT, which sent Node's recursive mkdir round forever.
  it.skipIf(!existsSync('/proc/self'))(
    'refuses it at once with exit code 1, naming the directory and what is wrong there',
    { timeout: 60_000 },
    async () => {
      // Beyond loopback, serve keeps a made-up inbox login there too.
      for (const [dir, level, extra] of [
        ['/proc/eml-api-data', '/proc/eml-api-data', []],
        ['/proc/self/eml-api/data', '/proc/self/eml-api', ['--host', '0.0.0.0']],
      ] as const) {
        const exit = await runProcess(['serve', '--port', '0', '--data-dir', dir, ...extra], {
          onSpawn: (c) => children.push(c),
        });
        expect(exit).toMatchObject({ code: 1, signal: null, stdout: '' });
        expect(exit.stderr).toBe(
          `eml-api: The emulator's data directory ${dir} cannot be created: ${level} cannot be made in ${dirname(level)}, which exists but takes no new directories (a filesystem such as /proc) [ECONFIG]\n`,
        );
      }
    },
  );
});

describe('eml-api worker with a REDIS_URL that is not a Redis URL', () => {
  it('refuses it (exit 2) before it checks the key with the service', { timeout: 60_000 }, async () => {
    const service = await startFakeService();
    try {
      for (const [url, extra] of [
        ['redis://:badport', []],
        ['not a url', []],
        ['not a url', ['--processes', '2']],
      ] as const) {
        const exit = await runProcess(['worker', ...extra], {
          env: { REDIS_URL: url, EML_API_URL: service.url, EML_API_KEY: 'k' },
        });
        expect(exit).toMatchObject({ code: 2, signal: null, stdout: '' });
        expect(exit.stderr).toBe(
          'eml-api: --redis (or REDIS_URL): expected a redis:// or rediss:// URL, ioredis options or an ioredis instance (see "eml-api worker --help")\n',
        );
      }
      expect(service.requests).toHaveLength(0);
    } finally {
      await service.close();
    }
  });
});
