/**
 * Quarantine of jobs that have stalled, inside one worker: such a job is
 * sent alone, with nothing else of the worker in flight. A message that
 * crashes the worker sending it (out of memory, a native crash) takes down
 * every send the worker holds, and those stalled jobs used to come back
 * together on the same backoff and keep sharing its crashes, until innocent
 * messages were parked beside it as "crashing workers". Run alone, a stalled
 * job's next crash is its own; the job runner counts toward `maxStalls` only
 * the stalls of runs that were alone (job-runner.ts).
 *
 * A readers-writer lock, fair (first come, first served): ordinary sends
 * share the worker; a stalled job's send waits until the sends in flight
 * have ended, then runs alone; a send that comes after a waiting stalled job
 * waits behind it.
 * - No deadlock: a holder never waits for the gate again, and what holds it
 *   (a send) ends by itself, within the client's `timeouts`.
 * - No starvation: the queue is first in, first out, so a stalled job waits
 *   for the sends ahead of it only, and ordinary sends for the stalled jobs
 *   ahead of them only, each of which ends. A worker busy with stalled jobs
 *   sends one at a time while it has them; other workers (processes) are not
 *   held up.
 * - Jobs waiting here keep their locks: BullMQ renews the lock of every job
 *   a worker has taken, running or not.
 */

/**
 * Admits the sends of one worker: shared, or alone.
 *
 * @example
 * const leave = await gate.enter(job.data.stalls > 0);
 * try { await send(); } finally { leave(); }
 */
export class SoloGate {
  #shared = 0;
  #alone = false;
  readonly #waiting: { alone: boolean; admit: () => void }[] = [];

  /** Sends in flight now (tests, logs). */
  get inFlight(): number {
    return this.#alone ? 1 : this.#shared;
  }

  /**
   * Waits for the send's turn: at once for an ordinary send unless a send
   * alone runs or waits; for a send `alone`, until nothing else is in flight.
   * @returns the function that ends the send's turn (call it once)
   */
  async enter(alone: boolean): Promise<() => void> {
    if (this.#waiting.length === 0 && this.#free(alone)) {
      this.#take(alone);
    } else {
      await new Promise<void>((admit) => this.#waiting.push({ alone, admit }));
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      if (alone) this.#alone = false;
      else this.#shared--;
      this.#admit();
    };
  }

  #free(alone: boolean): boolean {
    return !this.#alone && (!alone || this.#shared === 0);
  }

  #take(alone: boolean): void {
    if (alone) this.#alone = true;
    else this.#shared++;
  }

  /** Admits waiting sends in order: ordinary ones together, up to the next one that runs alone. */
  #admit(): void {
    while (this.#waiting.length > 0 && this.#free(this.#waiting[0]!.alone)) {
      const next = this.#waiting.shift()!;
      this.#take(next.alone);
      next.admit();
      if (next.alone) return;
    }
  }
}
