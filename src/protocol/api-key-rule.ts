/**
 * The API-key rule of the wire contract: a key travels in the `X-API-KEY`
 * header, so it is visible ASCII only. CR, LF, spaces or non-ASCII are a
 * configuration mistake (often a pasted line break), never a valid key.
 *
 * @returns the index of the first character a key may not hold, or -1 when the key is valid (and not empty)
 * @example
 * invalidApiKeyAt('sk_live_1\n'); // 9
 */
export function invalidApiKeyAt(key: string): number {
  if (key.length === 0) return 0;
  return key.search(/[^\x21-\x7e]/);
}
