import { HttpError } from './http-error.js';

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Decodes standard Base64 (RFC 4648 section 4, padded). Line breaks and spaces
 * are allowed, as in MIME-wrapped Base64; anything else is refused, because
 * Node's decoder would silently skip it and deliver a corrupted message.
 *
 * @throws {HttpError} 400 `invalid_base64` naming the field
 */
export function decodeBase64Strict(value: string, field: string): Buffer {
  const compact = value.replace(/[\r\n\t ]+/g, '');
  if (compact.length === 0) {
    throw new HttpError(400, 'invalid_base64', `${field} is empty; expected the Base64-encoded message`);
  }
  if (!BASE64.test(compact)) {
    const bad = compact.search(/[^A-Za-z0-9+/=]/);
    const why =
      bad === -1
        ? 'padding "=" may only end the text'
        : `character ${JSON.stringify(compact[bad])} at position ${bad} is not in the Base64 alphabet (URL-safe Base64 is not accepted)`;
    throw new HttpError(400, 'invalid_base64', `${field} is not valid Base64: ${why}`);
  }
  if (compact.length % 4 !== 0) {
    throw new HttpError(
      400,
      'invalid_base64',
      `${field} is not valid Base64: its length (${compact.length}) is not a multiple of 4; is padding missing?`,
    );
  }
  return Buffer.from(compact, 'base64');
}
