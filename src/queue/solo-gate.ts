/**
 * Admits the sends of one worker: shared, or alone. A job that has stalled is sent alone, so that if
 * it crashes the worker again no other send goes down with it and the stall is its own.
 *
 * A fair readers-writer lock, first come first served: a send alone waits for the sends in flight, and
 * sends after a waiting one alone wait behind it. Holders never wait on the gate again and each send
 * ends within the client's timeouts, so nothing deadlocks or starves. Waiting jobs keep their locks:
 * BullMQ renews the lock of every job a worker has taken.
 */
export class SoloGate {
  #shared = 0;
  #alone = false;
  readonly #waiting: { alone: boolean; admit: () => void }[] = [];

  /** Sends in flight now. */
  get inFlight(): number {
    return this.#alone ? 1 : this.#shared;
  }

  /**
   * Waits for the send's turn.
   * @returns the function that ends the turn (idempotent)
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
