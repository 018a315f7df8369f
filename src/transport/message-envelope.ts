import { parseAddressList } from '../protocol/address-list.js';
import { parseHeaderFields } from '../protocol/header-fields.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { MailEnvelope, NodemailerMail } from './nodemailer-types.js';

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
 * Decides the envelope of a send through `/v1/send/eml`, where the service
 * takes recipients from the headers. A custom Nodemailer `envelope` whose
 * recipients differ from the headers cannot be honoured and is refused.
 *
 * @returns the envelope, whether its sender differs from the From header, and the message's Message-ID
 * @throws {EmlApiError} `EENVELOPE` when recipients differ or there are none
 */
export function resolveEnvelope(
  mail: NodemailerMail,
  eml: Buffer,
): { envelope: MailEnvelope; fromDiffers: boolean; messageId: string | undefined } {
  const custom = mail.data.envelope !== undefined && mail.data.envelope !== null;
  const nodemailerEnvelope = mail.message.getEnvelope();
  if (!custom && !mail.data.raw) {
    // Nodemailer wrote the headers from the same data its envelope comes from:
    // no need to read them back from the bytes (the common, hot path).
    if (nodemailerEnvelope.to.length === 0) throw noRecipients();
    return {
      envelope: { from: nodemailerEnvelope.from, to: [...nodemailerEnvelope.to] },
      fromDiffers: false,
      messageId: mail.message.messageId(),
    };
  }
  const headers = readHeaderAddresses(eml);
  const envelope: MailEnvelope = custom
    ? { from: nodemailerEnvelope.from, to: [...nodemailerEnvelope.to] }
    : // A raw message has no parsed headers in Nodemailer, so read them from the bytes.
      { from: nodemailerEnvelope.from || headers.from, to: headers.recipients };

  if (headers.recipients.length === 0) throw noRecipients();
  if (custom) {
    const inHeaders = new Set(headers.recipients.map((a) => a.toLowerCase()));
    const inEnvelope = new Set(envelope.to.map((a) => a.toLowerCase()));
    const onlyEnvelope = envelope.to.filter((a) => !inHeaders.has(a.toLowerCase()));
    const onlyHeaders = headers.recipients.filter((a) => !inEnvelope.has(a.toLowerCase()));
    if (onlyEnvelope.length > 0 || onlyHeaders.length > 0) {
      const parts: string[] = [];
      if (onlyEnvelope.length > 0) parts.push(`in the envelope only: ${onlyEnvelope.join(', ')}`);
      if (onlyHeaders.length > 0) parts.push(`in the headers only: ${onlyHeaders.join(', ')}`);
      throw new EmlApiError(
        'EENVELOPE',
        `The envelope recipients differ from the To/Cc/Bcc headers (${parts.join('; ')}). ` +
          'The EML endpoint delivers to the header recipients only, so this envelope cannot be honoured; ' +
          'put the recipients in to/cc/bcc (Bcc stays hidden from recipients) and drop the custom envelope',
        { command: 'envelope', permanent: true },
      );
    }
  }
  const fromDiffers =
    envelope.from !== false && headers.from !== false && envelope.from.toLowerCase() !== headers.from.toLowerCase();
  return { envelope, fromDiffers, messageId: headers.messageId };
}

function noRecipients(): EmlApiError {
  return new EmlApiError(
    'EENVELOPE',
    'No recipients defined: the message has no To, Cc or Bcc header, and the service takes recipients from them',
    { command: 'envelope', permanent: true },
  );
}
