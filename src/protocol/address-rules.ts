/**
 * The address rule of the wire contract, shared by the client (checked before
 * any request) and the emulator (checked on every request).
 */

/**
 * A deliberately plain address check: one @, no spaces or delimiters;
 * non-ASCII (RFC 6531) is allowed.
 */
export function isValidAddress(address: string): boolean {
  return (
    address.length <= 254 && /^[^\s@<>()[\]",;:\\]+@[^\s@<>()[\]",;:\\]+$/u.test(address) && !hasLoneSurrogate(address)
  );
}

/**
 * Whether a string holds a lone UTF-16 surrogate: text that is no valid
 * Unicode and that `encodeURIComponent` refuses with a URIError.
 */
export function hasLoneSurrogate(text: string): boolean {
  // With the u flag, this class matches only surrogates that are not part of a pair.
  return /[\uD800-\uDFFF]/u.test(text);
}
