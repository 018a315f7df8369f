import { parseAddressList } from '../protocol/address-list.js';
import { headerSectionEnd, parseHeaderFields, removeHeaderFields } from '../protocol/header-fields.js';
import { readHeaderAddresses } from '../transport/message-envelope.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { addressKey } from './address-key.js';

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
 * Addresses compare as {@link addressKey} says (quoted local parts, case, IDN).
 *
 * @param head the header section as received, ending with its blank line when there is a body
 * @param rcptTo the envelope recipients
 * @throws {EmlApiError} `EENVELOPE` naming the header recipients missing from `RCPT TO`
 */
export function planEnvelope(head: Buffer, rcptTo: readonly string[]): EnvelopePlan {
  const headers = readHeaderAddresses(head);
  const envelopeKeys = new Set(rcptTo.map(addressKey));
  const headerKeys = new Set(headers.recipients.map(addressKey));
  const notInEnvelope = headers.recipients.filter((a) => !envelopeKeys.has(addressKey(a)));
  if (notInEnvelope.length > 0) throw headersNameOthers(notInEnvelope);
  const addedBcc: string[] = [];
  const seen = new Set<string>();
  for (const address of rcptTo) {
    const key = addressKey(address);
    if (!headerKeys.has(key) && !seen.has(key)) {
      seen.add(key);
      addedBcc.push(address);
    }
  }
  const plan = { from: headers.from, messageId: headers.messageId, addedBcc };
  if (addedBcc.length === 0) return { ...plan, head };
  return { ...plan, head: withBcc(head, addedBcc) };
}

/** The header section with one `Bcc` field holding its existing Bcc addresses and `added`. */
function withBcc(head: Buffer, added: readonly string[]): Buffer {
  const existing = parseHeaderFields(head)
    .filter((f) => f.name.toLowerCase() === 'bcc')
    .flatMap((f) => parseAddressList(f.value));
  const section = existing.length > 0 ? removeHeaderFields(head, 'bcc') : head;
  const end = headerSectionEnd(section);
  let at: number;
  let eol: string;
  let lead = '';
  if (end !== undefined) {
    // Before the blank line that ends the header section (`\r\n` or `\n`), ending like the line before it.
    at = end - (section[end - 2] === 0x0d ? 2 : 1);
    eol = section[at - 2] === 0x0d ? '\r\n' : '\n';
  } else {
    // A message without a body: all of it is header.
    eol = section.includes('\r\n') ? '\r\n' : '\n';
    at = section.length;
    if (at > 0 && section[at - 1] !== 0x0a) lead = eol;
  }
  const field = Buffer.from(`${lead}${foldedBcc([...existing, ...added], eol)}`, 'utf8');
  return Buffer.concat([section.subarray(0, at), field, section.subarray(at)]);
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
