import { createHash, timingSafeEqual } from 'node:crypto';
import type { ApiPlan, ApiScope } from '../../protocol/api-types.js';
import { HttpError } from '../http/http-error.js';

/** A key the emulator knows, identified by its digest only. */
export interface KnownKey {
  /** Short, non-secret label for logs and records (first 4 characters and a hash). */
  label: string;
  scopes: ReadonlySet<ApiScope>;
  plan: ApiPlan;
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

  add(key: string, scopes: readonly ApiScope[], plan: ApiPlan): void {
    const digest = sha256(key);
    this.#keys.push({
      digest,
      scopes: new Set(scopes),
      plan,
      label: `${key.slice(0, 4)}…${digest.toString('hex').slice(0, 8)}`,
    });
  }

  /**
   * Finds the key of a request.
   * @throws {HttpError} 401 `missing_api_key` or `invalid_api_key`
   */
  authenticate(presented: string | string[] | undefined): KnownKey {
    if (presented === undefined || presented === '') {
      throw new HttpError(401, 'missing_api_key', 'The X-API-KEY header is missing');
    }
    if (Array.isArray(presented)) {
      throw new HttpError(401, 'invalid_api_key', 'The X-API-KEY header must appear once');
    }
    const digest = sha256(presented);
    let found: StoredKey | undefined;
    for (const stored of this.#keys) {
      if (timingSafeEqual(stored.digest, digest) && !found) found = stored;
    }
    if (!found) throw new HttpError(401, 'invalid_api_key', 'The API key is not valid');
    return found;
  }
}

/**
 * Checks that a key holds one of the scopes.
 * @throws {HttpError} 403 `missing_scope` naming the scope(s)
 */
export function requireScope(key: KnownKey, anyOf: readonly ApiScope[]): void {
  if (anyOf.some((scope) => key.scopes.has(scope))) return;
  const names = anyOf.map((s) => `"${s}"`).join(' or ');
  throw new HttpError(403, 'missing_scope', `The API key lacks the ${names} scope needed for this operation`);
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}
