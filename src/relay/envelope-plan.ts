import { headerSectionEnd } from '../protocol/header-fields.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { addressKey } from './address-key.js';
import { readAddressList } from './address-list-reader.js';
import { readRelayHeaders, type RelayHeaderField } from './relay-headers.js';

/** What the relay does to the header section of a message before it leaves. */
export interface EnvelopePlan {
  /** The header section to upload: the original, or with a `Bcc` field naming the envelope-only recipients. */
  head: Buffer;
  /** `RCPT TO` recipients that no To, Cc or Bcc header named, now in the `Bcc` field. */
  addedBcc: string[];
  /** The From address of the headers, or false. */
  from: string | false;
  /** The Message-ID header, when there is one. */
  messageId: string | undefined;
  /** Whether the message has a Date header. */
  hasDate: boolean;
}

/** Recipients named in the refusal before "and N more". */
const NAMED = 5;

/**
 * Reconciles the SMTP envelope with the headers, for a service that reads
 * recipients from To, Cc and Bcc:
 *
 * - `RCPT TO` recipients no header names (the client removed Bcc, as
 *   Python's `send_message`, PHPMailer and most MTAs do) are written into a
 *   `Bcc` field at the end of the header section; the service removes it
 *   before delivery. An existing Bcc field is merged into it.
 * - Header recipients that are not in `RCPT TO` are refused: the service
 *   would mail people this transaction did not ask for.
 *
 * Addresses compare as {@link addressKey} says: ASCII case aside, spelled
 * the same way (an IDN domain too: `xn--` in one and Unicode in the other
 * are refused). The headers are read strictly ({@link readRelayHeaders}):
 * what the relay cannot read for certain is refused, never skipped; so are
 * headers that spell their recipients in more ways than `maxRecipients`.
 *
 * @param head the header section as received, ending with its blank line when there is a body
 * @param rcptTo the envelope recipients, as the client wrote them
 * @param limits.maxRecipients the most spellings of recipients the headers may hold
 * @throws {EmlApiError} `EENVELOPE` naming the header recipients missing from `RCPT TO`; a permanent
 *   `EMESSAGE` naming a header line or a To/Cc/Bcc entry the relay cannot read for certain, or
 *   saying that the headers spell their recipients in too many ways
 */
export function planEnvelope(
  head: Buffer,
  rcptTo: readonly string[],
  { maxRecipients = Infinity }: { maxRecipients?: number } = {},
): EnvelopePlan {
  const headers = readRelayHeaders(head);
  const envelopeKeys = new Set(rcptTo.map(addressKey));
  const headerKeys = new Set(headers.recipients.map(addressKey));
  const notInEnvelope = headers.recipients.filter((a) => !envelopeKeys.has(addressKey(a)));
  if (notInEnvelope.length > 0) throw headersNameOthers(notInEnvelope);
  if (headers.spellings > maxRecipients) {
    // Spellings that differ in ASCII case only are one recipient to the relay; a service that compared
    // them exactly would mail each: their number is held to what RCPT TO could have named.
    throw new EmlApiError(
      'EMESSAGE',
      `The To, Cc and Bcc headers spell their recipients in ${headers.spellings} different ways, more than the relay's ${maxRecipients} recipients per message`,
      { command: 'DATA', permanent: true },
    );
  }
  const addedBcc: string[] = [];
  const seen = new Set<string>();
  for (const address of rcptTo) {
    const key = addressKey(address);
    if (!headerKeys.has(key) && !seen.has(key)) {
      seen.add(key);
      addedBcc.push(address);
    }
  }
  const plan = { from: headers.from, messageId: headers.messageId, hasDate: headers.hasDate, addedBcc };
  if (addedBcc.length === 0) return { ...plan, head };
  const bcc = headers.fields.filter((f) => f.name.toLowerCase() === 'bcc');
  const existing = bcc.flatMap((f) => readAddressList(f.value, f.name));
  return { ...plan, head: appendField(withoutFields(head, bcc), foldedBcc([...existing, ...addedBcc], eolOf(head))) };
}

/**
 * The header section with `messageId` as its Message-ID field, added at its
 * end; a Message-ID field without a value (the only kind a message the relay
 * names has) is removed, as a message has one Message-ID at most.
 *
 * @example
 * withMessageId(Buffer.from('From: a@x.test\r\n\r\n'), '<1.eml-api-relay@x.test>').toString();
 * // 'From: a@x.test\r\nMessage-ID: <1.eml-api-relay@x.test>\r\n\r\n'
 */
export function withMessageId(head: Buffer, messageId: string): Buffer {
  const empty = readRelayHeaders(head).fields.filter((f) => f.name.toLowerCase() === 'message-id');
  return appendField(withoutFields(head, empty), `Message-ID: ${messageId}${eolOf(head)}`);
}

/** The header section without these fields (folded lines included). */
function withoutFields(head: Buffer, doomed: readonly RelayHeaderField[]): Buffer {
  if (doomed.length === 0) return head;
  const parts: Buffer[] = [];
  let pos = 0;
  for (const field of doomed) {
    parts.push(head.subarray(pos, field.start));
    pos = field.end;
  }
  parts.push(head.subarray(pos));
  return Buffer.concat(parts);
}

/** The line break the header section uses: `\n` for a section of bare LF lines (the relay's own are CRLF). */
function eolOf(head: Buffer): string {
  const lf = head.indexOf(0x0a);
  return lf === -1 || head[lf - 1] === 0x0d ? '\r\n' : '\n';
}

/**
 * The header section with `field` (a whole field, ending with its line break)
 * added as its last field, before the blank line that ends the section.
 *
 * @example
 * appendField(Buffer.from('From: a@x.test\r\n\r\n'), 'Bcc: b@x.test\r\n').toString();
 * // 'From: a@x.test\r\nBcc: b@x.test\r\n\r\n'
 */
export function appendField(section: Buffer, field: string): Buffer {
  const end = headerSectionEnd(section);
  let at: number;
  let lead = '';
  if (end !== undefined) {
    // Before the blank line that ends the header section (`\r\n` or `\n`).
    at = end - (section[end - 2] === 0x0d ? 2 : 1);
  } else {
    // A message without a body: all of it is header.
    at = section.length;
    if (at > 0 && section[at - 1] !== 0x0a) lead = eolOf(section);
  }
  return Buffer.concat([section.subarray(0, at), Buffer.from(`${lead}${field}`, 'utf8'), section.subarray(at)]);
}

/**
 * `Bcc: a, b, ...` folded so that no line exceeds 78 characters where the
 * addresses allow it (RFC 5322 2.1.1), ending with a line break.
 */
export function foldedBcc(addresses: readonly string[], eol: string): string {
  let out = 'Bcc:';
  let line = out.length;
  addresses.forEach((address, i) => {
    const item = i < addresses.length - 1 ? `${address},` : address;
    if (i > 0 && line + 1 + item.length > 78) {
      out += `${eol} ${item}`;
      line = 1 + item.length;
    } else {
      out += ` ${item}`;
      line += 1 + item.length;
    }
  });
  return `${out}${eol}`;
}

function headersNameOthers(addresses: string[]): EmlApiError {
  const named = addresses.slice(0, NAMED).join(', ');
  const more = addresses.length > NAMED ? ` and ${addresses.length - NAMED} more` : '';
  return new EmlApiError(
    'EENVELOPE',
    `The headers name recipients that are not in RCPT TO: ${named}${more}. The email service delivers to every ` +
      'To/Cc/Bcc recipient, so it would mail people this transaction did not ask for; send each message once with all ' +
      'its recipients (e.g. Postfix: raise smtp_destination_recipient_limit)',
    { command: 'envelope', permanent: true },
  );
}
