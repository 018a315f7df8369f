import { createHash, createHmac, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { configError } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { identitySecret } from './message-identities.js';
import { SenderList, splitSenders } from './sender-lists.js';

/**
 * An SMTP user of the relay: a client that AUTHs with this user name and
 * password sends with the relay's own API key, as Postfix with Dovecot SASL
 * gives each sender a login. Store a hash made by {@link hashRelayPassword}
 * (or `eml-api relay --hash-password`) so that the configuration holds no password.
 *
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
   * The addresses and domains the user may send as: `MAIL FROM`, and every
   * address of the header From and Sender, must be among them, else `553
   * 5.7.1` and nothing is sent. `billing@shop.example` (that address),
   * `*@shop.example` (any address of the domain), `*@*.shop.example` (of its
   * subdomains), `<>` (an empty `MAIL FROM`, as bounces have).
   * @default undefined (any sender: the relay warns at start)
   * @example
   * senders: ['billing@shop.example', '*@billing.shop.example']
   */
  senders?: string[];
}

/**
 * The longest password the relay considers (UTF-16 units): a longer one is refused (`535`) without asking
 * the service, and is never copied into a pattern, reply or log.
 */
export const MAX_PASSWORD_LENGTH = 1024;

/** scrypt cost of new hashes: N = 2^14, r = 8, p = 1 (16 MiB, some tens of ms), Node's and RFC 7914's interactive choice. */
const NEW_HASH = { ln: 14, r: 8, p: 1, saltBytes: 16, hashBytes: 32 };

/** A hash is refused past these costs: checking one must not take the relay's memory (128·N·r bytes) or its threads. */
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
 * Makes the hash of a relay user's password, for `users[].passwordHash` or a
 * line of `eml-api relay --users` (`name:<hash>`): scrypt with a random salt,
 * written as a PHC string.
 *
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

/**
 * The relay's own SMTP users (the `users` option). Passwords and hashes stay
 * in private fields: `util.inspect` of the relay shows none.
 */
export class RelayUsers {
  readonly #users = new Map<string, Secret>();
  readonly #senders = new Map<string, SenderList>();
  /** Checked for unknown names, so that they take as long as a known one. */
  readonly #decoy: ScryptHash = { ...NEW_HASH, salt: randomBytes(16), hash: randomBytes(32) };

  /**
   * @param option names the option in errors (`users`, or the file given to `--users`)
   * @throws {EmlApiError} `ECONFIG` naming the entry that is not a user (its password is never quoted)
   */
  constructor(users: readonly EmlApiRelayUser[], option = 'users') {
    if (!Array.isArray(users)) throw configError(option, 'expected an array of { username, password or passwordHash }');
    users.forEach((user, i) => {
      const name = `${option}[${i}]`;
      if (typeof user !== 'object' || user === null)
        throw configError(name, 'expected { username, password or passwordHash }');
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

  /** Users listed. */
  get size(): number {
    return this.#users.size;
  }

  /** Whether a user of this name is listed. */
  has(username: string): boolean {
    return this.#users.has(username);
  }

  /** The addresses a listed user may send as, or undefined when it has no list (it may send as anyone). */
  sendersOf(username: string): SenderList | undefined {
    return this.#senders.get(username);
  }

  /** The users without a sender list. */
  withoutSenders(): string[] {
    return [...this.#users.keys()].filter((username) => !this.#senders.has(username));
  }

  /**
   * Whether the password is the listed user's. An unknown name costs as
   * much as a known one (a decoy hash is checked), and the comparison takes
   * constant time, so neither names nor passwords can be found by timing.
   */
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
 * Reads a users file: one `name:hash` per line (the hash as made by
 * `eml-api relay --hash-password`), optionally followed by `:` and the
 * addresses the user may send as, comma-separated
 * (`billing:$scrypt$...:billing@shop.example, *@billing.shop.example`);
 * blank lines and `#` comments are ignored.
 *
 * @param source names the file in errors
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

/**
 * A check of a password against one secret (the relay's own API key), in
 * constant time, keeping only a digest of the secret.
 */
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

/** A fixed-length digest, so that passwords of any length compare in constant time. */
function digest(password: string): Buffer {
  return createHash('sha256').update(password).digest();
}

/** Keys (client addresses, or address and user name) whose failures are remembered at most; the least recently failing is forgotten past it. */
export const MAX_TRACKED_ADDRESSES = 10_000;

/** An AUTH under way, counted against its key's budget until it ends (see {@link AuthFailureBudget.begin}). */
export interface AuthAttempt {
  /**
   * Ends the attempt: a failure (wrong credentials, named by their
   * {@link failureFingerprint}) stays counted; `undefined` (accepted, or a
   * service that could not tell) gives the slot back. Only the first call counts.
   */
  end(failure: string | undefined): void;
}

/** How {@link AuthFailureBudget} counts. */
export interface AuthFailureBudgetOptions {
  /** Failed AUTHs a key may make within `window`. */
  limit: number;
  /** The window, in milliseconds (`authFailureWindow`). */
  window: number;
  /** Keys remembered at most. @default MAX_TRACKED_ADDRESSES */
  maxAddresses?: number;
  /** The clock. @default Date.now */
  now?: () => number;
}

/** One failure counted: when, and which credentials (the same ones again count once). */
interface Failure {
  at: number;
  fingerprint: string;
}

/**
 * The failed AUTHs of each key (a client address, IPv6 per /64; or an
 * address and a user name), across connections, in a sliding window: once a
 * key has `limit` failures within `window`, {@link retryAfter} says how long
 * until the oldest leaves it.
 *
 * The same wrong credentials again count once, as in Dovecot's auth penalty:
 * smtplib (and Django) tries PLAIN then LOGIN with one password, and a sender
 * with a stale password retries its queue with it; neither is a guesser.
 *
 * An AUTH takes its slot when it starts ({@link begin}): the service takes a
 * while to answer, and AUTHs sent at once on many connections would otherwise
 * all pass the check before any failed.
 *
 * Memory is bounded: `limit` failures per key, {@link MAX_TRACKED_ADDRESSES}
 * keys; AUTHs under way are bounded by the connections.
 */
export class AuthFailureBudget {
  readonly #limit: number;
  readonly #window: number;
  readonly #maxAddresses: number;
  readonly #now: () => number;
  /** Failures per key, oldest first; the Map in order of the latest failure. */
  readonly #failures = new Map<string, Failure[]>();
  /** AUTHs under way per key. */
  readonly #pending = new Map<string, number>();

  constructor(options: AuthFailureBudgetOptions) {
    this.#limit = options.limit;
    this.#window = options.window;
    this.#maxAddresses = options.maxAddresses ?? MAX_TRACKED_ADDRESSES;
    this.#now = options.now ?? Date.now;
  }

  /** Keys remembered now. */
  get size(): number {
    return this.#failures.size;
  }

  /**
   * Milliseconds until the key may AUTH again, or 0 when it may now (AUTHs
   * under way count as failures until they end).
   */
  retryAfter(key: string): number {
    const failures = this.#recent(key);
    const pending = this.#pending.get(key) ?? 0;
    if (failures.length + pending < this.#limit) return 0;
    // Spent by AUTHs under way, which end within seconds.
    if (failures.length < this.#limit) return 1_000;
    return Math.max(1, failures[failures.length - this.#limit]!.at + this.#window - this.#now());
  }

  /**
   * Starts an AUTH of the key: takes a slot of its budget until the attempt ends.
   * @returns the attempt, or the milliseconds to wait ({@link retryAfter}) when the budget is spent
   */
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

  /** Counts one failed AUTH of the key, unless these credentials failed already within the window. */
  record(key: string, fingerprint: string): void {
    const failures = this.#recent(key);
    const again = failures.findIndex((f) => f.fingerprint === fingerprint);
    // Counted once, as the latest: a stale password retried keeps its one place.
    if (again !== -1) failures.splice(again, 1);
    failures.push({ at: this.#now(), fingerprint });
    if (failures.length > this.#limit) failures.splice(0, failures.length - this.#limit);
    this.#failures.delete(key);
    this.#failures.set(key, failures);
    while (this.#failures.size > this.#maxAddresses) {
      this.#failures.delete(this.#failures.keys().next().value!);
    }
  }

  /** The failures of a key still within the window (the key is forgotten when none is). */
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

/** Keys the failure fingerprints, so that a memory dump holds no plain digest of a password to look up. */
let fingerprintKey: Buffer = randomBytes(32);

/** Keys the fingerprints with the key of a group's primary: the processes of `--processes` name the same credentials alike. */
export function useFingerprintKey(key: Buffer): void {
  fingerprintKey = key;
}

/** Names one set of failed credentials (a user name and its password) for {@link AuthFailureBudget.record}, without keeping them. */
export function failureFingerprint(username: string, password: string): string {
  return createHmac('sha256', fingerprintKey).update(`${username}\0${password}`).digest('base64').slice(0, 22);
}

/** How long a key the service accepted is trusted for new AUTHs without asking again. */
export const VERIFIED_FOR_MS = 5 * 60_000;

/**
 * How long a key the service refused is refused again without asking: a
 * repeated or revoked key costs the service one request a minute, and a key
 * given its scope in the dashboard works again within that time.
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
 * The clients of the API keys SMTP clients authenticate with, one per key,
 * made at its first AUTH and checked as `client.verify()` does. Accepted keys
 * are trusted for {@link VERIFIED_FOR_MS}, refused ones refused for
 * {@link REFUSED_FOR_MS}. Past `max` clients the least recently used idle one
 * is closed. Keys live only inside their clients; entries are found by fingerprint.
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

/** A short SHA-256 fingerprint of a key: names its client, and the login of whoever AUTHs with it, without holding or showing the key. */
export function keyFingerprint(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex').slice(0, 24);
}
