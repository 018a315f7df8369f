/**
 * Minimal RFC 5322 header-section helpers shared by the transport and the body
 * spool (to read the recipients of the message they upload) and the emulator
 * (to remove Bcc from delivered copies). They work on bytes so the body is never decoded or copied.
 */

/** One header field, unfolded, with its raw bytes' position. */
export interface HeaderField {
  /** Field name as written. */
  name: string;
  /** Unfolded value, without the leading space. */
  value: string;
  /** Byte offset where the field starts in the message. */
  start: number;
  /** Byte offset just past the field's last line break. */
  end: number;
}

/**
 * Byte length of the header section including the blank line that ends it,
 * or the whole length when the message has no body.
 */
export function headerSectionLength(message: Buffer): number {
  return headerSectionEnd(message) ?? message.length;
}

/**
 * Offset just past the blank line that ends the header section, or undefined
 * when `bytes` holds none. The blank line is the first empty line after a
 * line break, whatever the mix of CRLF and bare LF: `\r\n\r\n`, `\n\n`,
 * `\r\n\n` and `\n\r\n` (LF header lines ended by a CRLF blank line, as
 * scripts that build headers with "\n" write), as MIME parsers and the
 * service read it.
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

/**
 * The longest header section the package reads: the relay refuses a longer
 * one (`554`), and a spooled message's head is cut there. No real message
 * needs more.
 */
export const MAX_HEADER_SECTION = 1024 * 1024;

/**
 * Finds the end of the header section of a message arriving in chunks, the
 * one scanner of the spool and the relay: it holds the chunks pushed until
 * the end is found and searches only the new bytes (plus the last 3 of the
 * previous chunk, where a blank line may begin), so the cost stays linear in
 * the header's length.
 */
export class HeaderSectionFinder {
  readonly #parts: Buffer[] = [];
  #size = 0;
  #tail = Buffer.alloc(0);

  /** Bytes held: everything pushed since the last {@link take}. */
  get size(): number {
    return this.#size;
  }

  /**
   * Holds `chunk` and looks for the blank line in it.
   * @returns the end of the header section (an offset in the bytes held), once it is found; else undefined
   */
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

/**
 * Parses the header fields of a message. Lines that are not fields are skipped.
 */
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
  // The values were read as latin1 to keep byte offsets; re-read them as UTF-8
  // so internationalised addresses (RFC 6532) survive.
  for (const field of fields) {
    field.value = Buffer.from(field.value, 'latin1').toString('utf8');
  }
  return fields;
}

/**
 * Returns the message without the named header fields (all occurrences,
 * folded lines included). The body bytes are kept as they are.
 */
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
