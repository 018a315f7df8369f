/**
 * Admits one worker's sends, shared or alone. A stalled job is sent alone: if it crashes the worker
 * again, no other send goes down with it. A fair readers-writer lock; holders never wait on it again
 * and each send ends within the client's timeouts, so nothing deadlocks or starves. Waiting jobs keep
 * their locks: BullMQ renews the lock of every job a worker has taken.
 */
export class SoloGate {
  #shared = 0;
  #alone = false;
  readonly #waiting: { alone: boolean; admit: () => void }[] = [];

  get inFlight(): number {
    return this.#alone ? 1 : this.#shared;
  }

  /** @returns the function that ends the turn (idempotent) */
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

  /** Ordinary sends together, up to the next one that runs alone. */
  #admit(): void {
    while (this.#waiting.length > 0 && this.#free(this.#waiting[0]!.alone)) {
      const next = this.#waiting.shift()!;
      this.#take(next.alone);
      next.admit();
      if (next.alone) return;
    }
  }
}
