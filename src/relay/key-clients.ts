import { createHash } from 'node:crypto';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { identitySecret } from './message-identity.js';

/** How long a key the service accepted is trusted for new AUTHs without asking again. */
export const VERIFIED_FOR_MS = 5 * 60_000;

/**
 * How long a key the service refused is refused again without asking: a
 * guesser that repeats a key, or a client retrying with a revoked one, costs
 * the service one request a minute, and a key given its scope in the
 * dashboard works again within that time.
 */
export const REFUSED_FOR_MS = 60_000;

/** Refused keys remembered at most (their fingerprints, with the refusal); the oldest is forgotten first. */
export const MAX_REFUSED_KEYS = 1_000;

/** The client of one API key given as an SMTP password. */
export interface KeyClient {
  /** A short fingerprint of the key (a SHA-256 prefix), for logs and the session; never the key. */
  readonly id: string;
  readonly client: EmlApiClient;
  /** The key's `identitySecret`, which keys the identities of the messages sent with it (not the key). */
  readonly identitySecret: Buffer;
}

interface Entry extends KeyClient {
  verifiedUntil: number;
  verifying: Promise<unknown> | undefined;
  /** SMTP sessions authenticated with the key now. */
  sessions: number;
  lastUsed: number;
}

/**
 * The clients of the API keys SMTP clients authenticate with (their
 * password is their key; the relay stores none). One client per key, made at
 * its first AUTH and checked like `client.verify()` does; a key the service
 * accepted is trusted for {@link VERIFIED_FOR_MS} before it is asked again;
 * one it refused is refused again without asking for {@link REFUSED_FOR_MS}
 * (at most {@link MAX_REFUSED_KEYS} remembered, by fingerprint).
 * At most `max` clients are kept beyond those in use: the least recently
 * used idle one is closed (gracefully) when the bound is passed. Keys live
 * only inside their clients; entries are found by fingerprint.
 */
export class KeyClients {
  readonly #createClient: (apiKey: string) => EmlApiClient;
  readonly #max: number;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();
  readonly #closing = new Set<Promise<void>>();
  /** Fingerprints of keys the service refused, with the refusal and when it stops counting; oldest first. */
  readonly #refused = new Map<string, { until: number; err: unknown }>();

  constructor(createClient: (apiKey: string) => EmlApiClient, max: number, now: () => number = Date.now) {
    this.#createClient = createClient;
    this.#max = max;
    this.#now = now;
  }

  /** Clients kept now. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Checks a key with the service and returns its client, retained for one
   * session (call {@link release} when the session ends).
   *
   * @throws {EmlApiError} `ECONFIG` when the text cannot be a key; what `verify()` throws (`EAUTH` when refused)
   */
  async authenticate(apiKey: string): Promise<KeyClient> {
    const id = fingerprint(apiKey);
    const refused = this.#refused.get(id);
    if (refused && refused.until > this.#now()) throw refused.err;
    if (refused) this.#refused.delete(id);
    let entry = this.#entries.get(id);
    if (!entry) {
      entry = {
        id,
        client: this.#createClient(apiKey),
        identitySecret: identitySecret(apiKey),
        verifiedUntil: 0,
        verifying: undefined,
        sessions: 0,
        lastUsed: 0,
      };
      this.#entries.set(id, entry);
    }
    entry.lastUsed = this.#now();
    entry.sessions++;
    try {
      if (entry.verifiedUntil <= this.#now()) {
        const current = entry;
        current.verifying ??= current.client.verify().finally(() => (current.verifying = undefined));
        await current.verifying;
        current.verifiedUntil = this.#now() + VERIFIED_FOR_MS;
      }
      return entry;
    } catch (err) {
      if (err instanceof EmlApiError && err.code === 'EAUTH') this.#remember(id, err);
      this.#release(entry, true);
      throw err;
    }
  }

  /** Refuses the key again without asking for {@link REFUSED_FOR_MS}. */
  #remember(id: string, err: EmlApiError): void {
    this.#refused.delete(id);
    this.#refused.set(id, { until: this.#now() + REFUSED_FOR_MS, err });
    for (const [key, { until }] of this.#refused) {
      if (this.#refused.size <= MAX_REFUSED_KEYS && until > this.#now()) break;
      this.#refused.delete(key);
    }
  }

  /** Ends a session's hold on a client (from {@link authenticate}). */
  release(held: KeyClient): void {
    const entry = this.#entries.get(held.id);
    if (entry && entry === held) this.#release(entry, false);
  }

  /** Closes every client, letting their sends finish. */
  async close(): Promise<void> {
    const clients = [...this.#entries.values()].map((e) => e.client.close());
    this.#entries.clear();
    this.#refused.clear();
    await Promise.allSettled([...clients, ...this.#closing]);
  }

  #release(entry: Entry, failed: boolean): void {
    entry.sessions = Math.max(0, entry.sessions - 1);
    // A key that was never accepted is not kept: a wrong password must not occupy the cache.
    if (failed && entry.sessions === 0 && entry.verifiedUntil === 0) this.#drop(entry);
    this.#evict();
  }

  /** Closes the least recently used idle clients while more than `max` are kept. */
  #evict(): void {
    while (this.#entries.size > this.#max) {
      let oldest: Entry | undefined;
      for (const entry of this.#entries.values()) {
        if (entry.sessions === 0 && (!oldest || entry.lastUsed < oldest.lastUsed)) oldest = entry;
      }
      if (!oldest) return;
      this.#drop(oldest);
    }
  }

  #drop(entry: Entry): void {
    if (this.#entries.get(entry.id) !== entry) return;
    this.#entries.delete(entry.id);
    const closing = entry.client.close().catch(() => undefined);
    this.#closing.add(closing);
    void closing.finally(() => this.#closing.delete(closing));
  }
}

/** A short SHA-256 fingerprint of a key: names its client without holding or showing the key. */
function fingerprint(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex').slice(0, 24);
}
