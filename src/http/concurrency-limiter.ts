/**
 * Bounds how many async tasks run at once; the rest wait in FIFO order.
 * Used to keep at most `maxConnections` requests in flight whatever the
 * dispatcher, and to tell the transport when it can take more work.
 */
export class ConcurrencyLimiter {
  readonly #limit: number;
  readonly #waiting: (() => void)[] = [];
  #active = 0;
  readonly #onRelease: () => void;

  /**
   * @param limit tasks allowed to run at once
   * @param onRelease called each time a task finishes and frees a slot
   */
  constructor(limit: number, onRelease: () => void = () => {}) {
    this.#limit = limit;
    this.#onRelease = onRelease;
  }

  /** Tasks running now. */
  get active(): number {
    return this.#active;
  }

  /** Tasks waiting for a slot. */
  get pending(): number {
    return this.#waiting.length;
  }

  /** Whether a new task would start at once. */
  get hasFreeSlot(): boolean {
    return this.#active + this.#waiting.length < this.#limit;
  }

  /**
   * Runs `task` when a slot is free. An aborted `signal` rejects at once with
   * the signal's reason, also while waiting, and frees the waiting place.
   */
  async run<T>(task: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    signal?.throwIfAborted();
    if (this.#active >= this.#limit) {
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          const at = this.#waiting.indexOf(grant);
          if (at !== -1) this.#waiting.splice(at, 1);
          reject(signal!.reason);
        };
        const grant = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        this.#waiting.push(grant);
      });
    } else {
      this.#active++;
    }
    try {
      return await task();
    } finally {
      const next = this.#waiting.shift();
      // Hand the slot straight to the next waiter so the active count never dips.
      if (next) next();
      else this.#active--;
      this.#onRelease();
    }
  }
}
