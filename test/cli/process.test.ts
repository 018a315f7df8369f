import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { nodeArgs } from '../helpers/compiled.js';

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
  { env = {}, closeStdout = false }: { env?: Record<string, string>; closeStdout?: boolean } = {},
): Promise<Exit> {
  const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', ...args]), {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  if (closeStdout) child.stdout.destroy();
  else child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
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
