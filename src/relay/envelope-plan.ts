import { headerSectionEnd } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import {
  addressKey,
  readingRelayHeaders,
  runWhole,
  type HeaderLimits,
  type RelayHeaderField,
  type RelayHeaders,
  type Steps,
} from './relay-headers.js';

/** What the relay does to the header section of a message before it leaves. */
export interface EnvelopePlan extends Pick<RelayHeaders, 'froms' | 'senders' | 'from' | 'messageId' | 'hasDate'> {
  /** The header section with a `Bcc` field for the envelope-only recipients, without empty Message-ID fields. */
  head: Buffer;
  /** `RCPT TO` recipients that no To, Cc or Bcc header named, now in the `Bcc` field. */
  addedBcc: string[];
}

/** Recipients named in the refusal before "and N more". */
const NAMED = 5;

/** Room for long display names, while one parser's run over them (which cannot be split) stays some milliseconds. */
const ADDRESS_TEXT_PER_RECIPIENT = 512;
const MIN_ADDRESS_TEXT = 64 * 1024;
const MIN_ENTRIES = 1000;
/** At least Postfix's `header_address_token_limit`. */
const TOKENS_PER_RECIPIENT = 20;
const MIN_TOKENS = 10_240;

/** How much of the address fields the relay reads for a message of at most `maxRecipients` recipients. */
function headerLimits(maxRecipients: number): HeaderLimits {
  return {
    // A recipient may be named in two fields.
    maxEntries: Math.max(MIN_ENTRIES, 2 * maxRecipients),
    maxTokens: Math.max(MIN_TOKENS, TOKENS_PER_RECIPIENT * maxRecipients),
    maxAddressText: Math.max(MIN_ADDRESS_TEXT, maxRecipients * ADDRESS_TEXT_PER_RECIPIENT),
  };
}

/**
 * Reconciles the SMTP envelope with the headers, for a service that reads recipients from To, Cc and Bcc. `RCPT TO`
 * recipients no header names (the client removed Bcc, as most MTAs do) are written into a `Bcc` field at the end of
 * the header section, an existing Bcc field merged into it; the service removes it before delivery. Header recipients
 * not in `RCPT TO` are refused: the service would mail people this transaction did not ask for. Addresses compare as
 * {@link addressKey} says; what the relay cannot read for certain is refused, never skipped.
 *
 * @param head the header section as received, ending with its blank line when there is a body
 * @param rcptTo the envelope recipients, as the client wrote them
 * @throws {EmlApiError} `EENVELOPE` naming the header recipients missing from `RCPT TO`; a permanent `EMESSAGE`
 *   naming what the relay cannot read for certain, a limit passed, or what the service would refuse
 */
export function planEnvelope(
  head: Buffer,
  rcptTo: readonly string[],
  limits: { maxRecipients?: number } = {},
): EnvelopePlan {
  return runWhole(planningEnvelope(head, rcptTo, limits));
}

/** {@link planEnvelope} in steps, which the relay runs in slices of the event loop. */
export function* planningEnvelope(
  head: Buffer,
  rcptTo: readonly string[],
  { maxRecipients = Infinity }: { maxRecipients?: number } = {},
): Steps<EnvelopePlan> {
  const headers = yield* readingRelayHeaders(head, headerLimits(maxRecipients));
  const envelopeKeys = new Set(rcptTo.map(addressKey));
  const headerKeys = new Set(headers.recipients.map(addressKey));
  const notInEnvelope = headers.recipients.filter((a) => !envelopeKeys.has(addressKey(a)));
  if (notInEnvelope.length > 0) throw headersNameOthers(notInEnvelope, maxRecipients);
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
  const plan = {
    froms: headers.froms,
    senders: headers.senders,
    from: headers.from,
    messageId: headers.messageId,
    hasDate: headers.hasDate,
    addedBcc,
  };
  // A message has one Message-ID at most: the one the relay adds to a message without one replaces the empty ones.
  const doomed =
    headers.messageId === undefined ? headers.fields.filter((f) => f.name.toLowerCase() === 'message-id') : [];
  if (addedBcc.length === 0) return { ...plan, head: withoutFields(head, doomed) };
  const bcc = headers.fields.filter((f) => f.name.toLowerCase() === 'bcc');
  const existing = bcc.flatMap((f) => f.addresses ?? []);
  const kept = withoutFields(
    head,
    [...bcc, ...doomed].sort((a, b) => a.start - b.start),
  );
  return { ...plan, head: appendField(kept, foldedBcc([...existing, ...addedBcc], eolOf(head))) };
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
export function eolOf(head: Buffer): string {
  const lf = head.indexOf(0x0a);
  return lf === -1 || head[lf - 1] === 0x0d ? '\r\n' : '\n';
}

/** The header section with `field` (ending with its line break) added last, before the blank line that ends it. */
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

/** `Bcc: a, b, ...` folded at 78 characters where the addresses allow it (RFC 5322 2.1.1), ending with a line break. */
function foldedBcc(addresses: readonly string[], eol: string): string {
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

function headersNameOthers(addresses: string[], maxRecipients: number): EmlApiError {
  const named = addresses.slice(0, NAMED).join(', ');
  const more = addresses.length > NAMED ? ` and ${addresses.length - NAMED} more` : '';
  const limit = Number.isFinite(maxRecipients) ? ` (now ${maxRecipients})` : '';
  // What to change comes first: a reply is cut short past its length, and the addresses may be long.
  return new EmlApiError(
    'EENVELOPE',
    'The headers name recipients that are not in this transaction, which the email service would mail too, as ' +
      "when a sender splits a message into several transactions: set Postfix's smtp_destination_recipient_limit " +
      `(default 50) and the relay's --max-recipients${limit} to the most recipients a message has; ` +
      `not in RCPT TO: ${named}${more}`,
    { command: 'envelope', permanent: true },
  );
}
