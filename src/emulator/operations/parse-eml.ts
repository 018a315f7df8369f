import type { AddressObject, EmailAddress } from 'mailparser';
import { parseMime } from './mime-parser.js';
import { findForbiddenCharacter, isValidAddress } from '../../protocol/address-rules.js';
import { parseHeaderFields } from '../../protocol/header-fields.js';
import type { ReadMessage } from '../state/records.js';
import { HttpError } from './http-error.js';

/** An uploaded message as the emulator reads it. */
export type ParsedEml = ReadMessage;

/** Header fields that hold addresses. */
const ADDRESS_FIELDS = new Set(['from', 'to', 'cc', 'bcc', 'sender', 'reply-to']);

/**
 * Parses an uploaded message with mailparser and checks what delivery needs:
 * header fields, a From address and at least one valid recipient.
 *
 * @throws {HttpError} 400 `invalid_eml`, `invalid_address` or `no_recipients`
 */
export async function parseEml(raw: Buffer): Promise<ParsedEml> {
  const fields = parseHeaderFields(raw);
  if (fields.length === 0) {
    throw new HttpError(
      400,
      'invalid_eml',
      'mail: the decoded message has no header fields; expected an RFC 5322 message',
    );
  }
  const fromFields = fields.filter((f) => f.name.toLowerCase() === 'from');
  if (fromFields.length === 0) {
    throw new HttpError(400, 'invalid_eml', 'mail: the message has no From header');
  }
  // Checked on the header text itself: the MIME parser would silently drop a NUL and deliver elsewhere.
  for (const field of fields) {
    if (!ADDRESS_FIELDS.has(field.name.toLowerCase())) continue;
    const bad = findForbiddenCharacter(field.value, { allowTab: true });
    if (bad) {
      throw new HttpError(
        400,
        'invalid_address',
        `mail: the ${field.name} header contains ${bad.what} at position ${bad.index}`,
      );
    }
  }
  let parsed;
  try {
    parsed = await parseMime(raw, { skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true });
  } catch (err) {
    throw new HttpError(400, 'invalid_eml', `mail: the message could not be parsed: ${(err as Error).message}`);
  }
  const fromList = flatten(parsed.from);
  const from = fromList[0]?.address;
  if (!from || !isValidAddress(from)) {
    throw new HttpError(
      400,
      'invalid_address',
      `mail: the From header has no valid address (${JSON.stringify(fromFields[0]!.value.slice(0, 100))})`,
    );
  }
  const recipients: string[] = [];
  const seen = new Set<string>();
  for (const [header, value] of [
    ['To', parsed.to],
    ['Cc', parsed.cc],
    ['Bcc', parsed.bcc],
  ] as const) {
    for (const entry of flatten(value)) {
      const address = entry.address ?? '';
      if (!isValidAddress(address)) {
        const shown = address || entry.name || '(empty)';
        throw new HttpError(
          400,
          'invalid_address',
          `mail: the ${header} header has an invalid address: ${JSON.stringify(shown.slice(0, 100))}`,
        );
      }
      const key = address.toLowerCase();
      if (!seen.has(key)) {
        seen.add(key);
        recipients.push(address);
      }
    }
  }
  if (recipients.length === 0) {
    throw new HttpError(400, 'no_recipients', 'mail: the message has no recipient in its To, Cc or Bcc headers');
  }
  return {
    from,
    recipients,
    subject: parsed.subject ?? '',
    messageId: parsed.messageId ?? '',
    text: parsed.text,
    html: typeof parsed.html === 'string' ? parsed.html : undefined,
    attachments: parsed.attachments.map((a) => ({
      filename: a.filename,
      contentType: a.contentType,
      size: a.size,
      cid: a.contentId?.replace(/^<|>$/g, ''),
      disposition: a.contentDisposition,
    })),
  };
}

function flatten(value: AddressObject | AddressObject[] | undefined): EmailAddress[] {
  if (!value) return [];
  const objects = Array.isArray(value) ? value : [value];
  const out: EmailAddress[] = [];
  const walk = (list: EmailAddress[]): void => {
    for (const entry of list) {
      if (entry.group) walk(entry.group);
      else out.push(entry);
    }
  };
  for (const object of objects) walk(object.value);
  return out;
}
