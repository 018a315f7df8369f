// The envelope of a send through `/v1/send/eml`, where the service takes recipients from the To, Cc and Bcc headers:
// from Nodemailer's compiled message and, where its view cannot be trusted, from the built bytes.
import type { MailEnvelope, NodemailerMail } from './nodemailer-types.js';
import { parseAddressList, parseHeaderFields, isValidAddress } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/** Recipients and sender as the service will read them from the message's headers. */
export interface HeaderAddresses {
  from: string | false;
  recipients: string[];
  /** The Message-ID header as written, or undefined when there is none. */
  messageId: string | undefined;
}

/** Reads From and the To, Cc and Bcc recipients (deduplicated, in order) from a built message. */
export function readHeaderAddresses(eml: Buffer): HeaderAddresses {
  const seen = new Set<string>();
  const recipients: string[] = [];
  let from: string | false = false;
  let messageId: string | undefined;
  for (const field of parseHeaderFields(eml)) {
    const name = field.name.toLowerCase();
    if (name === 'message-id' && messageId === undefined) {
      messageId = field.value.trim() || undefined;
    } else if (name === 'from' && from === false) {
      from = parseAddressList(field.value)[0] ?? false;
    } else if (name === 'to' || name === 'cc' || name === 'bcc') {
      for (const address of parseAddressList(field.value)) {
        const key = address.toLowerCase();
        if (!seen.has(key)) {
          seen.add(key);
          recipients.push(address);
        }
      }
    }
  }
  return { from, recipients, messageId };
}

/**
 * Decides the envelope of an EML send. Recipients the caller gave that differ from the headers cannot be honoured and
 * are refused: a custom `envelope`, or `to`/`cc`/`bcc` with `raw` (Nodemailer's envelope, not the headers).
 * @param built the built message; its headers are read only when Nodemailer's own view cannot be trusted
 * @throws {EmlApiError} `EENVELOPE` when recipients differ or there are none; `EMESSAGE` without a From address
 */
export function resolveEnvelope(
  mail: NodemailerMail,
  built: { readonly head: Buffer },
): { envelope: MailEnvelope; fromDiffers: boolean; messageId: string | undefined } {
  const { data } = mail;
  const custom = data.envelope !== undefined && data.envelope !== null;
  const raw = Boolean(data.raw);
  const nodemailerEnvelope = mail.message.getEnvelope();
  if (!custom && !raw) {
    // Nodemailer wrote the headers from the data its envelope comes from: no need to read the bytes (the hot path).
    checkFrom(
      fromIsEnvelopeSender(mail.message)
        ? nodemailerEnvelope.from || undefined
        : firstAddress(mail.message.getAddresses().from),
    );
    if (nodemailerEnvelope.to.length === 0) throw noRecipients();
    return {
      envelope: { from: nodemailerEnvelope.from, to: [...nodemailerEnvelope.to] },
      fromDiffers: false,
      messageId: mail.message.messageId(),
    };
  }
  const headers = readHeaderAddresses(built.head);
  checkFrom(headers.from || undefined);
  if (headers.recipients.length === 0) throw noRecipients();
  const given = custom || (raw && (present(data.to) || present(data.cc) || present(data.bcc)));
  const envelope: MailEnvelope = given
    ? { from: nodemailerEnvelope.from, to: [...nodemailerEnvelope.to] }
    : // A raw message has no parsed headers in Nodemailer, so read them from the bytes.
      { from: nodemailerEnvelope.from || headers.from, to: headers.recipients };
  if (given) {
    const inHeaders = new Set(headers.recipients.map((a) => a.toLowerCase()));
    const inEnvelope = new Set(envelope.to.map((a) => a.toLowerCase()));
    const onlyEnvelope = envelope.to.filter((a) => !inHeaders.has(a.toLowerCase()));
    const onlyHeaders = headers.recipients.filter((a) => !inEnvelope.has(a.toLowerCase()));
    if (onlyEnvelope.length > 0 || onlyHeaders.length > 0) {
      const parts: string[] = [];
      const yours = custom ? 'in the envelope only' : 'in to/cc/bcc only';
      if (onlyEnvelope.length > 0) parts.push(`${yours}: ${onlyEnvelope.join(', ')}`);
      if (onlyHeaders.length > 0) parts.push(`in the headers only: ${onlyHeaders.join(', ')}`);
      const what = custom ? 'envelope recipients' : 'to/cc/bcc given with raw';
      const fix = custom
        ? 'put the recipients in to/cc/bcc (Bcc stays hidden from recipients) and drop the custom envelope'
        : 'put the recipients in the To/Cc/Bcc headers of the raw message and leave to/cc/bcc out';
      throw new EmlApiError(
        'EENVELOPE',
        `The ${what} differ from the To/Cc/Bcc headers of the message (${parts.join('; ')}). ` +
          `The EML endpoint delivers to the header recipients only, so these recipients cannot be honoured; ${fix}`,
        { command: 'envelope', permanent: true },
      );
    }
  }
  const fromDiffers =
    envelope.from !== false && headers.from !== false && envelope.from.toLowerCase() !== headers.from.toLowerCase();
  return { envelope, fromDiffers, messageId: headers.messageId };
}

function checkFrom(from: string | undefined): void {
  if (from === undefined || from === '') {
    throw new EmlApiError('EMESSAGE', 'The message has no From address; set from (the service needs one to send)', {
      command: 'envelope',
      permanent: true,
    });
  }
  if (!isValidAddress(from)) {
    throw new EmlApiError('EMESSAGE', `The From address ${JSON.stringify(from.slice(0, 100))} is not a valid address`, {
      command: 'envelope',
      permanent: true,
    });
  }
}

/**
 * Whether Nodemailer's envelope sender is the first From address, as with one From header and no Sender or Reply-To
 * (its fallbacks), which saves parsing every address header again.
 */
function fromIsEnvelopeSender(message: NodemailerMail['message']): boolean {
  const headers = (message as { _headers?: unknown })._headers;
  if (!Array.isArray(headers)) return false;
  let froms = 0;
  for (const { key } of headers as { key?: unknown }[]) {
    const name = typeof key === 'string' ? key.toLowerCase() : '';
    // A key spelled otherwise (a normalizeHeaderKey option) is one the envelope does not read.
    if (name === 'from' && key === 'From') froms++;
    else if (name === 'from' || name === 'sender' || name === 'reply-to') return false;
  }
  return froms === 1;
}

/** The address of the first entry of a parsed address header. */
function firstAddress(list: unknown): string | undefined {
  const first: unknown = Array.isArray(list) ? list[0] : undefined;
  if (typeof first === 'string') return first;
  const address = (first as { address?: unknown } | undefined)?.address;
  return typeof address === 'string' ? address : undefined;
}

function present(value: unknown): boolean {
  return value !== undefined && value !== null && value !== '' && !(Array.isArray(value) && value.length === 0);
}

function noRecipients(): EmlApiError {
  return new EmlApiError(
    'EENVELOPE',
    'No recipients defined: the message has no To, Cc or Bcc header, and the service takes recipients from them',
    { command: 'envelope', permanent: true },
  );
}
