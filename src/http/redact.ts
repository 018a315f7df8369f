/** What a secret is replaced with. */
export const REDACTED = '[redacted]';

/** Secrets shorter than this are redacted only as a whole token, so that ordinary words survive. */
const SHORT_SECRET = 12;

const patterns = new Map<string, RegExp>();

/**
 * Replaces every occurrence of `secret` in a text, written as it is or as a
 * service or proxy would write it back: JSON-escaped (`\"`, `\\`, `\/`,
 * `\u003c`), HTML-escaped (`&quot;`, `&lt;`, `&#34;`, `&#x22;`) or
 * URL-encoded (`%22`, either case), in any mix. A secret shorter than 12
 * characters is replaced only where no letter or digit touches it.
 *
 * @example
 * redact('bad key sk_live_abc123def456', 'sk_live_abc123def456'); // 'bad key [redacted]'
 */
export function redact(text: string, secret: string): string {
  if (secret.length === 0 || text.length === 0) return text;
  let pattern = patterns.get(secret);
  if (!pattern) {
    pattern = secretPattern(secret);
    // A client keeps one key; a relay may see a few. Bounded anyway.
    if (patterns.size > 100) patterns.clear();
    patterns.set(secret, pattern);
  }
  pattern.lastIndex = 0;
  return text.replace(pattern, REDACTED);
}

/** Each character of the secret as any of its escaped forms; alternatives of fixed shape, so matching is linear. */
function secretPattern(secret: string): RegExp {
  const body = [...secret].map((ch) => `(?:${forms(ch).join('|')})`).join('');
  const whole = secret.length < SHORT_SECRET ? `(?<![A-Za-z0-9])${body}(?![A-Za-z0-9])` : body;
  return new RegExp(whole, 'gi');
}

const NAMED: Record<string, string[]> = {
  '"': ['&quot;'],
  '&': ['&amp;'],
  '<': ['&lt;'],
  '>': ['&gt;'],
  "'": ['&apos;'],
};

function forms(ch: string): string[] {
  const code = ch.charCodeAt(0);
  const hex = code.toString(16);
  const out = [
    escapeRegExp(ch),
    `%${hex.padStart(2, '0')}`,
    `\\\\u0{0,2}${hex.padStart(2, '0')}`,
    `&#0*${code};`,
    `&#x0*${hex};`,
    ...(NAMED[ch] ?? []),
  ];
  if (ch === '"' || ch === '\\' || ch === '/') out.push(`\\\\${escapeRegExp(ch)}`);
  return out;
}

function escapeRegExp(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
}
