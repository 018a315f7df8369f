import type { ApiAddress, ApiImage } from '../../protocol/api-types.js';
import { decodeBase64Strict } from './decode-base64.js';
import { HttpError } from './http-error.js';
import { addressProblem } from '../../protocol/address-rules.js';
import { rejectUnknownFields } from './reject-unknown-fields.js';
import { isPlaceholderKey, PLACEHOLDER_KEY_RULE, stripBraces } from '../../protocol/placeholder-key.js';

/** An embedded image after validation, with its bytes decoded. */
export interface ValidImage {
  name: string;
  data: Buffer;
  mimeType: ApiImage['mimeType'];
}

/** `textContent` after validation. */
export interface ValidTextContent {
  html: string | undefined;
  text: string | undefined;
  tracking: boolean;
  images: ValidImage[];
}

const IMAGE_TYPES: readonly ApiImage['mimeType'][] = ['PNG', 'JPEG', 'GIF', 'WEBP'];

const bad = (message: string, code: 'invalid_request' | 'invalid_address' = 'invalid_request') =>
  new HttpError(400, code, message);

/** Validates an address object `{ email, name? }` at `path`. */
export function validateAddress(value: unknown, path: string): ApiAddress {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`${path} must be an object { "email", "name" }`);
  }
  const o = value as Record<string, unknown>;
  rejectUnknownFields(o, ['email', 'name'], path);
  if (typeof o.email !== 'string') throw bad(`${path}.email is required and must be a string`);
  const problem = addressProblem(o.email);
  if (problem) throw bad(`${path}.email ${problem}: ${JSON.stringify(o.email.slice(0, 100))}`, 'invalid_address');
  if (o.name !== undefined && typeof o.name !== 'string') throw bad(`${path}.name must be a string`);
  if (typeof o.name === 'string' && /[\r\n]/.test(o.name)) throw bad(`${path}.name must not contain line breaks`);
  return o.name === undefined ? { email: o.email } : { email: o.email, name: o.name };
}

/** Validates a required non-empty single-line string at `path`. */
export function validateSubject(value: unknown, path: string): string {
  if (typeof value !== 'string' || value.length === 0) throw bad(`${path} is required and must be a non-empty string`);
  if (/[\r\n]/.test(value)) throw bad(`${path} must not contain line breaks`);
  return value;
}

/** Validates `textContent` (html and/or text, tracking, images). */
export function validateTextContent(value: unknown, path: string): ValidTextContent {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`${path} is required and must be an object { "html", "text", "tracking", "images" }`);
  }
  const o = value as Record<string, unknown>;
  rejectUnknownFields(o, ['html', 'text', 'tracking', 'images'], path);
  for (const key of ['html', 'text'] as const) {
    if (o[key] !== undefined && typeof o[key] !== 'string') throw bad(`${path}.${key} must be a string`);
  }
  if (!o.html && !o.text) throw bad(`${path} needs html or text`);
  if (o.tracking !== undefined && typeof o.tracking !== 'boolean') throw bad(`${path}.tracking must be true or false`);
  if (o.images !== undefined && !Array.isArray(o.images)) throw bad(`${path}.images must be an array`);
  const images = ((o.images as unknown[] | undefined) ?? []).map((image, i) =>
    validateImage(image, `${path}.images[${i}]`),
  );
  const names = new Set<string>();
  for (const image of images) {
    if (names.has(image.name)) throw bad(`${path}.images has two images named "${image.name}"`);
    names.add(image.name);
  }
  return {
    html: o.html as string | undefined,
    text: o.text as string | undefined,
    tracking: o.tracking === true,
    images,
  };
}

function validateImage(value: unknown, path: string): ValidImage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`${path} must be an object { "name", "data", "mimeType" }`);
  }
  const o = value as Record<string, unknown>;
  rejectUnknownFields(o, ['name', 'data', 'mimeType'], path);
  // The spec writes image names in double braces; the bare name is accepted too.
  const name = typeof o.name === 'string' ? stripBraces(o.name) : undefined;
  if (name === undefined || !isPlaceholderKey(name)) {
    throw bad(`${path}.name must be ${PLACEHOLDER_KEY_RULE}, optionally written {{name}}`);
  }
  if (name === 'unsubscribe') throw bad(`${path}.name "unsubscribe" is reserved for the unsubscribe link`);
  if (typeof o.mimeType !== 'string' || !IMAGE_TYPES.includes(o.mimeType as ApiImage['mimeType'])) {
    throw bad(`${path}.mimeType must be one of ${IMAGE_TYPES.join(', ')} (upper case)`);
  }
  if (typeof o.data !== 'string') throw bad(`${path}.data must be a Base64 string`);
  const data = decodeBase64Strict(o.data, `${path}.data`);
  const mimeType = o.mimeType as ApiImage['mimeType'];
  if (!hasSignature(data, mimeType))
    throw bad(`${path}.data is not a ${mimeType} image (its first bytes do not match)`);
  return { name, data, mimeType };
}

function hasSignature(data: Buffer, type: ApiImage['mimeType']): boolean {
  switch (type) {
    case 'PNG':
      return data.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    case 'JPEG':
      return data[0] === 0xff && data[1] === 0xd8 && data[2] === 0xff;
    case 'GIF':
      return data.subarray(0, 4).toString('latin1') === 'GIF8';
    case 'WEBP':
      return data.subarray(0, 4).toString('latin1') === 'RIFF' && data.subarray(8, 12).toString('latin1') === 'WEBP';
  }
}
