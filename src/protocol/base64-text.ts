/**
 * The Base64 rule of the wire contract: standard Base64 (RFC 4648 section 4),
 * padded. Line breaks and spaces are allowed, as in MIME-wrapped Base64;
 * anything else is refused, because Node's decoder would silently skip it.
 */

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Base64 text without its line breaks and spaces. */
export function compactBase64(text: string): string {
  return text.replace(/[\r\n\t ]+/g, '');
}

/**
 * Why compact Base64 text is not valid, or undefined when it is.
 *
 * @example
 * base64Problem('aGk=');  // undefined
 * base64Problem('aGk');   // 'its length (3) is not a multiple of 4; is padding missing?'
 */
export function base64Problem(compact: string): string | undefined {
  if (compact.length === 0) return 'it is empty';
  if (!BASE64.test(compact)) {
    const bad = compact.search(/[^A-Za-z0-9+/=]/);
    return bad === -1
      ? 'padding "=" may only end the text'
      : `character ${JSON.stringify(compact[bad])} at position ${bad} is not in the Base64 alphabet (URL-safe Base64 is not accepted)`;
  }
  if (compact.length % 4 !== 0) return `its length (${compact.length}) is not a multiple of 4; is padding missing?`;
  return undefined;
}
