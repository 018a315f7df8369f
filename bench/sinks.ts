import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Handle to the sink process. */
export interface Sinks {
  /** The sink process's pid (for its CPU time). */
  pid: number;
  httpUrl: string;
  smtpPort: number;
  setDelay(ms: number): Promise<void>;
  stats(): Promise<{ connections: number; requests: number }>;
  reset(): Promise<void>;
  stop(): Promise<void>;
}

function ask<T>(child: ChildProcess, message: object): Promise<T> {
  return new Promise((resolve) => {
    child.once('message', (answer) => resolve(answer as T));
    child.send(message);
  });
}

/** Starts the sinks in a separate Node process (through tsx, like the benchmark itself). */
export async function startSinks(httpDelayMs = 0): Promise<Sinks> {
  const child = fork(fileURLToPath(new URL('./sink-process.ts', import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const { httpPort, smtpPort } = await ask<{ httpPort: number; smtpPort: number }>(child, {
    cmd: 'start',
    httpDelayMs,
  });
  return {
    pid: child.pid!,
    httpUrl: `http://127.0.0.1:${httpPort}`,
    smtpPort,
    setDelay: async (ms) => {
      await ask(child, { cmd: 'delay', httpDelayMs: ms });
    },
    stats: () => ask(child, { cmd: 'stats' }),
    reset: async () => {
      await ask(child, { cmd: 'reset' });
    },
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.send({ cmd: 'stop' });
      }),
  };
}
