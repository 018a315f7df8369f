import { Readable } from 'node:stream';
import { runCli } from '../../src/cli/run-cli.js';

/** What a CLI run printed, and its exit code. */
export interface CapturedRun {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI in this process with the given standard input (empty by
 * default), collecting what it prints.
 * @example
 * const { code, stdout } = await runCliCapturing(['queue', 'status'], { env: { REDIS_URL: redis.url } });
 */
export async function runCliCapturing(
  argv: string[],
  { env, signal, stdin = '' }: { env: Record<string, string>; signal?: AbortSignal; stdin?: string },
): Promise<CapturedRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    stdin: Readable.from(stdin === '' ? [] : [Buffer.from(stdin)]),
    env,
    ...(signal ? { signal } : {}),
  });
  return { code, stdout, stderr };
}
