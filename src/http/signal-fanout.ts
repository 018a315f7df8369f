/**
 * Forwards the abort of a caller's signal to the controllers of the calls
 * that use it, through one listener per signal however many calls share it
 * (an app may pass one signal to thousands of sends: one listener each would
 * pass Node's MaxListeners warning).
 */
export class SignalFanout {
  readonly #followers = new Map<AbortSignal, { calls: Set<AbortController>; listener: () => void }>();

  /** Aborts `controller` when `signal` aborts (at once when it already has). */
  follow(signal: AbortSignal, controller: AbortController): void {
    if (signal.aborted) {
      controller.abort(signal.reason);
      return;
    }
    let entry = this.#followers.get(signal);
    if (!entry) {
      const calls = new Set<AbortController>();
      const listener = () => {
        for (const call of calls) call.abort(signal.reason);
      };
      entry = { calls, listener };
      this.#followers.set(signal, entry);
      signal.addEventListener('abort', listener, { once: true });
    }
    entry.calls.add(controller);
  }

  /** Stops forwarding to `controller`; the last one removes the signal's listener. */
  unfollow(signal: AbortSignal, controller: AbortController): void {
    const entry = this.#followers.get(signal);
    if (!entry) return;
    entry.calls.delete(controller);
    if (entry.calls.size === 0) {
      signal.removeEventListener('abort', entry.listener);
      this.#followers.delete(signal);
    }
  }
}
