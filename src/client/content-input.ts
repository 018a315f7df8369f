import type { ApiImage, ApiTextContent } from '../protocol/api-types.js';
import { base64Problem, compactBase64 } from '../protocol/base64-text.js';
import { bracedKey, isPlaceholderKey, PLACEHOLDER_KEY_RULE, stripBraces } from '../protocol/placeholder-key.js';
import { inputError } from './input-error.js';

/**
 * An embedded image as the client accepts it: bytes or Base64, and a format
 * given as the service's word (`PNG`) or a MIME type (`image/png`).
 *
 * @example
 * const logo: ImageInput = { name: 'logo', data: fs.readFileSync('logo.png'), mimeType: 'image/png' };
 */
export interface ImageInput {
  /** Placeholder name, referenced as `{{name}}` in html. */
  name: string;
  /** Image bytes, or their Base64 text. */
  data: Buffer | Uint8Array | string;
  /** `PNG`, `JPEG`, `GIF`, `WEBP`, or `image/png`, `image/jpeg`... */
  mimeType: string;
}

/**
 * Content of a JSON send as the client accepts it.
 *
 * @example
 * const content: TextContentInput = { html: '<p>Hi {{first_name}}</p>', text: 'Hi {{first_name}}', tracking: true };
 */
export interface TextContentInput {
  html?: string;
  text?: string;
  /** Turns the service's tracking on or off. */
  tracking?: boolean;
  /** Hosted images (plus plan). */
  images?: ImageInput[];
}

const FORMATS: Record<string, ApiImage['mimeType']> = {
  png: 'PNG',
  'image/png': 'PNG',
  jpeg: 'JPEG',
  jpg: 'JPEG',
  'image/jpeg': 'JPEG',
  'image/jpg': 'JPEG',
  gif: 'GIF',
  'image/gif': 'GIF',
  webp: 'WEBP',
  'image/webp': 'WEBP',
};

/** The service's format word for a MIME type or format name, or undefined when it has none. */
export function imageFormat(mimeType: string | undefined): ApiImage['mimeType'] | undefined {
  return mimeType === undefined ? undefined : FORMATS[mimeType.trim().toLowerCase().split(';', 1)[0]!];
}

/**
 * Checks and converts `textContent` for the wire.
 * @throws {EmlApiError} `EMESSAGE` naming the field
 */
export function toApiTextContent(input: unknown, where: string): ApiTextContent {
  if (typeof input !== 'object' || input === null)
    throw inputError(`${where}: textContent must be an object with html and/or text`);
  const o = input as TextContentInput;
  if (o.html !== undefined && typeof o.html !== 'string')
    throw inputError(`${where}: textContent.html must be a string`);
  if (o.text !== undefined && typeof o.text !== 'string')
    throw inputError(`${where}: textContent.text must be a string`);
  if (!o.html && !o.text) throw inputError(`${where}: textContent needs html or text`);
  if (o.tracking !== undefined && typeof o.tracking !== 'boolean')
    throw inputError(`${where}: textContent.tracking must be true or false`);
  if (o.images !== undefined && !Array.isArray(o.images))
    throw inputError(`${where}: textContent.images must be an array`);
  const out: ApiTextContent = {};
  if (o.html !== undefined) out.html = o.html;
  if (o.text !== undefined) out.text = o.text;
  if (o.tracking !== undefined) out.tracking = o.tracking;
  if (o.images && o.images.length > 0) {
    out.images = o.images.map((image, i) => {
      const at = `${where}: textContent.images[${i}]`;
      if (typeof image !== 'object' || image === null) throw inputError(`${at} must be { name, data, mimeType }`);
      const name = typeof image.name === 'string' ? stripBraces(image.name) : '';
      if (!isPlaceholderKey(name)) throw inputError(`${at}.name must be ${PLACEHOLDER_KEY_RULE} (braces optional)`);
      const format = imageFormat(image.mimeType);
      if (!format)
        throw inputError(`${at}.mimeType ${JSON.stringify(String(image.mimeType))} is not PNG, JPEG, GIF or WEBP`);
      let data: string;
      if (typeof image.data === 'string') data = compactBase64(image.data);
      else if (image.data instanceof Uint8Array) data = Buffer.from(image.data).toString('base64');
      else throw inputError(`${at}.data must be a Buffer or a Base64 string`);
      const problem = base64Problem(data);
      if (problem !== undefined) throw inputError(`${at}.data is not valid Base64: ${problem}`);
      return { name, data, mimeType: format };
    });
  }
  return out;
}

/**
 * Normalises substitution keys to `{{key}}` (given with or without braces) and values to strings.
 * @throws {EmlApiError} `EMESSAGE` naming the bad key
 */
export function toApiSubstitutions(input: unknown, where: string): Record<string, string> | undefined {
  if (input === undefined) return undefined;
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw inputError(`${where}.substitutions must be an object of key: value`);
  }
  const out: Record<string, string> = {};
  for (const [rawKey, value] of Object.entries(input)) {
    const key = stripBraces(rawKey);
    if (!isPlaceholderKey(key)) {
      throw inputError(
        `${where}.substitutions key ${JSON.stringify(rawKey.slice(0, 80))} must be ${PLACEHOLDER_KEY_RULE} (braces optional)`,
      );
    }
    if (key === 'unsubscribe')
      throw inputError(`${where}.substitutions key "unsubscribe" is reserved for the unsubscribe link`);
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') {
      throw inputError(`${where}.substitutions["${key}"] must be a string`);
    }
    out[bracedKey(key)] = String(value);
  }
  return out;
}
