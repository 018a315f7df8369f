/**
 * Resolves when the signal aborts or, without one, on SIGINT or SIGTERM:
 * how the long-running commands (`serve`, `relay`) wait until they are stopped.
 */
export function untilStopped(signal: AbortSignal | undefined): Promise<void> {
  if (signal) {
    return new Promise((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
