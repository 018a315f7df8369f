import type { ApiScope } from '../../protocol/api-types.js';
import { HttpError } from '../operations/http-error.js';
import type { ApiKeyStore, KnownKey } from '../state/api-key-store.js';

/**
 * Finds the key of a request's `X-API-KEY` header.
 * @throws {HttpError} 401 `missing_api_key` or `invalid_api_key`
 */
export function authenticate(keys: ApiKeyStore, presented: string | string[] | undefined): KnownKey {
  if (presented === undefined || presented === '') {
    throw new HttpError(401, 'missing_api_key', 'The X-API-KEY header is missing');
  }
  if (Array.isArray(presented)) {
    throw new HttpError(401, 'invalid_api_key', 'The X-API-KEY header must appear once');
  }
  const key = keys.find(presented);
  if (!key) throw new HttpError(401, 'invalid_api_key', 'The API key is not valid');
  return key;
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
