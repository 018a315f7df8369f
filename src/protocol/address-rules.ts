/**
 * The address rule of the wire contract, shared by the client (checked before
 * any request) and the emulator (checked on every request): an RFC 5322
 * addr-spec as Nodemailer writes it, quoted local parts (`"a,b"@example.com`)
 * and internationalised addresses (SMTPUTF8, IDN) included; never a control
 * character, a bidirectional override or a zero-width character. Every check
 * scans the input once, after a length cap.
 */

/** Longest address (RFC 5321: a path of 256 octets, brackets included). */
export const MAX_ADDRESS_LENGTH = 254;

/** Longest address input (a display name and an address), as long as a header line may be. */
export const MAX_ADDRESS_INPUT_LENGTH = 998;

/**
 * The first character no address may contain: C0 controls, DEL, C1 controls,
 * bidirectional overrides, isolates and marks, zero-width characters and lone
 * surrogates (text that is not valid Unicode).
 *
 * @param allowTab accept tabs: in header text and display names a tab is white space, in an address it is not
 * @returns its index and a description, or undefined when there is none
 * @example
 * findForbiddenCharacter('a\u202eb@example.com'); // { index: 1, what: 'the bidirectional control U+202E' }
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

/**
 * Whether a string holds a lone UTF-16 surrogate: text that is no valid
 * Unicode and that `encodeURIComponent` refuses with a URIError.
 */
export function hasLoneSurrogate(text: string): boolean {
  // With the u flag, this class matches only surrogates that are not part of a pair.
  return /[\uD800-\uDFFF]/u.test(text);
}

/** Characters an unquoted local part or a domain never has (RFC 5322 specials and spaces). */
const SPECIALS = new Set(['(', ')', '<', '>', '[', ']', ':', ';', '@', '\\', ',', '"', ' ', '\t']);

/**
 * Whether `address` is one addr-spec: a local part (a dot-atom, or a quoted
 * string with its quotes) `@` a domain (labels, or a `[literal]`), within
 * {@link MAX_ADDRESS_LENGTH} and free of forbidden characters. Like the SMTP
 * servers it stands in for, it is lenient about dots and label syntax and
 * allows any non-ASCII letter (RFC 6531, 6532).
 *
 * @example
 * isValidAddress('"a,b"@example.com'); // true
 * isValidAddress('a,b@example.com');   // false
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

/**
 * Why `address` is not a valid address, for an error message, or undefined when it is.
 *
 * @example
 * addressProblem('a\u0000b@example.com'); // 'contains the control character U+0000 at position 1'
 */
export function addressProblem(address: string): string | undefined {
  if (address.length > MAX_ADDRESS_LENGTH) return `is longer than ${MAX_ADDRESS_LENGTH} characters`;
  const bad = findForbiddenCharacter(address);
  if (bad) return `contains ${bad.what} at position ${bad.index}`;
  return isValidAddress(address) ? undefined : 'is not a valid address';
}
