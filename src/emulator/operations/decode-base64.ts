import { base64Problem, compactBase64 } from '../../protocol/base64-text.js';
import { HttpError } from './http-error.js';

/**
 * Decodes standard Base64 by the wire contract's rule (padded; line breaks and
 * spaces allowed). Anything else is refused, because Node's decoder would
 * silently skip it and deliver a corrupted message.
 *
 * @throws {HttpError} 400 `invalid_base64` naming the field
 */
export function decodeBase64Strict(value: string, field: string): Buffer {
  const compact = compactBase64(value);
  if (compact.length === 0) {
    throw new HttpError(400, 'invalid_base64', `${field} is empty; expected the Base64-encoded message`);
  }
  const problem = base64Problem(compact);
  if (problem !== undefined) throw new HttpError(400, 'invalid_base64', `${field} is not valid Base64: ${problem}`);
  return Buffer.from(compact, 'base64');
}
