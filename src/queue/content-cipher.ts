import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { configError } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * The `encryption` option (AES-256-GCM at rest: otherwise whoever reads Redis reads every queued message). Keys have
 * ids, written on each job, so they can rotate while older jobs are queued.
 * @example
 * const encryption: OutboxEncryption = {
 *   keyId: '2026-05',
 *   keys: { '2026-05': process.env.OUTBOX_KEY_2026_05!, '2026-01': process.env.OUTBOX_KEY_2026_01! },
 * };
 */
export interface OutboxEncryption {
  /** Required on producers; workers use the key each job names. */
  keyId?: string;
  /**
   * The keys by id (`A-Z a-z 0-9 . _ -`, 1 to 64): 32 random bytes each, as a Buffer, 64 hex or 44 Base64 characters
   * (`openssl rand -base64 32`). Keep older keys while their jobs may be queued.
   */
  keys: Readonly<Record<string, Uint8Array | string>>;
}

/** A 12-byte nonce before each record, a 16-byte GCM tag after it. */
export const RECORD_OVERHEAD = 28;
const NONCE = 12;
const TAG = 16;
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** Validated keys, in a private field: never in `util.inspect`, JSON or errors. */
export class OutboxKeyring {
  readonly #keys: ReadonlyMap<string, Buffer>;
  /** Undefined for a worker given none. */
  readonly keyId: string | undefined;

  constructor(keys: ReadonlyMap<string, Buffer>, keyId: string | undefined) {
    this.#keys = keys;
    this.keyId = keyId;
  }

  get keyIds(): string[] {
    return [...this.#keys.keys()];
  }

  /** Encrypts with the current key: nonce, ciphertext, tag. */
  seal(plain: Buffer, aad: Buffer): Buffer {
    const nonce = randomBytes(NONCE);
    const cipher = createCipheriv('aes-256-gcm', this.#key(this.keyId!), nonce);
    cipher.setAAD(aad);
    const head = cipher.update(plain);
    const tail = cipher.final();
    return Buffer.concat([nonce, head, tail, cipher.getAuthTag()], NONCE + plain.length + TAG);
  }

  /**
   * Decrypts a record sealed with key `keyId`, its tag checked first.
   * @throws {EmlApiError} `ECONFIG` (retried: another worker may hold the key) when the key is not held; `EMESSAGE`
   *   (permanent) when the record does not decrypt
   */
  open(keyId: string, record: Buffer, aad: Buffer, what: string): Buffer {
    const plain = this.tryOpen(keyId, record, aad);
    if (plain === undefined) throw undecryptable(what, keyId);
    return plain;
  }

  /** `undefined` when the tag does not match: changed, or sealed with another key. */
  tryOpen(keyId: string, record: Buffer, aad: Buffer): Buffer | undefined {
    const key = this.#key(keyId);
    if (record.length < RECORD_OVERHEAD) return undefined;
    const decipher = createDecipheriv('aes-256-gcm', key, record.subarray(0, NONCE));
    decipher.setAAD(aad);
    decipher.setAuthTag(record.subarray(record.length - TAG));
    try {
      const head = decipher.update(record.subarray(NONCE, record.length - TAG));
      return Buffer.concat([head, decipher.final()]);
    } catch {
      return undefined;
    }
  }

  /** An HMAC under the key of a text naming the id: holders compare it to learn whether they hold the same bytes. */
  checkValue(keyId: string): string {
    return createHmac('sha256', this.#key(keyId))
      .update(`nodemailer-eml-api outbox key check\0${keyId}`)
      .digest('hex')
      .slice(0, 32);
  }

  #key(keyId: string): Buffer {
    const key = this.#keys.get(keyId);
    if (!key) {
      throw new EmlApiError(
        'ECONFIG',
        `This queued message is encrypted with the key "${keyId}", which this worker does not hold ` +
          `(encryption.keys: ${this.keyIds.map((id) => `"${id}"`).join(', ') || 'none'}); it is retried, ` +
          'for a worker that holds it',
        { permanent: false },
      );
    }
    return key;
  }

  toJSON(): object {
    return { keyId: this.keyId, keyIds: this.keyIds };
  }

  [inspect.custom](): string {
    return `OutboxKeyring ${inspect(this.toJSON())}`;
  }
}

/** Gives a worker without keys the same retried error as one missing a key. */
export const NO_KEYS = new OutboxKeyring(new Map(), undefined);

/** Checks the `encryption` option (a producer needs `keyId`). Errors name the option and the key id, never a key. */
export function resolveEncryption(value: unknown, role: 'producer' | 'worker'): OutboxKeyring | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw configError('encryption', 'expected { keyId, keys: { [id]: 32-byte key } }');
  }
  const { keyId, keys } = value as { keyId?: unknown; keys?: unknown };
  if (typeof keys !== 'object' || keys === null || Array.isArray(keys) || Object.keys(keys).length === 0) {
    throw configError('encryption.keys', 'expected at least one key: { [id]: 32-byte key }');
  }
  const resolved = new Map<string, Buffer>();
  for (const [id, key] of Object.entries(keys as Record<string, unknown>)) {
    if (!KEY_ID.test(id)) {
      throw configError('encryption.keys', 'key ids are 1 to 64 characters of A-Z a-z 0-9 . _ -');
    }
    const bytes = keyBytes(key);
    if (!bytes) {
      throw configError(
        `encryption.keys.${id}`,
        'expected 32 bytes: a Buffer, or a string of 64 hex or 44 Base64 characters (e.g. openssl rand -base64 32)',
      );
    }
    resolved.set(id, bytes);
  }
  if (keyId !== undefined && (typeof keyId !== 'string' || !resolved.has(keyId))) {
    throw configError('encryption.keyId', 'expected the id of one of encryption.keys');
  }
  if (role === 'producer' && keyId === undefined) {
    throw configError('encryption.keyId', 'required: the id of the key new mail is encrypted with');
  }
  return new OutboxKeyring(resolved, keyId);
}

function keyBytes(key: unknown): Buffer | undefined {
  if (key instanceof Uint8Array) return key.length === 32 ? Buffer.from(key) : undefined;
  if (typeof key !== 'string') return undefined;
  if (/^[0-9a-fA-F]{64}$/.test(key)) return Buffer.from(key, 'hex');
  if (/^[A-Za-z0-9+/]{43}=?$/.test(key)) return Buffer.from(key, 'base64');
  return undefined;
}

/** Bytes stored for `size` bytes of content encrypted in chunks of `chunk` bytes. */
export function encryptedSize(size: number, chunk: number): number {
  return size + Math.max(1, Math.ceil(size / chunk)) * RECORD_OVERHEAD;
}

/**
 * Binds a record to its content key (it cannot move to another message), its position and the message's size (records
 * cannot be reordered, dropped or cut), or `meta` for the envelope.
 */
export function recordAad(contentKey: string, index: number | 'meta', size: number): Buffer {
  return Buffer.from(`nodemailer-eml-api outbox\0${contentKey}\0${index}\0${size}`);
}

function undecryptable(what: string, keyId: string): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The queued ${what} does not decrypt with the key "${keyId}": it was changed in Redis, or that id ` +
      'names another key than the producer used; not sent',
    { permanent: true },
  );
}
