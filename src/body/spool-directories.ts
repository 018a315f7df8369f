import { rmSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The spool folders of this process, so none outlives it: they are removed
 * when the send ends, and also (synchronously) when the process exits, and
 * on a SIGINT/SIGTERM that nothing else handles, which would end the process
 * without its 'exit' handlers. Folders left by a process that died without a
 * chance to clean up (SIGKILL, a crash) are swept when this process first
 * spools into the same directory.
 *
 * Folder names carry the owner's pid: `eml-api-<pid>-<random>`.
 */

const PREFIX = 'eml-api-';
const live = new Set<string>();
const swept = new Set<string>();
const SIGNALS = ['SIGINT', 'SIGTERM'] as const;
let exitHooked = false;
let signalsHooked = false;

/** The `mkdtemp` prefix of a new spool folder in `directory`. */
export function spoolFolderPrefix(directory: string): string {
  return join(directory, `${PREFIX}${process.pid}-`);
}

/** Records a spool folder of this process (removed at exit if still there). */
export function trackSpoolFolder(folder: string): void {
  live.add(folder);
  if (!exitHooked) {
    exitHooked = true;
    process.on('exit', removeAllNow);
  }
  if (!signalsHooked) hookSignals();
}

/** Removes a spool folder and forgets it. */
export async function removeSpoolFolder(folder: string): Promise<void> {
  try {
    await rm(folder, { recursive: true, force: true });
  } finally {
    live.delete(folder);
    if (live.size === 0 && signalsHooked) unhookSignals();
  }
}

/**
 * Removes, once per directory and process, the spool folders of processes
 * that no longer run. Best effort: a folder it cannot read or remove stays.
 */
export async function sweepStaleSpoolFolders(directory: string): Promise<void> {
  if (swept.has(directory)) return;
  swept.add(directory);
  let names: string[];
  try {
    names = await readdir(directory);
  } catch {
    return;
  }
  for (const name of names) {
    const pid = /^eml-api-(\d+)-/.exec(name)?.[1];
    if (pid === undefined || Number(pid) === process.pid || isRunning(Number(pid))) continue;
    await rm(join(directory, name), { recursive: true, force: true }).catch(() => undefined);
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function removeAllNow(): void {
  for (const folder of live) rmSync(folder, { recursive: true, force: true });
  live.clear();
}

/**
 * A listener for SIGINT and SIGTERM, while spool folders exist, placed first
 * among the signal's listeners. A listener of the process's turns off
 * Node's default action (the process ends, without 'exit' handlers), so the
 * spool's must not swallow a signal nobody else handles, nor act on one the
 * app handles (the relay's CLI, or `process.once('SIGTERM', () => relay.close())`,
 * closes gracefully, the messages in flight keeping their files).
 *
 * It decides by the listeners there were when the signal came, which only
 * the first listener sees: Node calls them from a copy of the list, and a
 * `once` listener (or one that removes itself, as the CLI's does) is gone
 * from the list by the time a later one runs. Being first, the spool's sees
 * them all; see {@link keepFirst}.
 */
function hookSignals(): void {
  signalsHooked = true;
  for (const signal of SIGNALS) process.prependListener(signal, onSignal);
  process.on('newListener', keepFirst);
}

function unhookSignals(): void {
  signalsHooked = false;
  for (const signal of SIGNALS) process.off(signal, onSignal);
  process.off('newListener', keepFirst);
}

/**
 * Puts the spool's listener first again after the app prepends one of its
 * own: 'newListener' fires before the listener is added, so the move waits
 * for a microtask, which runs before any signal can be emitted (signals come
 * from the event loop).
 */
function keepFirst(event: string | symbol, listener: unknown): void {
  if (listener === onSignal || !(SIGNALS as readonly (string | symbol)[]).includes(event)) return;
  const signal = event as NodeJS.Signals;
  queueMicrotask(() => {
    if (!signalsHooked || process.listeners(signal)[0] === onSignal) return;
    process.off(signal, onSignal);
    process.prependListener(signal, onSignal);
  });
}

/**
 * With another listener, the app handles the signal: nothing is done here,
 * and the 'exit' handler removes the folders when the app ends the process.
 * With none, the process would have ended by the signal: the folders are
 * removed and the signal raised again, now with no listener, so that it ends
 * the process as it would have without the spool (exit status and all).
 */
function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  removeAllNow();
  unhookSignals();
  process.kill(process.pid, signal);
}
