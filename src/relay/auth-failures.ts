import { clientKey } from './client-address-list.js';

/** Client addresses whose failures are remembered at most; past it the least recently failing one is forgotten. */
export const MAX_TRACKED_ADDRESSES = 10_000;

/** An AUTH under way, counted against its address's budget until it ends (see {@link AuthFailureBudget.begin}). */
export interface AuthAttempt {
  /**
   * Ends the attempt: a failure (wrong credentials) stays counted; anything
   * else (accepted, or a service that could not tell) gives the slot back.
   * Only the first call counts.
   */
  end(failed: boolean): void;
}

/** How {@link AuthFailureBudget} counts. */
export interface AuthFailureBudgetOptions {
  /** Failed AUTHs a client address may make within `window` (`maxAuthFailuresPerAddress`). */
  limit: number;
  /** The window, in milliseconds (`authFailureWindow`). */
  window: number;
  /** Addresses remembered at most. @default MAX_TRACKED_ADDRESSES */
  maxAddresses?: number;
  /** The clock. @default Date.now */
  now?: () => number;
}

/**
 * The failed AUTHs of each client address, across its connections, as a
 * sliding window (Postfix's anvil counts `smtpd_client_auth_rate_limit` per
 * client the same way; Dovecot's auth penalty too): once an address has made
 * `limit` failures within `window`, its next AUTHs are refused without asking
 * the service until the oldest failure leaves the window. A guesser can open
 * new connections, but not a new address, so the per-connection limit alone
 * (three failures) does not slow it down.
 *
 * An AUTH takes its slot when it starts ({@link begin}), not when its
 * failure is known: the service takes a while to answer, and AUTHs sent at
 * once on many connections would otherwise all pass the check before any
 * failed (40 at once all reached the service with a budget of 10).
 *
 * IPv6 clients are counted per /64 ({@link clientKey}). Memory is bounded:
 * at most `limit` times per address and {@link MAX_TRACKED_ADDRESSES}
 * addresses, the least recently failing forgotten first; AUTHs under way
 * are bounded by the connections.
 */
export class AuthFailureBudget {
  readonly #limit: number;
  readonly #window: number;
  readonly #maxAddresses: number;
  readonly #now: () => number;
  /** Failure times per client key, oldest first; the Map in order of the latest failure. */
  readonly #failures = new Map<string, number[]>();
  /** AUTHs under way per client key. */
  readonly #pending = new Map<string, number>();

  constructor(options: AuthFailureBudgetOptions) {
    this.#limit = options.limit;
    this.#window = options.window;
    this.#maxAddresses = options.maxAddresses ?? MAX_TRACKED_ADDRESSES;
    this.#now = options.now ?? Date.now;
  }

  /** Addresses remembered now. */
  get size(): number {
    return this.#failures.size;
  }

  /**
   * Milliseconds until the address may AUTH again, or 0 when it may now
   * (AUTHs under way count as failures until they end).
   * @example budget.retryAfter('192.0.2.7') // 0, or 240000 after too many failures
   */
  retryAfter(address: string): number {
    const key = clientKey(address);
    const times = this.#recent(key);
    const pending = this.#pending.get(key) ?? 0;
    if (times.length + pending < this.#limit) return 0;
    // Spent by AUTHs under way: they end within seconds, one way or the other.
    if (times.length < this.#limit) return 1_000;
    return Math.max(1, times[times.length - this.#limit]! + this.#window - this.#now());
  }

  /**
   * Starts an AUTH of the address: takes a slot of its budget until the
   * attempt ends.
   * @returns the attempt, or the milliseconds to wait ({@link retryAfter}) when the budget is spent
   * @example
   * const attempt = budget.begin('192.0.2.7');
   * if (typeof attempt === 'number') refuse(attempt); else check().then((ok) => attempt.end(!ok));
   */
  begin(address: string): AuthAttempt | number {
    const wait = this.retryAfter(address);
    if (wait > 0) return wait;
    const key = clientKey(address);
    this.#pending.set(key, (this.#pending.get(key) ?? 0) + 1);
    let ended = false;
    return {
      end: (failed) => {
        if (ended) return;
        ended = true;
        const left = (this.#pending.get(key) ?? 1) - 1;
        if (left > 0) this.#pending.set(key, left);
        else this.#pending.delete(key);
        if (failed) this.record(address);
      },
    };
  }

  /** Counts one failed AUTH of the address. */
  record(address: string): void {
    const key = clientKey(address);
    const times = this.#recent(key);
    times.push(this.#now());
    // Only the last `limit` failures can decide anything.
    if (times.length > this.#limit) times.splice(0, times.length - this.#limit);
    this.#failures.delete(key);
    this.#failures.set(key, times);
    while (this.#failures.size > this.#maxAddresses) {
      this.#failures.delete(this.#failures.keys().next().value!);
    }
  }

  /** The failures of a key still within the window (the key is forgotten when none is). */
  #recent(key: string): number[] {
    const times = this.#failures.get(key);
    if (!times) return [];
    const since = this.#now() - this.#window;
    let expired = 0;
    while (expired < times.length && times[expired]! <= since) expired++;
    if (expired === times.length) {
      this.#failures.delete(key);
      return [];
    }
    if (expired > 0) times.splice(0, expired);
    return times;
  }
}
