import type {} from 'nodemailer/lib/mailer';
import {
  toApiAddress,
  toApiAddressList,
  imageFormat,
  type ImageInput,
  type TextContentInput,
  inputError,
} from '../client/client-input.js';
import type { ApiAddress, SendKind } from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';
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
 * Turns a Nodemailer message into a JSON send: inline `cid:` images become hosted `images` with `{{name}}`
 * placeholders, and anything the JSON forms cannot carry is refused, naming every such part.
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

/** Resolves the contents (streams, paths, URLs); Nodemailer cannot stop a stalled source, so an abort rejects at once and leaves it. */
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

/** Rewrites each whole `cid:NAME` reference (up to a quote, bracket or space), so `cid:logo` never rewrites `cid:logo2`. */
function replaceCidReferences(html: string, placeholders: ReadonlyMap<string, string>): string {
  if (placeholders.size === 0) return html;
  return html.replace(/cid:([^\s"'<>()]+)/gi, (whole, cid: string) => {
    const placeholder = placeholders.get(cid);
    return placeholder === undefined ? whole : `{{${placeholder}}}`;
  });
}

/** Where a `sendMail` call goes: a group send, a tracked JSON email, or the built message as EML. */
export type SendRoute =
  | { kind: Extract<SendKind, 'group'>; groupId: string; tracking: boolean | undefined }
  | { kind: Extract<SendKind, 'email'> }
  | { kind: Extract<SendKind, 'eml'> };

export type JsonRoute = Exclude<SendRoute, { kind: 'eml' }>;

/** Reads `group` and `tracking` from the message data. @throws {EmlApiError} `EMESSAGE` when they have the wrong type */
export function sendRouteOf(data: Record<string, unknown>): SendRoute {
  const { group, tracking } = data;
  if (tracking !== undefined && typeof tracking !== 'boolean') {
    throw inputError('The tracking option must be true or false');
  }
  if (group !== undefined) {
    if (typeof group !== 'string' || group.length === 0)
      throw inputError('The group option must be a non-empty group id');
    return { kind: 'group', groupId: group, tracking };
  }
  return tracking === true ? { kind: 'email' } : { kind: 'eml' };
}

/**
 * The `sendMail` fields this transport adds, declared on Nodemailer's own message options type (Nodemailer 10's bundled
 * types and `@types/nodemailer`), so TypeScript accepts them without casts.
 * @example
 * await transporter.sendMail({ from, subject: 'Hi {{first_name}}', html, group: 'newsletter' });
 * await transporter.sendMail({ from, to, subject, html, tracking: true });
 * await transporter.sendMail({ raw, idempotencyKey: `receipt-${order.id}` });
 */
export interface EmlApiMailOptions {
  /** Send to every member of this group through `/v1/send/group/{group}`: no to/cc/bcc, headers or attachments but inline images. @default undefined */
  group?: string;
  /** Send through `/v1/send/email` with the service's tracking on (with `group`, for the group send). @default undefined */
  tracking?: boolean;
  /**
   * `Idempotency-Key` of this logical send (1 to 255 printable ASCII, no spaces): the service delivers a repeat under
   * the same key once and refuses a different request under it (`EAPI` 422 `idempotency_key_reused`). Nodemailer builds
   * anew on every `sendMail` (Date, boundaries, Message-ID), so a repeat is the same request only with `raw` or through
   * the outbox, which builds once.
   * @default a new random UUID per send
   */
  idempotencyKey?: string;
}

declare module 'nodemailer/lib/mailer' {
  // @types/nodemailer (Nodemailer 6 to 9): Mail.Options is a namespace member of `export =`.
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface Options extends EmlApiMailOptions {}
}

declare module 'nodemailer/lib/mailer/index.js' {
  // The same for ES module consumers of @types/nodemailer, where a directory import does not resolve.
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface Options extends EmlApiMailOptions {}
}

declare module 'nodemailer/lib/mailer/mail-message' {
  // Nodemailer 10's bundled types: sendMail takes SendMailOptions.
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface SendMailOptions extends EmlApiMailOptions {}
}
