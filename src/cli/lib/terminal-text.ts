const ESC = 0x1b;
const BEL = 0x07;
/** The one-byte (C1) form of ESC [. */
const CSI = 0x9b;

/**
 * Text from elsewhere (the service's error messages, job data) made safe to
 * print on a terminal: escape sequences (colours, cursor moves, screen
 * clearing, window titles, hyperlinks) removed, other control characters and
 * line breaks turned into a space, C1 controls and bidirectional overrides
 * removed, so nothing a service or a job says can rewrite the screen or
 * disguise itself.
 *
 * @example
 * terminalText('\u001b[2J\u001b]0;pwned\u0007bad\r\naddress'); // 'bad address'
 */
export function terminalText(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === ESC) {
      i = endOfEscape(text, i + 1);
    } else if (c === CSI) {
      i = endOfControlSequence(text, i + 1);
    } else if ((c >= 0x80 && c <= 0x9f) || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)) {
      // Other C1 controls, bidirectional overrides and isolates: dropped.
    } else if (c < 0x20 || c === 0x7f) {
      if (!out.endsWith(' ')) out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

/** The index of the last character of the escape sequence whose ESC was just before `at`. */
function endOfEscape(text: string, at: number): number {
  const kind = text[at];
  if (kind === undefined) return at - 1;
  if (kind === '[') return endOfControlSequence(text, at + 1);
  // Strings: OSC (titles, hyperlinks) ends with BEL or ESC \; DCS, SOS, PM and APC with ESC \.
  if (kind === ']' || kind === 'P' || kind === 'X' || kind === '^' || kind === '_') {
    for (let i = at + 1; i < text.length; i++) {
      if (kind === ']' && text.charCodeAt(i) === BEL) return i;
      if (text.charCodeAt(i) === ESC && text[i + 1] === '\\') return i + 1;
    }
    return text.length - 1;
  }
  // Other escapes: intermediates (0x20-0x2f), then one final character.
  let i = at;
  while (i < text.length && text.charCodeAt(i) >= 0x20 && text.charCodeAt(i) <= 0x2f) i++;
  return Math.min(i, text.length - 1);
}

/** The index of the final character (0x40-0x7e) of a control sequence whose parameters start at `at`. */
function endOfControlSequence(text: string, at: number): number {
  let i = at;
  while (i < text.length && text.charCodeAt(i) >= 0x20 && text.charCodeAt(i) <= 0x3f) i++;
  return Math.min(i, text.length - 1);
}
