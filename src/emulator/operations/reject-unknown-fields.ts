import { HttpError } from './http-error.js';

/**
 * Rejects fields a request type does not have, so that a typo is reported
 * instead of silently ignored.
 */
export function rejectUnknownFields(
  body: Record<string, unknown>,
  allowed: readonly string[],
  where = 'request body',
): void {
  for (const key of Object.keys(body)) {
    if (!allowed.includes(key)) {
      throw new HttpError(
        400,
        'invalid_request',
        `Unknown field "${key.slice(0, 64)}" in the ${where}; allowed: ${allowed.join(', ')}`,
      );
    }
  }
}
