import { addressKey } from './address-key.js';
import { readAddressList, shown, unreadable } from './address-list-reader.js';
import { disagreeingReader } from './service-address-readers.js';

/**
 * The relay reads a message's header section strictly, because the service
 * reads it leniently: a line, an address or an encoded word that the relay
 * skipped while the service read it as a recipient would send mail to people
 * who were never in `RCPT TO`. So whatever the relay cannot read for certain
 * is refused (`554 5.6.0`, naming it), never skipped. What it accepts is a
 * subset of RFC 5322 on which MIME parsers agree: the property tests check
 * that mailparser (the emulator's parser) reads the same recipients from
 * every header section the relay accepts.
 *
 * Every function here scans its input once: linear in the header section,
 * which the relay caps at 1 MiB.
 */

/** One header field as the relay read it. */
export interface RelayHeaderField {
  /** The name as written, without the white space some senders put before the colon. */
  name: string;
  /** The value unfolded as MIME parsers unfold it (each line break and the white space after it one space), trimmed, as UTF-8. */
  value: string;
  /** Byte offset of the field's first line. */
  start: number;
  /** Byte offset just past the field's last line break. */
  end: number;
}

/** What the relay reads from a header section. */
export interface RelayHeaders {
  fields: RelayHeaderField[];
  /** The To, Cc and Bcc recipients, in order, each once (as {@link addressKey} compares them). */
  recipients: string[];
  /**
   * How many ways the To, Cc and Bcc fields spell their recipients: distinct
   * addresses as written (`Ann@x` and `ann@x` are two). The relay compares
   * spellings as {@link addressKey} does, and the service may compare them
   * more strictly, so this, not `recipients.length`, bounds the copies the
   * service might make.
   */
  spellings: number;
  /** The first address of the first From field, or false. */
  from: string | false;
  /** The first non-empty Message-ID field, or undefined. */
  messageId: string | undefined;
  /** Whether the message has a Date field. */
  hasDate: boolean;
}

/** The fields whose addresses the service sends to. */
const RECIPIENT_FIELDS = new Set(['to', 'cc', 'bcc']);

/**
 * Reads a header section the way the relay trusts: every line is a field
 * (`name:` or `name :`, the name printable ASCII) or the folded continuation
 * of one, and every To, Cc and Bcc field is an address list the relay reads
 * for certain (see {@link readAddressList}).
 *
 * @param head the header section, with or without its blank line; the relay passes it with CRLF line ends only
 * @throws {EmlApiError} `EMESSAGE` (permanent) naming the line or the field that cannot be read
 * @example
 * readRelayHeaders(Buffer.from('From: a@x.test\r\nTo: Ann <ann@x.test>, bob@x.test\r\n\r\n')).recipients;
 * // ['ann@x.test', 'bob@x.test']
 */
export function readRelayHeaders(head: Buffer): RelayHeaders {
  const fields = splitFields(head);
  const recipients: string[] = [];
  const seen = new Set<string>();
  const spellings = new Set<string>();
  let from: string | false = false;
  let messageId: string | undefined;
  let hasDate = false;
  for (const field of fields) {
    const name = field.name.toLowerCase();
    if (RECIPIENT_FIELDS.has(name)) {
      const addresses = readAddressList(field.value, field.name);
      crossCheck(field, addresses);
      for (const address of addresses) {
        spellings.add(address);
        const key = addressKey(address);
        if (!seen.has(key)) {
          seen.add(key);
          recipients.push(address);
        }
      }
    } else if (name === 'from' && from === false) {
      from = firstAddress(field.value);
    } else if (name === 'message-id' && messageId === undefined) {
      messageId = field.value || undefined;
    } else if (name === 'date') {
      hasDate = true;
    }
  }
  return { fields, recipients, spellings: spellings.size, from, messageId, hasDate };
}

/**
 * Refuses a To, Cc or Bcc field that a parser of the service's side reads
 * otherwise than the relay (see {@link disagreeingReader}): a second opinion
 * behind the strict grammar below, which is what makes the readings agree.
 */
function crossCheck(field: RelayHeaderField, addresses: readonly string[]): void {
  const other = disagreeingReader(field.value, addresses);
  if (!other) return;
  const theirs = other.read.map((a) => a || '(no address)').join(', ');
  throw unreadable(
    `the ${field.name} header reads otherwise to ${other.reader}: ${shown(theirs)} where the relay reads ${shown(addresses.join(', '))}`,
  );
}

/** The fields of a header section; a line that is neither a field nor a continuation is refused. */
function splitFields(head: Buffer): RelayHeaderField[] {
  const fields: RelayHeaderField[] = [];
  let current: { field: RelayHeaderField; parts: string[] } | undefined;
  const close = () => {
    if (!current) return;
    const value = current.parts.join(' ').trim();
    current.field.value = Buffer.from(value, 'latin1').toString('utf8');
    current = undefined;
  };
  let pos = 0;
  for (let number = 1; pos < head.length; number++) {
    const lf = head.indexOf(0x0a, pos);
    const next = lf === -1 ? head.length : lf + 1;
    const lineEnd = lf === -1 ? head.length : lf > pos && head[lf - 1] === 0x0d ? lf - 1 : lf;
    if (lineEnd === pos) break;
    const line = head.toString('latin1', pos, lineEnd);
    if (line.includes('\r')) throw unreadable(`header line ${number} holds a bare CR`);
    if (line[0] === ' ' || line[0] === '\t') {
      if (!current) {
        throw unreadable(
          `header line ${number} starts with white space (a folded continuation) but no field precedes it: ${shown(line)}`,
        );
      }
      current.parts.push(line.replace(/^[ \t]+/, ''));
      current.field.end = next;
    } else {
      close();
      const colon = fieldColon(line);
      if (colon === undefined) {
        throw unreadable(
          `header line ${number} is neither a header field nor the folded continuation of one: ${shown(line)}`,
        );
      }
      const field = { name: line.slice(0, colon).trimEnd(), value: '', start: pos, end: next };
      fields.push(field);
      current = { field, parts: [line.slice(colon + 1)] };
    }
    pos = next;
  }
  close();
  return fields;
}

/** The index of the colon of a field line (a name of printable ASCII, white space allowed before the colon). */
function fieldColon(line: string): number | undefined {
  let i = 0;
  for (; i < line.length; i++) {
    const code = line.charCodeAt(i);
    if (code < 0x21 || code > 0x7e || code === 0x3a) break;
  }
  if (i === 0) return undefined;
  while (line[i] === ' ' || line[i] === '\t') i++;
  return line[i] === ':' ? i : undefined;
}

/** The first address of a From value, read leniently: the service checks From itself. */
function firstAddress(value: string): string | false {
  try {
    return readAddressList(value, 'From')[0] ?? false;
  } catch {
    return false;
  }
}
