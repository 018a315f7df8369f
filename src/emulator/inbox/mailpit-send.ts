import type { ApiAddress } from '../../protocol/api-types.js';
import { isValidAddress } from '../../protocol/message-format.js';
import { composeMessage, newMessageId, parseEml } from '../operations/send-operations.js';
import { HttpError } from '../operations/operation.js';
import type { EmulatorState } from '../state/emulator-state.js';
import type { InboxMessage } from '../state/mail-store.js';

/**
 * Mailpit's send API (`POST /api/v1/send`): a message given as JSON, built and put into the inbox as an SMTP client's
 * would be, so suites that seed mail with cypress-mailpit's `mailpitSendMail` or mailpit-api's `sendMessage` keep
 * working. Its checks and error texts are Mailpit's.
 */

/** A send Mailpit would refuse; its message is Mailpit's. */
export class SendRefused extends Error {
  override readonly name = 'SendRefused';
}

/** Headers the request may not set: the message's own (and X-Tags when the request has Tags). */
const RESTRICTED = ['to', 'from', 'cc', 'bcc', 'reply-to', 'date', 'subject', 'content-type', 'mime-version'];

/**
 * Builds the message of a send request and stores it.
 * @returns the stored inbox message
 * @throws {SendRefused} for a request Mailpit refuses
 */
export async function mailpitSend(state: EmulatorState, body: Record<string, unknown>): Promise<InboxMessage> {
  const fromField = fieldOf(body, 'from');
  const from = fromField === undefined || fromField === null ? undefined : person(fromField, 'From');
  const to = people(fieldOf(body, 'to'), 'To');
  const cc = people(fieldOf(body, 'cc'), 'Cc');
  const bcc = strings(fieldOf(body, 'bcc'), 'Bcc').map((email) => checked({ email }, 'Bcc'));
  const replyTo = people(fieldOf(body, 'replyto'), 'Reply-To');
  const tags = strings(fieldOf(body, 'tags'), 'Tags');
  const headers: Record<string, string> = tags.length > 0 ? { 'X-Tags': tags.join(', ') } : {};
  for (const [name, value] of Object.entries(object(fieldOf(body, 'headers'), 'Headers'))) {
    const lower = name.toLowerCase();
    if (RESTRICTED.includes(lower) || (lower === 'x-tags' && tags.length > 0))
      throw new SendRefused(`cannot overwrite header: "${name}"`);
    if (typeof value !== 'string') throw new SendRefused(`Headers: the value of "${name}" must be a string`);
    headers[name] = value;
  }
  const attachments = list(fieldOf(body, 'attachments'), 'Attachments').map((entry) => {
    const a = object(entry, 'Attachments');
    const filename = text(fieldOf(a, 'filename'), 'Attachments Filename');
    // A data: URL's prefix goes, as Mailpit takes what follows the last comma.
    const content = text(fieldOf(a, 'content'), 'Attachments Content').split(',').pop()!;
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(content) || content.length % 4 !== 0) {
      throw new SendRefused(`error decoding base64 attachment "${filename}": illegal base64 data`);
    }
    const contentType = text(fieldOf(a, 'contenttype'), 'Attachments ContentType');
    const cid = text(fieldOf(a, 'contentid'), 'Attachments ContentID');
    return {
      filename,
      content: Buffer.from(content, 'base64'),
      ...(contentType ? { contentType } : {}),
      ...(cid ? { cid } : {}),
    };
  });
  if (!from?.email) throw new SendRefused('error building message: from not set');
  if (to.length + cc.length + bcc.length === 0) {
    throw new SendRefused('error building message: no recipients (to, cc, bcc) set');
  }
  const html = text(fieldOf(body, 'html'), 'HTML');
  const raw = await composeMessage({
    from,
    to,
    cc,
    bcc,
    replyTo,
    subject: text(fieldOf(body, 'subject'), 'Subject'),
    text: text(fieldOf(body, 'text'), 'Text'),
    html: html || undefined,
    messageId: newMessageId(),
    date: state.now(),
    headers,
    attachments,
  });
  let parsed;
  try {
    parsed = await parseEml(raw);
  } catch (err) {
    if (err instanceof HttpError) throw new SendRefused(err.message);
    throw err;
  }
  state.mail.accept('/api/v1/send', raw, parsed, state.now());
  // Stored just now, in the same turn: the newest message.
  return state.mail.latest()!;
}

/** A field of a JSON object, its name matched case-insensitively as Go's decoder matches it. */
export function fieldOf(body: Record<string, unknown>, name: string): unknown {
  const key = Object.keys(body).find((k) => k.toLowerCase() === name);
  return key === undefined ? undefined : body[key];
}

function object(value: unknown, name: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new SendRefused(`${name} must be a JSON object`);
  return value as Record<string, unknown>;
}

function list(value: unknown, name: string): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new SendRefused(`${name} must be a JSON array`);
  return value;
}

function text(value: unknown, name: string): string {
  if (value === undefined || value === null) return '';
  if (typeof value !== 'string') throw new SendRefused(`${name} must be a string`);
  return value;
}

function strings(value: unknown, name: string): string[] {
  return list(value, name).map((v) => text(v, name));
}

function person(value: unknown, name: string): ApiAddress {
  const entry = object(value, name);
  const nameText = text(fieldOf(entry, 'name'), `${name} Name`);
  return { email: text(fieldOf(entry, 'email'), `${name} Email`), ...(nameText ? { name: nameText } : {}) };
}

function people(value: unknown, name: string): ApiAddress[] {
  return list(value, name).map((entry) => checked(person(entry, name), name));
}

function checked(address: ApiAddress, name: string): ApiAddress {
  if (!isValidAddress(address.email)) throw new SendRefused(`invalid ${name} address: ${address.email.slice(0, 200)}`);
  return address;
}
