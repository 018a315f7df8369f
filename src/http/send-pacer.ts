import { sleep } from './retry-policy.js';

/**
 * Spaces the starts of sends so that at most `perSecond` start in any second:
 * each start is given the next free time slot, `1000 / perSecond` ms apart.
 */
export class SendPacer {
  readonly #interval: number;
  #next = 0;

  constructor(perSecond: number) {
    this.#interval = 1000 / perSecond;
  }

  /** Resolves at this caller's slot; an aborted signal rejects (its slot is not given back). */
  async wait(signal: AbortSignal): Promise<void> {
    const now = performance.now();
    const slot = Math.max(now, this.#next);
    this.#next = slot + this.#interval;
    if (slot > now) await sleep(slot - now, signal);
  }
}
