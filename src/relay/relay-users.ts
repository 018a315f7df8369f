import { createHash, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { configError } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * An SMTP user of the relay: a client that AUTHs with this user name and
 * password sends with the relay's own API key (Postfix with Dovecot SASL, or
 * `smtp_sasl_password_maps`, gives each sender such a login). The password
 * is given as it is, or as a hash made by {@link hashRelayPassword} (or
 * `eml-api relay --hash-password`), so that the configuration holds no password.
 *
 * @example
 * { username: 'billing-app', passwordHash: '$scrypt$ln=14,r=8,p=1$...$...' }
 */
export interface EmlApiRelayUser {
  /** The SMTP user name, compared exactly (case included). No white space, `:` or control characters. */
  username: string;
  /** The password as it is. Give this or `passwordHash`. */
  password?: string;
  /** The password's scrypt hash, `$scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt>$<hash>` (Base64, PHC string form). */
  passwordHash?: string;
}

/**
 * The longest password the relay considers (UTF-16 units), a user's or an API key given as one. API keys
 * are far shorter; a longer password is refused (`535`) without asking the service, and is never copied
 * into a pattern, reply or log.
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
      const { username, password, passwordHash } = user;
      if (!isUsername(username)) throw configError(`${name}.username`, USERNAME_RULE);
      if (this.#users.has(username))
        throw configError(`${name}.username`, `${JSON.stringify(username)} is listed twice`);
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
 * `eml-api relay --hash-password`), blank lines and `#` comments ignored, as
 * in a Dovecot passwd-file (whose further `:` fields are ignored).
 *
 * @param source names the file in errors
 * @throws {EmlApiError} `ECONFIG` naming the file and line (never quoting a hash)
 */
export function parseUsersFile(text: string, source: string): EmlApiRelayUser[] {
  const users: EmlApiRelayUser[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [username = '', passwordHash = ''] = line.split(':');
    if (!username || !passwordHash) throw configError(`${source} line ${i + 1}`, 'expected name:hash');
    if (!isUsername(username)) throw configError(`${source} line ${i + 1}`, `the user name: ${USERNAME_RULE}`);
    if (!parseHash(passwordHash)) {
      throw configError(
        `${source} line ${i + 1}`,
        'the hash is not an scrypt hash; make one with `eml-api relay --hash-password` (the password on standard input)',
      );
    }
    users.push({ username, passwordHash });
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
 * @example const isOwnKey = secretMatcher(apiKey); isOwnKey(password) // true or false
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
