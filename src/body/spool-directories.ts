import { rmSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The spool folders of this process, so none outlives it: they are removed
 * when the send ends, and also (synchronously) when the process exits, and on
 * SIGINT/SIGTERM when nothing else handles the signal. Folders left by a
 * process that died without a chance to clean up (SIGKILL, a crash) are swept
 * when this process first spools into the same directory.
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
  if (!signalsHooked) {
    signalsHooked = true;
    for (const signal of SIGNALS) process.on(signal, onSignal);
  }
}

/** Removes a spool folder and forgets it. */
export async function removeSpoolFolder(folder: string): Promise<void> {
  try {
    await rm(folder, { recursive: true, force: true });
  } finally {
    live.delete(folder);
    if (live.size === 0 && signalsHooked) {
      signalsHooked = false;
      for (const signal of SIGNALS) process.off(signal, onSignal);
    }
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
 * On SIGINT/SIGTERM with no other listener, Node would exit without running
 * 'exit' handlers: clean up, then let the signal end the process as it would
 * have. When the app handles the signal itself, it decides when to exit, and
 * the 'exit' handler cleans up then (sends in progress keep their files).
 */
function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  removeAllNow();
  signalsHooked = false;
  for (const s of SIGNALS) process.off(s, onSignal);
  process.kill(process.pid, signal);
}
