/** A stored answer, replayed for a repeated `Idempotency-Key`. */
export interface StoredAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

interface Entry {
  answer: Promise<StoredAnswer>;
  /** Digest of the request body the key was first used with. */
  fingerprint: string;
  storedAt: number;
}

/** How long a key is remembered: 24 hours. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/**
 * Remembers the answer of each `Idempotency-Key` (per account and endpoint)
 * for 24 hours, so a retried send returns the first answer and delivers
 * nothing twice. A repeat that arrives while the first is still being handled
 * waits for it. Only successful answers are kept: a failed request may be
 * retried for real. A key used again with a different request body is a
 * conflict (a caller's bug), never a replay that would drop the second request.
 */
export class IdempotencyCache {
  readonly #entries = new Map<string, Entry>();

  /**
   * Runs `handle` once per scope key within the window; repeats with the same
   * `fingerprint` get its answer.
   * @returns the answer and whether it was replayed, or `conflict` when the key was used with another body
   */
  async run(
    scopeKey: string,
    fingerprint: string,
    nowMs: number,
    handle: () => Promise<StoredAnswer>,
  ): Promise<{ answer: StoredAnswer; replayed: boolean } | 'conflict'> {
    this.#expire(nowMs);
    const existing = this.#entries.get(scopeKey);
    if (existing && existing.fingerprint !== fingerprint) return 'conflict';
    if (existing) {
      try {
        return { answer: await existing.answer, replayed: true };
      } catch {
        // The first attempt failed and was forgotten below; fall through and handle this one.
      }
    }
    const answer = handle();
    const entry: Entry = { answer, fingerprint, storedAt: nowMs };
    this.#entries.set(scopeKey, entry);
    try {
      const result = await answer;
      if (result.status >= 300) this.#forget(scopeKey, entry);
      return { answer: result, replayed: false };
    } catch (err) {
      this.#forget(scopeKey, entry);
      throw err;
    }
  }

  clear(): void {
    this.#entries.clear();
  }

  #forget(scopeKey: string, entry: Entry): void {
    if (this.#entries.get(scopeKey) === entry) this.#entries.delete(scopeKey);
  }

  #expire(nowMs: number): void {
    for (const [key, entry] of this.#entries) {
      if (nowMs - entry.storedAt < IDEMPOTENCY_WINDOW_MS) break;
      this.#entries.delete(key);
    }
  }
}
