/**
 * Text from elsewhere (what the service answered, a reason it gave) made
 * safe to print on a terminal: every control character (C0 but tab, DEL,
 * C1, so every escape sequence) and every bidirectional control is written
 * as a visible escape (`\x1b`, `\u202e`). A hostile endpoint can then neither
 * retitle the terminal, clear it, move the cursor to forge lines, nor reorder
 * what is shown.
 *
 * @example
 * terminalText('ok\x1b]0;pwned\x07'); // 'ok\\x1b]0;pwned\\x07'
 */
export function terminalText(text: string): string {
  // Matching control characters is the point here.
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (ch) => {
    const code = ch.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
