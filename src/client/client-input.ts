import {
  type ApiAddress,
  type ApiImage,
  type ApiTextContent,
  bracedKey,
  isPlaceholderKey,
  PLACEHOLDER_KEY_RULE,
  stripBraces,
  type GroupMemberEntry,
  isValidIdempotencyKey,
} from '../protocol/api-types.js';
import {
  parseAddresses,
  findForbiddenCharacter,
  isValidAddress,
  MAX_ADDRESS_INPUT_LENGTH,
  MAX_ADDRESS_LENGTH,
  base64Problem,
  compactBase64,
  hasLoneSurrogate,
} from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * An address in any form Nodemailer accepts (`'Ann <ann@x.test>'`, `{ name, address }`) or as `{ email, name }`.
 * @example const to: AddressInput[] = ['Ann <ann@example.test>', { name: 'Bob', address: 'bob@example.test' }];
 */
export type AddressInput = string | { address: string; name?: string } | { email: string; name?: string };

const MAX_LIST_INPUT_LENGTH = 100 * MAX_ADDRESS_INPUT_LENGTH;

/**
 * One address as `{ email, name }`; strings go through Nodemailer's parser after a length cap and a check for control,
 * bidirectional and zero-width characters. @throws {EmlApiError} `EMESSAGE` naming `where`
 */
export function toApiAddress(input: unknown, where: string): ApiAddress {
  let email: unknown;
  let name: unknown;
  if (typeof input === 'string') {
    checkText(input, MAX_ADDRESS_INPUT_LENGTH, where);
    const parsed = parseAddresses(input);
    if (parsed.length !== 1) throw invalid(input, where);
    email = parsed[0]!.address;
    name = parsed[0]!.name || undefined;
  } else if (typeof input === 'object' && input !== null) {
    const o = input as Record<string, unknown>;
    email = o.email ?? o.address;
    name = o.name;
    if (typeof email === 'string') checkText(email, MAX_ADDRESS_LENGTH, where);
  }
  if (typeof email !== 'string' || !isValidAddress(email)) throw invalid(input, where);
  if (name !== undefined && typeof name !== 'string') throw inputError(`${where}: the name must be a string`);
  if (typeof name === 'string') {
    if (/[\r\n]/.test(name)) throw inputError(`${where}: the name must not contain line breaks`);
    checkText(name, MAX_ADDRESS_INPUT_LENGTH, `${where}: the name`);
  }
  return name ? { email, name } : { email };
}

/** One address or a list (a comma-separated string too) as `{ email, name }` objects. */
export function toApiAddressList(input: unknown, where: string): ApiAddress[] {
  let list: unknown[];
  if (Array.isArray(input)) list = input;
  else if (typeof input === 'string') {
    checkText(input, MAX_LIST_INPUT_LENGTH, where);
    list = parseAddresses(input).map(({ name, address }) => (name ? { name, address } : address));
    if (list.length === 0 && input.trim() !== '') throw invalid(input, where);
  } else list = [input];
  return list.map((entry, i) =>
    toApiAddress(entry, list.length > 1 || Array.isArray(input) ? `${where}[${i}]` : where),
  );
}

function checkText(text: string, max: number, where: string): void {
  if (text.length > max)
    throw inputError(`${where}: ${text.length} characters, more than the ${max} an address may have`);
  const bad = findForbiddenCharacter(text, { allowTab: true });
  if (bad)
    throw inputError(`${where}: ${JSON.stringify(text.slice(0, 100))} contains ${bad.what} at position ${bad.index}`);
}

function invalid(input: unknown, where: string) {
  return inputError(`${where}: ${describeAddress(input)} is not a valid email address`);
}

function describeAddress(input: unknown): string {
  if (typeof input === 'string') return JSON.stringify(input.slice(0, 100));
  if (input === null || input === undefined) return String(input);
  if (typeof input === 'object') return 'the object given';
  return typeof input;
}

/**
 * An embedded image: bytes or Base64, its format as the service's word (`PNG`) or a MIME type.
 * @example const logo: ImageInput = { name: 'logo', data: fs.readFileSync('logo.png'), mimeType: 'image/png' };
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
 * Content of a JSON send.
 * @example const content: TextContentInput = { html: '<p>Hi {{first_name}}</p>', text: 'Hi {{first_name}}', tracking: true };
 */
export interface TextContentInput {
  html?: string;
  text?: string;
  /** The service's tracking on or off. */
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

export function imageFormat(mimeType: string | undefined): ApiImage['mimeType'] | undefined {
  return mimeType === undefined ? undefined : FORMATS[mimeType.trim().toLowerCase().split(';', 1)[0]!];
}

/** `textContent` checked and converted for the wire. @throws {EmlApiError} `EMESSAGE` naming the field */
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

/** Substitution keys as `{{key}}` and values as strings. @throws {EmlApiError} `EMESSAGE` naming the bad key */
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

export function checkGroupId(groupId: unknown, method: string): asserts groupId is string {
  if (typeof groupId !== 'string' || groupId.length === 0)
    throw inputError(`${method}: groupId must be a non-empty string`);
  if (groupId.length > 256) throw inputError(`${method}: groupId is longer than 256 characters`);
  if (hasLoneSurrogate(groupId)) throw inputError(`${method}: groupId is not valid Unicode (a lone surrogate)`);
}

/** The idempotency key, checked. @throws {EmlApiError} `EMESSAGE` when it cannot be a header value */
export function checkIdempotencyKey(key: unknown): string | undefined {
  if (key === undefined) return undefined;
  if (!isValidIdempotencyKey(key))
    throw inputError('idempotencyKey must be 1 to 255 printable ASCII characters without spaces');
  return key;
}

export function checkSubject(subject: unknown, method: string): string {
  if (typeof subject !== 'string' || subject.length === 0)
    throw inputError(`${method}: subject must be a non-empty string`);
  if (/[\r\n]/.test(subject)) throw inputError(`${method}: subject must not contain line breaks`);
  return subject;
}

export function toMemberEntry(member: unknown, where: string): GroupMemberEntry {
  const address = toApiAddress(member, where);
  const substitutions =
    typeof member === 'object' && member !== null
      ? toApiSubstitutions((member as { substitutions?: unknown }).substitutions, where)
      : undefined;
  return { ...address, ...(substitutions ? { substitutions } : {}) };
}

export function inputError(message: string): EmlApiError {
  return new EmlApiError('EMESSAGE', message, { permanent: true });
}
