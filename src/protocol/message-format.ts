import { createRequire } from 'node:module';

// The address rule of the wire contract, for the client before any request and the emulator on every request: an
// RFC 5322 addr-spec as Nodemailer writes it, quoted local parts and SMTPUTF8/IDN included, never a control,
// bidirectional or zero-width character. Every check scans the input once, after a length cap.

/** RFC 5321: a path of 256 octets, brackets included. */
export const MAX_ADDRESS_LENGTH = 254;

/** A display name and an address, as long as a header line may be. */
export const MAX_ADDRESS_INPUT_LENGTH = 998;

/**
 * The first C0 or C1 control, DEL, bidirectional override, isolate or mark, zero-width character or lone surrogate.
 * @param allowTab accept tabs: white space in header text and display names, not in an address
 */
export function findForbiddenCharacter(
  text: string,
  { allowTab = false }: { allowTab?: boolean } = {},
): { index: number; what: string } | undefined {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 0x09 && allowTab) continue;
    const what = forbidden(code, text, i);
    if (what !== undefined) return { index: i, what };
    if (code >= 0xd800 && code <= 0xdbff && isLowSurrogate(text.charCodeAt(i + 1))) i++;
  }
  return undefined;
}

function forbidden(code: number, text: string, i: number): string | undefined {
  if (code < 0x20 || code === 0x7f) return `the control character ${unicode(code)}`;
  if (code >= 0x80 && code <= 0x9f) return `the control character ${unicode(code)}`;
  if (code === 0x061c || code === 0x200e || code === 0x200f || (code >= 0x202a && code <= 0x202e))
    return `the bidirectional control ${unicode(code)}`;
  if (code >= 0x2066 && code <= 0x2069) return `the bidirectional control ${unicode(code)}`;
  if ((code >= 0x200b && code <= 0x200d) || code === 0x2060 || code === 0xfeff)
    return `the zero-width character ${unicode(code)}`;
  if (code >= 0xd800 && code <= 0xdbff && !isLowSurrogate(text.charCodeAt(i + 1)))
    return 'a lone surrogate (not valid Unicode)';
  if (code >= 0xdc00 && code <= 0xdfff) return 'a lone surrogate (not valid Unicode)';
  return undefined;
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

function unicode(code: number): string {
  return `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
}

/** A lone UTF-16 surrogate is not valid Unicode, and `encodeURIComponent` throws on it. */
export function hasLoneSurrogate(text: string): boolean {
  // With the u flag, this class matches only surrogates that are not part of a pair.
  return /[\uD800-\uDFFF]/u.test(text);
}

/** RFC 5322 specials and spaces: never in an unquoted local part or a domain. */
const SPECIALS = new Set(['(', ')', '<', '>', '[', ']', ':', ';', '@', '\\', ',', '"', ' ', '\t']);

/**
 * Whether `address` is one addr-spec within {@link MAX_ADDRESS_LENGTH}: a dot-atom or quoted local part `@` labels or a
 * `[literal]`. Like the SMTP servers it stands in for, it is lenient about dots and labels and allows any non-ASCII
 * letter (RFC 6531, 6532).
 */
export function isValidAddress(address: string): boolean {
  if (address.length === 0 || address.length > MAX_ADDRESS_LENGTH) return false;
  if (findForbiddenCharacter(address) !== undefined) return false;
  const at = address.lastIndexOf('@');
  if (at <= 0 || at === address.length - 1) return false;
  return isLocalPart(address.slice(0, at)) && isDomain(address.slice(at + 1));
}

function isLocalPart(local: string): boolean {
  if (local.startsWith('"')) {
    if (local.length < 2 || !local.endsWith('"')) return false;
    for (let i = 1; i < local.length - 1; i++) {
      const ch = local[i]!;
      if (ch === '\\') {
        // A quoted pair: the next character, whatever it is, but not the closing quote.
        if (i + 1 >= local.length - 1) return false;
        i++;
      } else if (ch === '"') return false;
    }
    return true;
  }
  return isAtomText(local);
}

function isDomain(domain: string): boolean {
  if (domain.startsWith('[')) {
    if (!domain.endsWith(']') || domain.length < 3) return false;
    for (let i = 1; i < domain.length - 1; i++) {
      const ch = domain[i]!;
      if (ch === '[' || ch === ']' || ch === '\\' || ch === ' ') return false;
    }
    return true;
  }
  return isAtomText(domain);
}

function isAtomText(text: string): boolean {
  for (const ch of text) if (SPECIALS.has(ch)) return false;
  return text.length > 0;
}

export function addressProblem(address: string): string | undefined {
  if (address.length > MAX_ADDRESS_LENGTH) return `is longer than ${MAX_ADDRESS_LENGTH} characters`;
  const bad = findForbiddenCharacter(address);
  if (bad) return `contains ${bad.what} at position ${bad.index}`;
  return isValidAddress(address) ? undefined : 'is not a valid address';
}

/** What is wrong with a display name: longer than a header line, or a control, bidirectional or zero-width character. */
export function displayNameProblem(name: string): string | undefined {
  if (name.length > MAX_ADDRESS_INPUT_LENGTH) return `is longer than ${MAX_ADDRESS_INPUT_LENGTH} characters`;
  const bad = findForbiddenCharacter(name, { allowTab: true });
  return bad ? `contains ${bad.what} at position ${bad.index}` : undefined;
}

interface ParsedEntry {
  name: string;
  address?: string;
  group?: ParsedEntry[];
}

type AddressParser = (text: string) => ParsedEntry[];

// Nodemailer's own parser (a peer dependency), so addresses read here are those Nodemailer reads; Nodemailer 10
// exports it as `default` too, 6.9 as the module.
const loaded = createRequire(import.meta.url)('nodemailer/lib/addressparser') as
  AddressParser | { default: AddressParser };
const addressparser: AddressParser = typeof loaded === 'function' ? loaded : loaded.default;

export interface NamedAddress {
  name: string;
  address: string;
}

/**
 * An RFC 5322 address list through Nodemailer's parser, group members flattened in order and entries without an address
 * dropped. Linear for Nodemailer 7 and later; callers cap the length first.
 */
export function parseAddresses(value: string): NamedAddress[] {
  const out: NamedAddress[] = [];
  const walk = (entries: ParsedEntry[]): void => {
    for (const entry of entries) {
      if (entry.group) walk(entry.group);
      else if (entry.address) out.push({ name: entry.name ?? '', address: entry.address });
    }
  };
  walk(addressparser(value));
  return out;
}

/** The addresses of a list without names; entries with no `@` (`undisclosed-recipients:;`) are dropped. */
export function parseAddressList(value: string): string[] {
  return parseAddresses(value)
    .map((entry) => entry.address)
    .filter((address) => address.includes('@'));
}

// Header-section helpers for the transport and spool (reading recipients) and the emulator (removing Bcc), on bytes
// so the body is never decoded or copied.

export interface HeaderField {
  name: string;
  /** Unfolded, without the leading space. */
  value: string;
  /** Byte offset where the field starts. */
  start: number;
  /** Byte offset just past the field's last line break. */
  end: number;
}

/** Length of the header section with its blank line, or the whole length for a message without a body. */
export function headerSectionLength(message: Buffer): number {
  return headerSectionEnd(message) ?? message.length;
}

/**
 * Offset past the blank line that ends the header section: the first empty line after a line break, whatever the mix of
 * CRLF and bare LF (`\n\r\n` is what scripts writing headers with "\n" make), as MIME parsers and the service read it.
 */
export function headerSectionEnd(bytes: Buffer): number | undefined {
  let at = bytes.indexOf(0x0a);
  while (at !== -1) {
    if (bytes[at + 1] === 0x0a) return at + 2;
    if (bytes[at + 1] === 0x0d && bytes[at + 2] === 0x0a) return at + 3;
    at = bytes.indexOf(0x0a, at + 1);
  }
  return undefined;
}

/** The longest header section read: the relay refuses a longer one (`554`) and a spooled message's head is cut there. */
export const MAX_HEADER_SECTION = 1024 * 1024;

/**
 * Finds the end of the header section of a message arriving in chunks, searching only the new bytes (and the last 3 of
 * the previous chunk, where a blank line may begin), so the cost stays linear in the header's length.
 */
export class HeaderSectionFinder {
  readonly #parts: Buffer[] = [];
  #size = 0;
  #tail = Buffer.alloc(0);

  /** Everything pushed since the last {@link take}. */
  get size(): number {
    return this.#size;
  }

  /** Holds `chunk`; @returns the end of the header section in the bytes held, once found */
  push(chunk: Buffer): number | undefined {
    this.#parts.push(chunk);
    const window = this.#tail.length > 0 ? Buffer.concat([this.#tail, chunk]) : chunk;
    const offset = this.#size - this.#tail.length;
    this.#size += chunk.length;
    const end = headerSectionEnd(window);
    if (end !== undefined) return offset + end;
    this.#tail = Buffer.from(window.subarray(Math.max(0, window.length - 3)));
    return undefined;
  }

  /** The bytes held, as one Buffer; the finder holds nothing after. */
  take(): Buffer {
    const all = Buffer.concat(this.#parts, this.#size);
    this.#parts.length = 0;
    this.#size = 0;
    this.#tail = Buffer.alloc(0);
    return all;
  }
}

/** The header fields of a message; lines that are not fields are skipped. */
export function parseHeaderFields(message: Buffer): HeaderField[] {
  const sectionEnd = headerSectionLength(message);
  const section = message.subarray(0, sectionEnd).toString('latin1');
  const fields: HeaderField[] = [];
  let pos = 0;
  let current: HeaderField | undefined;
  while (pos < section.length) {
    let lineEnd = section.indexOf('\n', pos);
    lineEnd = lineEnd === -1 ? section.length : lineEnd + 1;
    const line = section.slice(pos, lineEnd).replace(/\r?\n$/, '');
    if (line.length === 0) break;
    if ((line[0] === ' ' || line[0] === '\t') && current) {
      current.value += ` ${line.trim()}`;
      current.end = lineEnd;
    } else {
      const colon = line.indexOf(':');
      current = undefined;
      if (colon > 0 && /^[\x21-\x39\x3b-\x7e]+$/.test(line.slice(0, colon).trimEnd())) {
        current = {
          name: line.slice(0, colon).trimEnd(),
          value: line.slice(colon + 1).trim(),
          start: pos,
          end: lineEnd,
        };
        fields.push(current);
      }
    }
    pos = lineEnd;
  }
  // Read as latin1 to keep byte offsets, then as UTF-8 so internationalised addresses (RFC 6532) survive.
  for (const field of fields) {
    field.value = Buffer.from(field.value, 'latin1').toString('utf8');
  }
  return fields;
}

/** The message without the named header fields (every occurrence, folded lines included), body bytes as they are. */
export function removeHeaderFields(message: Buffer, name: string): Buffer {
  const lower = name.toLowerCase();
  const doomed = parseHeaderFields(message).filter((f) => f.name.toLowerCase() === lower);
  if (doomed.length === 0) return message;
  const parts: Buffer[] = [];
  let pos = 0;
  for (const field of doomed) {
    parts.push(message.subarray(pos, field.start));
    pos = field.end;
  }
  parts.push(message.subarray(pos));
  return Buffer.concat(parts);
}

// Base64 on the wire: RFC 4648 section 4, padded; line breaks and spaces allowed as in MIME, anything else refused
// because Node's decoder would silently skip it.

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

export function compactBase64(text: string): string {
  return text.replace(/[\r\n\t ]+/g, '');
}

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
