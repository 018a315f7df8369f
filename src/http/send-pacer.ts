import type { RateLimitOptions } from './requester-options.js';
import { sleep } from './retry-policy.js';

/**
 * Spaces the starts of sends so that at most `max` start in any `duration` ms:
 * each start is given the next free time slot, `duration / max` ms apart.
 */
export class SendPacer {
  readonly #interval: number;
  #next = 0;

  constructor({ max, duration }: RateLimitOptions) {
    this.#interval = duration / max;
  }

  /** Resolves at this caller's slot; an aborted signal rejects (its slot is not given back). */
  async wait(signal: AbortSignal): Promise<void> {
    const now = performance.now();
    const slot = Math.max(now, this.#next);
    this.#next = slot + this.#interval;
    if (slot > now) await sleep(slot - now, signal);
  }
}
