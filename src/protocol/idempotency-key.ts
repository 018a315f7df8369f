/** Longest `Idempotency-Key` value. */
export const MAX_IDEMPOTENCY_KEY = 255;

/**
 * Whether a value can be an `Idempotency-Key`: 1 to 255 printable ASCII
 * characters without spaces, so it can neither inject a header nor be refused.
 */
export function isValidIdempotencyKey(key: unknown): key is string {
  return typeof key === 'string' && key.length > 0 && key.length <= MAX_IDEMPOTENCY_KEY && /^[\x21-\x7e]+$/.test(key);
}
