/** What a secret is replaced with. */
export const REDACTED = '[redacted]';

/** Secrets shorter than this are redacted only as a whole token, so that ordinary words survive. */
const SHORT_SECRET = 12;

/**
 * Replaces every occurrence of `secret` in a text, written as it is or as a
 * service or proxy would write it back: JSON-escaped (`\"`, `\\`, `\/`,
 * `\u003c`), HTML-escaped (`&quot;`, `&lt;`, `&#34;`, `&#x22;`) or
 * URL-encoded (`%22`, either case), in any mix, letters in either case. A
 * secret shorter than 12 characters is replaced only where no letter or
 * digit touches it.
 *
 * Plain substring search over the text and over its unescaped reading, in
 * time linear in the text for a secret of any length: a pattern built from
 * the secret would grow with it (a password of some thousands of characters
 * made one too large to compile, and the error quoted the pattern).
 *
 * @example
 * redact('bad key sk_live_abc123def456', 'sk_live_abc123def456'); // 'bad key [redacted]'
 */
export function redact(text: string, secret: string): string {
  // An escape is longer than the character it stands for: a shorter text cannot hold the secret.
  if (secret.length === 0 || text.length < secret.length) return text;
  const needle = fold(secret);
  const whole = secret.length < SHORT_SECRET;
  // The text as written first (a secret that itself looks escaped, `a%41`), then as unescaped.
  const once = replaceAll(text, readLiterally(text), needle, whole);
  if (!/[%\\&]/.test(once)) return once;
  return replaceAll(once, readUnescaped(once), needle, whole);
}

/**
 * One reading of a text: the characters it stands for (case-folded), each
 * with the span of the text that wrote it (one character, or an escape).
 */
interface Reading {
  chars: string;
  /** Where each character's span starts and ends in the text; undefined: one character each, in place. */
  starts: number[] | undefined;
  ends: number[] | undefined;
}

/** Replaces each match of `needle` in `reading` by the span of `text` it was read from. */
function replaceAll(text: string, reading: Reading, needle: string, whole: boolean): string {
  const { chars, starts, ends } = reading;
  let out = '';
  let copied = 0;
  let from = 0;
  for (;;) {
    const at = chars.indexOf(needle, from);
    if (at === -1) break;
    const last = at + needle.length - 1;
    if (whole && (isWordChar(chars[at - 1]) || isWordChar(chars[last + 1]))) {
      from = at + 1;
      continue;
    }
    out += text.slice(copied, starts ? starts[at] : at) + REDACTED;
    copied = ends ? ends[last]! : last + 1;
    from = last + 1;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

function readLiterally(text: string): Reading {
  return { chars: fold(text), starts: undefined, ends: undefined };
}

/** Reads JSON, HTML and URL escapes as the one character each stands for. */
function readUnescaped(text: string): Reading {
  const chars: string[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  let i = 0;
  while (i < text.length) {
    const [ch, length] = escapeAt(text, i) ?? [text[i]!, 1];
    chars.push(foldChar(ch));
    starts.push(i);
    ends.push(i + length);
    i += length;
  }
  return { chars: chars.join(''), starts, ends };
}

const NAMED: Record<string, string> = { quot: '"', amp: '&', lt: '<', gt: '>', apos: "'" };
const JSON_SHORT: Record<string, string> = { '"': '"', '\\': '\\', '/': '/' };
/** The longest escape read: `&#x0000000022;` is allowed by HTML, but not without end. */
const MAX_ESCAPE = 16;

/** The character an escape at `i` stands for and the escape's length, or undefined. */
function escapeAt(text: string, i: number): [string, number] | undefined {
  const c = text[i];
  if (c === '%') {
    const hex = text.slice(i + 1, i + 3);
    return /^[0-9a-f]{2}$/i.test(hex) ? [String.fromCharCode(parseInt(hex, 16)), 3] : undefined;
  }
  if (c === '\\') {
    const next = text[i + 1];
    if (next === 'u') {
      const hex = text.slice(i + 2, i + 6);
      return /^[0-9a-f]{4}$/i.test(hex) ? [String.fromCharCode(parseInt(hex, 16)), 6] : undefined;
    }
    return next !== undefined && JSON_SHORT[next] ? [JSON_SHORT[next], 2] : undefined;
  }
  if (c === '&') {
    const end = text.indexOf(';', i + 1);
    if (end === -1 || end - i > MAX_ESCAPE) return undefined;
    const body = text.slice(i + 1, end);
    const length = end - i + 1;
    const named = NAMED[body.toLowerCase()];
    if (named) return [named, length];
    const number = /^#(?:x([0-9a-f]+)|(\d+))$/i.exec(body);
    if (!number) return undefined;
    const code = number[1] !== undefined ? parseInt(number[1], 16) : Number(number[2]);
    return code <= 0xffff ? [String.fromCharCode(code), length] : undefined;
  }
  return undefined;
}

/** Case-folded character by character, so that the folded text keeps one character per character. */
function fold(text: string): string {
  // ASCII, almost always: lowering the whole is lowering each character.
  // eslint-disable-next-line no-control-regex
  if (/^[\x00-\x7f]*$/.test(text)) return text.toLowerCase();
  let out = '';
  for (let i = 0; i < text.length; i++) out += foldChar(text[i]!);
  return out;
}

function foldChar(ch: string): string {
  const lower = ch.toLowerCase();
  return lower.length === 1 ? lower : ch;
}

function isWordChar(ch: string | undefined): boolean {
  return ch !== undefined && /[a-z0-9]/i.test(ch);
}
