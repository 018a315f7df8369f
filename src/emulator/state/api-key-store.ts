import { createHash, timingSafeEqual } from 'node:crypto';
import type { ApiPlan, ApiScope } from '../../protocol/api-types.js';

/** A key the emulator knows, identified by its digest only. */
export interface KnownKey {
  /** Short, non-secret label for logs and records (first 4 characters and a hash). */
  label: string;
  scopes: ReadonlySet<ApiScope>;
  plan: ApiPlan;
  /** The account the key belongs to: the scope of its idempotency keys. */
  account: string;
}

interface StoredKey extends KnownKey {
  digest: Buffer;
}

/**
 * The API keys the emulator accepts. Keys are compared by SHA-256 digest with
 * `timingSafeEqual`, against every stored key, so response time does not tell
 * how much of a guess was right.
 */
export class ApiKeyStore {
  readonly #keys: StoredKey[] = [];

  add(key: string, scopes: readonly ApiScope[], plan: ApiPlan, account: string): void {
    const digest = sha256(key);
    this.#keys.push({
      digest,
      scopes: new Set(scopes),
      plan,
      account,
      label: `${key.slice(0, 4)}…${digest.toString('hex').slice(0, 8)}`,
    });
  }

  /** The stored key equal to `presented`, compared in constant time against every key. */
  find(presented: string): KnownKey | undefined {
    const digest = sha256(presented);
    let found: StoredKey | undefined;
    for (const stored of this.#keys) {
      if (timingSafeEqual(stored.digest, digest) && !found) found = stored;
    }
    return found;
  }
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}
