import { toApiAddress, toApiAddressList } from '../client/address-input.js';
import type { ApiAddress } from '../protocol/api-types.js';
import { imageFormat, type ImageInput, type TextContentInput } from '../client/content-input.js';
import { inputError } from '../client/input-error.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { JsonRoute } from './json-route.js';
import type { NodemailerMail } from './nodemailer-types.js';

/** Message data after Nodemailer's `normalize()`: contents resolved, attachments Base64 where they were bytes. */
interface NormalizedAttachment {
  filename?: string | false;
  cid?: string;
  contentType?: string;
  content?: string | Buffer;
  encoding?: string;
  path?: string;
  contentDisposition?: string;
}

/** What the JSON forms can carry, as client input. */
export interface JsonSendInput {
  from: ApiAddress;
  to: ApiAddress[];
  subject: string;
  textContent: TextContentInput;
}

// Fields a JSON send cannot carry, with how to name them in the error.
const UNSUPPORTED: [field: string, label: string][] = [
  ['cc', 'cc'],
  ['bcc', 'bcc'],
  ['replyTo', 'replyTo'],
  ['sender', 'sender'],
  ['inReplyTo', 'inReplyTo'],
  ['references', 'references'],
  ['list', 'list (List-* headers)'],
  ['icalEvent', 'icalEvent'],
  ['alternatives', 'alternatives'],
  ['amp', 'amp'],
  ['watchHtml', 'watchHtml'],
  ['envelope', 'envelope'],
  ['raw', 'raw'],
  ['messageId', 'messageId'],
  ['date', 'date'],
  ['xMailer', 'xMailer'],
];

/**
 * Turns a Nodemailer message into a JSON send (standard or group). Inline
 * `cid:` images become hosted `images` with `{{name}}` placeholders. Anything
 * the JSON forms cannot carry is refused, naming every such part: nothing is
 * dropped silently.
 *
 * @throws {EmlApiError} `EMESSAGE`
 */
export async function jsonSendFromMail(
  mail: NodemailerMail,
  route: JsonRoute,
  signal: AbortSignal,
): Promise<JsonSendInput> {
  const data = mail.data as Record<string, unknown>;
  const form = route.kind === 'group' ? `a group email (group "${route.groupId}")` : 'a tracked email (/v1/send/email)';
  const problems: string[] = [];
  for (const [field, label] of UNSUPPORTED) {
    if (present(data[field])) problems.push(label);
  }
  if (route.kind === 'group' && present(data.to)) problems.push('to (the recipients are the group members)');
  if (route.kind === 'email' && !present(data.to)) problems.push('no "to" recipient');
  if (data.priority !== undefined && String(data.priority).toLowerCase() !== 'normal') problems.push('priority');
  const headers = data.headers;
  const headerNames = Array.isArray(headers)
    ? headers.map((h: { key?: string }) => String(h.key))
    : typeof headers === 'object' && headers !== null
      ? Object.keys(headers)
      : [];
  if (headerNames.length > 0) problems.push(`custom headers (${headerNames.join(', ')})`);

  const normalized = await normalize(mail, signal);
  const attachments = (normalized.attachments as NormalizedAttachment[] | undefined) ?? [];
  const images: ImageInput[] = [];
  const cidNames = new Map<string, string>();
  for (const attachment of attachments) {
    const name = attachment.filename || attachment.cid || 'attachment';
    const format =
      imageFormat(attachment.contentType) ?? imageFormat(extensionOf(attachment.filename || attachment.path));
    if (!attachment.cid) {
      problems.push(`attachment "${name}" (only inline cid: images can be sent)`);
      continue;
    }
    if (!format) {
      problems.push(`inline attachment "${name}" (not a PNG, JPEG, GIF or WEBP image)`);
      continue;
    }
    const placeholder = uniqueName(attachment.cid, cidNames);
    cidNames.set(attachment.cid, placeholder);
    const content = attachment.content ?? '';
    const bytes = Buffer.isBuffer(content)
      ? content
      : Buffer.from(content, (attachment.encoding as BufferEncoding) || 'utf8');
    images.push({ name: placeholder, data: bytes, mimeType: format });
  }
  if (problems.length > 0) {
    throw inputError(
      `This message cannot be sent as ${form}: it has ${problems.join('; ')}. ` +
        'Remove those parts, or send without the group/tracking option to use the EML endpoint, which carries everything',
    );
  }
  const html = typeof normalized.html === 'string' ? replaceCidReferences(normalized.html, cidNames) : undefined;
  const text = typeof normalized.text === 'string' ? normalized.text : undefined;
  const subject = typeof data.subject === 'string' ? data.subject : '';
  if (!subject) throw inputError(`${capitalise(form)} needs a subject`);
  if (!present(data.from)) throw inputError(`${capitalise(form)} needs a from address`);
  const textContent: TextContentInput = {};
  if (html !== undefined) textContent.html = html;
  if (text !== undefined) textContent.text = text;
  if (images.length > 0) textContent.images = images;
  const tracking = route.kind === 'group' ? route.tracking : true;
  if (tracking !== undefined) textContent.tracking = tracking;
  return {
    from: toApiAddress(firstAddress(data.from), 'from'),
    to: route.kind === 'email' ? toApiAddressList(data.to, 'to') : [],
    subject,
    textContent,
  };
}

/**
 * Resolves the message's contents (streams, paths, URLs). Nodemailer cannot
 * stop a stalled source, so an abort (or the call's total timeout) rejects at
 * once and leaves the source to end on its own.
 */
function normalize(mail: NodemailerMail, signal: AbortSignal): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    mail.normalize((err, data) => {
      signal.removeEventListener('abort', onAbort);
      if (err)
        reject(
          new EmlApiError('EMESSAGE', `Could not read the message content: ${err.message}`, {
            cause: err,
            permanent: true,
          }),
        );
      else resolve(data as Record<string, unknown>);
    });
  });
}

function present(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === '') return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object' && !Buffer.isBuffer(value)) return Object.keys(value).length > 0;
  return true;
}

function firstAddress(value: unknown): unknown {
  return Array.isArray(value) ? value[0] : value;
}

function extensionOf(name: string | false | undefined): string | undefined {
  if (!name) return undefined;
  const dot = name.lastIndexOf('.');
  return dot === -1 ? undefined : name.slice(dot + 1);
}

/** A placeholder name the service accepts (letters, digits, _ - .), unique within the message. */
function uniqueName(cid: string, taken: Map<string, string>): string {
  const base = cid.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 56) || 'image';
  const used = new Set(taken.values());
  let name = base;
  for (let n = 2; used.has(name) || name === 'unsubscribe'; n++) name = `${base}_${n}`;
  return name;
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/**
 * Rewrites `cid:NAME` references to `{{placeholder}}` in one pass, matching
 * each reference whole (up to a quote, bracket or space), so `cid:logo` never
 * rewrites the start of `cid:logo2`. Unknown references stay as they are.
 */
function replaceCidReferences(html: string, placeholders: ReadonlyMap<string, string>): string {
  if (placeholders.size === 0) return html;
  return html.replace(/cid:([^\s"'<>()]+)/gi, (whole, cid: string) => {
    const placeholder = placeholders.get(cid);
    return placeholder === undefined ? whole : `{{${placeholder}}}`;
  });
}
