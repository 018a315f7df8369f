import { createHash, createHmac, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { configError, refuseUnknownKeys } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { identitySecret } from './message-identities.js';
import { SenderList, splitSenders } from './sender-lists.js';

/**
 * An SMTP user of the relay: a client that AUTHs as it sends with the relay's own API key. Store a hash made by
 * {@link hashRelayPassword} (or `eml-api relay --hash-password`) so that the configuration holds no password.
 * @example
 * const user: EmlApiRelayUser = { username: 'billing-app', passwordHash: await hashRelayPassword(process.env.BILLING_PASSWORD!) };
 */
export interface EmlApiRelayUser {
  /** The SMTP user name, compared exactly (case included). No white space, `:` or control characters. */
  username: string;
  /** The password as it is. Give this or `passwordHash`. */
  password?: string;
  /** The password's scrypt hash, `$scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt>$<hash>` (Base64, PHC string form). */
  passwordHash?: string;
  /**
   * The addresses and domains the user may send as (`MAIL FROM` and every header From and Sender address),
   * else `553 5.7.1`: `billing@shop.example`, `*@shop.example`, `*@*.shop.example` (subdomains), `<>` (bounces).
   * @default undefined (any sender: the relay warns at start)
   * @example
   * senders: ['billing@shop.example', '*@billing.shop.example']
   */
  senders?: string[];
}

/** An unknown key (a misspelt `senders`) would drop a restriction in silence. */
const USER_KEYS = Object.keys({
  username: true,
  password: true,
  passwordHash: true,
  senders: true,
} satisfies Record<keyof EmlApiRelayUser, true>);

/** The longest password the relay considers (UTF-16 units); a longer one is refused (`535`) and never copied anywhere. */
export const MAX_PASSWORD_LENGTH = 1024;

/** scrypt's interactive choice (N = 2^14, r = 8, p = 1: 16 MiB). */
const NEW_HASH = { ln: 14, r: 8, p: 1, saltBytes: 16, hashBytes: 32 };

/** Checking a hash must not take the relay's memory (128·N·r bytes) or its threads. */
const MAX_COST = { memory: 256 * 1024 * 1024, p: 16 };

const HASH_FORM = /^\$scrypt\$ln=(\d{1,2}),r=(\d{1,2}),p=(\d{1,2})\$([A-Za-z0-9+/]{16,88})\$([A-Za-z0-9+/]{22,88})$/;

interface ScryptHash {
  ln: number;
  r: number;
  p: number;
  salt: Buffer;
  hash: Buffer;
}

type Secret = { kind: 'plain'; digest: Buffer } | { kind: 'scrypt'; hash: ScryptHash };

/**
 * Makes the hash of a relay user's password (scrypt, random salt, PHC string), for `users[].passwordHash`.
 * @example
 * await hashRelayPassword('correct horse battery staple') // '$scrypt$ln=14,r=8,p=1$<salt>$<hash>'
 */
export async function hashRelayPassword(password: string): Promise<string> {
  if (typeof password !== 'string' || password.length === 0 || password.length > MAX_PASSWORD_LENGTH) {
    throw new EmlApiError('ECONFIG', `A relay password must be a string of 1 to ${MAX_PASSWORD_LENGTH} characters`, {
      permanent: true,
    });
  }
  const salt = randomBytes(NEW_HASH.saltBytes);
  const hash = await derive(password, { ...NEW_HASH, salt, hash: Buffer.alloc(NEW_HASH.hashBytes) });
  const b64 = (b: Buffer) => b.toString('base64').replace(/=+$/, '');
  return `$scrypt$ln=${NEW_HASH.ln},r=${NEW_HASH.r},p=${NEW_HASH.p}$${b64(salt)}$${b64(hash)}`;
}

/** The relay's own SMTP users. Secrets stay in private fields, out of `util.inspect`. */
export class RelayUsers {
  readonly #users = new Map<string, Secret>();
  readonly #senders = new Map<string, SenderList>();
  /** Checked for unknown names, so that they take as long as a known one. */
  readonly #decoy: ScryptHash = { ...NEW_HASH, salt: randomBytes(16), hash: randomBytes(32) };

  /** @throws {EmlApiError} `ECONFIG` naming the entry that is not a user (its password is never quoted) */
  constructor(users: readonly EmlApiRelayUser[], option = 'users') {
    if (!Array.isArray(users)) throw configError(option, 'expected an array of { username, password or passwordHash }');
    users.forEach((user, i) => {
      const name = `${option}[${i}]`;
      if (typeof user !== 'object' || user === null)
        throw configError(name, 'expected { username, password or passwordHash }');
      refuseUnknownKeys(user, USER_KEYS, `${name}.`);
      const { username, password, passwordHash, senders } = user;
      if (!isUsername(username)) throw configError(`${name}.username`, USERNAME_RULE);
      if (this.#users.has(username))
        throw configError(`${name}.username`, `${JSON.stringify(username)} is listed twice`);
      if (senders !== undefined) this.#senders.set(username, new SenderList(senders, `${name}.senders`));
      if ((password === undefined) === (passwordHash === undefined)) {
        throw configError(name, 'give either password or passwordHash');
      }
      if (password !== undefined) {
        if (typeof password !== 'string' || password.length === 0 || password.length > MAX_PASSWORD_LENGTH) {
          throw configError(`${name}.password`, `expected a string of 1 to ${MAX_PASSWORD_LENGTH} characters`);
        }
        this.#users.set(username, { kind: 'plain', digest: digest(password) });
        return;
      }
      const hash = typeof passwordHash === 'string' ? parseHash(passwordHash) : undefined;
      if (!hash) {
        throw configError(
          `${name}.passwordHash`,
          'expected an scrypt hash ($scrypt$ln=..,r=..,p=..$salt$hash), as made by `eml-api relay --hash-password`',
        );
      }
      this.#users.set(username, { kind: 'scrypt', hash });
    });
  }

  get size(): number {
    return this.#users.size;
  }

  has(username: string): boolean {
    return this.#users.has(username);
  }

  /** undefined when the user may send as anyone. */
  sendersOf(username: string): SenderList | undefined {
    return this.#senders.get(username);
  }

  withoutSenders(): string[] {
    return [...this.#users.keys()].filter((username) => !this.#senders.has(username));
  }

  /** An unknown name checks a decoy hash, and the comparison is constant-time: nothing is learnt by timing. */
  async verify(username: string, password: string): Promise<boolean> {
    const secret = this.#users.get(username);
    if (!secret || secret.kind === 'scrypt') {
      const hash = secret?.kind === 'scrypt' ? secret.hash : this.#decoy;
      const derived = await derive(password, hash);
      return timingSafeEqual(derived, hash.hash) && secret !== undefined;
    }
    return timingSafeEqual(digest(password), secret.digest);
  }
}

/**
 * Reads a users file: `name:hash[:senders]` per line; blank lines and `#` comments ignored.
 * @throws {EmlApiError} `ECONFIG` naming the file and line (never quoting a hash)
 */
export function parseUsersFile(text: string, source: string): EmlApiRelayUser[] {
  const users: EmlApiRelayUser[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `${source} line ${i + 1}`;
    const [username = '', passwordHash = ''] = line.split(':', 2);
    const rest = line.indexOf(':', username.length + 1 + passwordHash.length);
    const senders = rest === -1 ? undefined : line.slice(rest + 1);
    if (!username || !passwordHash) throw configError(where, 'expected name:hash, or name:hash:senders');
    if (!isUsername(username)) throw configError(where, `the user name: ${USERNAME_RULE}`);
    if (!parseHash(passwordHash)) {
      throw configError(
        where,
        'the hash is not an scrypt hash; make one with `eml-api relay --hash-password` (the password on standard input)',
      );
    }
    const list = senders === undefined ? undefined : splitSenders(senders);
    if (list?.length === 0) throw configError(where, 'no senders after the second : (leave it out for none)');
    if (list !== undefined) new SenderList(list, `${where}, the senders`);
    users.push({ username, passwordHash, ...(list === undefined ? {} : { senders: list }) });
  });
  return users;
}

const USERNAME_RULE = 'expected 1 to 256 characters without white space, ":" or control characters';

function isUsername(value: unknown): value is string {
  return typeof value === 'string' && /^[^\s:\p{Cc}]{1,256}$/u.test(value);
}

/** Checks a password against the relay's own API key in constant time, keeping only a digest of the key. */
export function secretMatcher(secret: string): (candidate: string) => boolean {
  const expected = digest(secret);
  return (candidate) => timingSafeEqual(digest(candidate), expected);
}

function parseHash(text: string): ScryptHash | undefined {
  const m = HASH_FORM.exec(text);
  if (!m) return undefined;
  const [ln, r, p] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (ln < 1 || r < 1 || 128 * 2 ** ln * r > MAX_COST.memory || p < 1 || p > MAX_COST.p) return undefined;
  const salt = Buffer.from(m[4]!, 'base64');
  const hash = Buffer.from(m[5]!, 'base64');
  if (salt.length < 8 || hash.length < 16) return undefined;
  return { ln, r, p, salt, hash };
}

function derive(password: string, hash: ScryptHash): Promise<Buffer> {
  const N = 2 ** hash.ln;
  const options: ScryptOptions = { N, r: hash.r, p: hash.p, maxmem: 256 * N * hash.r + 1024 * 1024 };
  return new Promise((resolve, reject) =>
    scrypt(password, hash.salt, hash.hash.length, options, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

function digest(password: string): Buffer {
  return createHash('sha256').update(password).digest();
}

const MAX_TRACKED_ADDRESSES = 10_000;

/** An AUTH under way, counted against its key's budget until it ends. */
export interface AuthAttempt {
  /** A failure stays counted; `undefined` (accepted, or the service could not tell) gives the slot back. Only the first call counts. */
  end(failure: string | undefined): void;
}

export interface AuthFailureBudgetOptions {
  limit: number;
  /** Milliseconds (`authFailureWindow`). */
  window: number;
  /** Keys remembered at most; the least recently failing is forgotten past it. @default 10000 */
  maxAddresses?: number;
  /** @default Date.now */
  now?: () => number;
}

interface Failure {
  at: number;
  fingerprint: string;
}

/**
 * The failed AUTHs of each key (a client address, IPv6 per /64, or an address and a user name) in a sliding window.
 * The same wrong credentials count once, as in Dovecot: smtplib tries PLAIN then LOGIN with one password, and a stale
 * password is retried, neither by a guesser. An AUTH takes its slot when it starts, or AUTHs sent at once on many
 * connections would all pass before any failed.
 */
export class AuthFailureBudget {
  readonly #limit: number;
  readonly #window: number;
  readonly #maxAddresses: number;
  readonly #now: () => number;
  /** Oldest first; the Map in order of the latest failure. */
  readonly #failures = new Map<string, Failure[]>();
  readonly #pending = new Map<string, number>();

  constructor(options: AuthFailureBudgetOptions) {
    this.#limit = options.limit;
    this.#window = options.window;
    this.#maxAddresses = options.maxAddresses ?? MAX_TRACKED_ADDRESSES;
    this.#now = options.now ?? Date.now;
  }

  get size(): number {
    return this.#failures.size;
  }

  /** Milliseconds until the key may AUTH again, or 0; AUTHs under way count as failures. */
  retryAfter(key: string): number {
    const failures = this.#recent(key);
    const pending = this.#pending.get(key) ?? 0;
    if (failures.length + pending < this.#limit) return 0;
    // Spent by AUTHs under way, which end within seconds.
    if (failures.length < this.#limit) return 1_000;
    return Math.max(1, failures[failures.length - this.#limit]!.at + this.#window - this.#now());
  }

  /** @returns the attempt, or the milliseconds to wait ({@link retryAfter}) when the budget is spent */
  begin(key: string): AuthAttempt | number {
    const wait = this.retryAfter(key);
    if (wait > 0) return wait;
    this.#pending.set(key, (this.#pending.get(key) ?? 0) + 1);
    let ended = false;
    return {
      end: (failure) => {
        if (ended) return;
        ended = true;
        const left = (this.#pending.get(key) ?? 1) - 1;
        if (left > 0) this.#pending.set(key, left);
        else this.#pending.delete(key);
        if (failure !== undefined) this.record(key, failure);
      },
    };
  }

  record(key: string, fingerprint: string): void {
    const failures = this.#recent(key);
    const again = failures.findIndex((f) => f.fingerprint === fingerprint);
    // Moved to the latest: a stale password retried keeps its one place.
    if (again !== -1) failures.splice(again, 1);
    failures.push({ at: this.#now(), fingerprint });
    if (failures.length > this.#limit) failures.splice(0, failures.length - this.#limit);
    this.#failures.delete(key);
    this.#failures.set(key, failures);
    while (this.#failures.size > this.#maxAddresses) {
      this.#failures.delete(this.#failures.keys().next().value!);
    }
  }

  #recent(key: string): Failure[] {
    const failures = this.#failures.get(key);
    if (!failures) return [];
    const since = this.#now() - this.#window;
    let expired = 0;
    while (expired < failures.length && failures[expired]!.at <= since) expired++;
    if (expired === failures.length) {
      this.#failures.delete(key);
      return [];
    }
    if (expired > 0) failures.splice(0, expired);
    return failures;
  }
}

/** Keys the failure fingerprints, so that a memory dump holds no plain password digest to look up. */
let fingerprintKey: Buffer = randomBytes(32);

/** Shares the primary's key, so the processes of `--processes` fingerprint the same credentials alike. */
export function useFingerprintKey(key: Buffer): void {
  fingerprintKey = key;
}

export function failureFingerprint(username: string, password: string): string {
  return createHmac('sha256', fingerprintKey).update(`${username}\0${password}`).digest('base64').slice(0, 22);
}

/** How long an accepted key is trusted for new AUTHs without asking again. */
const VERIFIED_FOR_MS = 5 * 60_000;

/** A refused key costs the service one request a minute, and a key fixed in the dashboard works again within that time. */
const REFUSED_FOR_MS = 60_000;

const MAX_REFUSED_KEYS = 1_000;

/** The client of one API key given as an SMTP password. */
export interface KeyClient {
  /** A SHA-256 prefix, for logs and the session; never the key. */
  readonly id: string;
  readonly client: EmlApiClient;
  /** Keys the identities of the messages sent with it. */
  readonly identitySecret: Buffer;
}

interface Entry extends KeyClient {
  verifiedUntil: number;
  verifying: Promise<unknown> | undefined;
  sessions: number;
  lastUsed: number;
}

/**
 * One client per API key that SMTP clients AUTH with, checked as `client.verify()` does; past `max` the least
 * recently used idle one is closed. Keys live only inside their clients.
 */
export class KeyClients {
  readonly #createClient: (apiKey: string) => EmlApiClient;
  readonly #max: number;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();
  readonly #closing = new Set<Promise<void>>();
  readonly #refused = new Map<string, { until: number; err: unknown }>();

  constructor(createClient: (apiKey: string) => EmlApiClient, max: number, now: () => number = Date.now) {
    this.#createClient = createClient;
    this.#max = max;
    this.#now = now;
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * Checks a key with the service and returns its client, held until {@link release}.
   * @throws {EmlApiError} `ECONFIG` when the text cannot be a key; what `verify()` throws (`EAUTH` when refused)
   */
  async authenticate(apiKey: string): Promise<KeyClient> {
    const id = keyFingerprint(apiKey);
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

  #remember(id: string, err: EmlApiError): void {
    this.#refused.delete(id);
    this.#refused.set(id, { until: this.#now() + REFUSED_FOR_MS, err });
    for (const [key, { until }] of this.#refused) {
      if (this.#refused.size <= MAX_REFUSED_KEYS && until > this.#now()) break;
      this.#refused.delete(key);
    }
  }

  release(held: KeyClient): void {
    const entry = this.#entries.get(held.id);
    if (entry && entry === held) this.#release(entry, false);
  }

  async close(): Promise<void> {
    const clients = [...this.#entries.values()].map((e) => e.client.close());
    this.#entries.clear();
    this.#refused.clear();
    await Promise.allSettled([...clients, ...this.#closing]);
  }

  #release(entry: Entry, failed: boolean): void {
    entry.sessions = Math.max(0, entry.sessions - 1);
    // A wrong password must not occupy the cache.
    if (failed && entry.sessions === 0 && entry.verifiedUntil === 0) this.#drop(entry);
    this.#evict();
  }

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

/** Names a key's client and login without holding or showing the key. */
export function keyFingerprint(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex').slice(0, 24);
}
