/** A stream the CLI writes text to: `process.stdout`, `process.stderr`, or a test's capture. */
export interface CliOutput {
  write(chunk: string): unknown;
  /** `true` when the stream is a terminal; the progress bar is drawn only then. */
  isTTY?: boolean;
}

/**
 * Everything the CLI reads from or writes to its process, so that
 * {@link runCli} can run in-process with captured streams.
 *
 * @example
 * const out: string[] = [];
 * await runCli(['group', 'check', 'news', 'ann@example.test'], {
 *   stdout: { write: (s: string) => out.push(s) },
 *   env: { EML_API_URL: url, EML_API_KEY: key },
 * });
 */
export interface CliIo {
  stdout: CliOutput;
  stderr: CliOutput;
  /** Read by `send -` and `group add <group> -`. */
  stdin: AsyncIterable<string | Uint8Array>;
  /** Where `EML_API_URL`, `EML_API_KEY` and `CI` are read. */
  env: Readonly<Record<string, string | undefined>>;
  /**
   * Stops long-running commands (`serve`, `relay`). Without it, they run until
   * SIGINT or SIGTERM.
   */
  signal?: AbortSignal;
}

/**
 * The process's own streams and environment, completed with the fields a caller gave.
 */
export function resolveCliIo(io: Partial<CliIo> = {}): CliIo {
  return {
    stdout: io.stdout ?? process.stdout,
    stderr: io.stderr ?? process.stderr,
    stdin: io.stdin ?? process.stdin,
    env: io.env ?? process.env,
    ...(io.signal ? { signal: io.signal } : {}),
  };
}
