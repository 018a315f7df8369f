import { randomUUID } from 'node:crypto';
import nodemailer from 'nodemailer';
import type { AddressObject, EmailAddress, ParsedMail, SimpleParserOptions } from 'mailparser';
import {
  API_PATHS,
  type SendAcceptedResponse,
  type GroupSendAcceptedResponse,
  stripBraces,
  type ApiAddress,
  type ApiImage,
  isPlaceholderKey,
  PLACEHOLDER_KEY_RULE,
  PLACEHOLDER_PATTERN,
} from '../../protocol/api-types.js';
import { HttpError, rejectUnknownFields, type Operation, requireGroup } from './operation.js';
import type { GroupMember, EmulatorState, KnownKey } from '../state/emulator-state.js';
import { escapeHtml } from '../../shared/escape-html.js';
import {
  addressProblem,
  base64Problem,
  compactBase64,
  displayNameProblem,
  findForbiddenCharacter,
  isValidAddress,
  parseHeaderFields,
} from '../../protocol/message-format.js';
import type { ReadMessage } from '../state/records.js';
import { requirePeer } from '../../shared/options-kit.js';

/**
 * `POST /v1/send/eml`: decodes the Base64 message, parses it, takes the recipients from To, Cc and Bcc and delivers one
 * copy to each deliverable one, without Bcc.
 */
export const sendEmlOperation: Operation = {
  scopes: ['sender'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const body = await ctx.json();
    rejectUnknownFields(body, ['mail']);
    if (body.mail === undefined) {
      throw new HttpError(400, 'invalid_request', 'mail is required: the complete EML message, Base64-encoded');
    }
    if (typeof body.mail !== 'string') {
      throw new HttpError(
        400,
        'invalid_request',
        `mail must be a string of Base64 text, got ${body.mail === null ? 'null' : typeof body.mail}`,
      );
    }
    let raw = decodeBase64Strict(body.mail, 'mail');
    const parsed = await parseEml(raw);
    if (!parsed.messageId) {
      // Like a real sending service, give a message without a Message-ID one.
      parsed.messageId = newMessageId();
      raw = Buffer.concat([Buffer.from(`Message-ID: ${parsed.messageId}\r\n`), raw]);
    }
    const failed = parsed.recipients.filter(isUndeliverable);
    const message = ctx.state.mail.accept(API_PATHS.sendEml, raw, parsed, ctx.now, failed);
    const answer: SendAcceptedResponse = {
      id: message.id,
      messageId: message.messageId,
      recipients: parsed.recipients.length,
    };
    return { status: 202, body: answer };
  },
};

/** Most recipients of one standard send. */
export const MAX_STANDARD_RECIPIENTS = 50;

/**
 * `POST /v1/send/email`: one message to the listed recipients, with hosted images (plus plan) and optional tracking.
 */
export const sendEmailOperation: Operation = {
  scopes: ['sender'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const body = await ctx.json();
    rejectUnknownFields(body, ['to', 'from', 'subject', 'textContent']);
    if (!Array.isArray(body.to) || body.to.length === 0) {
      throw new HttpError(400, 'no_recipients', 'to is required: an array of at least one { "email", "name" }');
    }
    if (body.to.length > MAX_STANDARD_RECIPIENTS) {
      throw new HttpError(
        400,
        'invalid_request',
        `to has ${body.to.length} recipients; at most ${MAX_STANDARD_RECIPIENTS}`,
      );
    }
    const to = body.to.map((entry, i) => validateAddress(entry, `to[${i}]`));
    const from = validateAddress(body.from, 'from');
    const subject = validateSubject(body.subject, 'subject');
    const content = validateTextContent(body.textContent, 'textContent');
    requirePlusForImages(ctx.key, content);

    const urls = hostImages(ctx.state, content, ctx.now);
    const rendered = renderContent(subject, content, urls);
    const messageId = newMessageId();
    const unique = [...new Map(to.map((a) => [a.email.toLowerCase(), a])).values()];
    const raw = await composeMessage({
      from,
      to: unique,
      subject: rendered.subject,
      html: rendered.html,
      text: rendered.text,
      messageId,
      date: ctx.now,
    });
    const id = `msg_${randomUUID()}`;
    const delivered = unique.filter((a) => !isUndeliverable(a.email));
    const failed = unique.filter((a) => isUndeliverable(a.email)).map((a) => a.email);
    ctx.state.mail.record({
      id,
      endpoint: API_PATHS.sendEmail,
      from: from.email,
      recipients: delivered.map((a) => a.email),
      subject: rendered.subject,
      messageId,
      raw,
      text: rendered.text,
      html: rendered.html,
      attachments: [],
      acceptedAt: ctx.now,
      tracking: content.tracking,
      failed,
    });
    ctx.state.mail.store(
      {
        messageRef: id,
        raw,
        recipients: delivered.map((a) => a.email),
        from: from.email,
        subject: rendered.subject,
        messageId,
        text: rendered.text,
        html: rendered.html,
        attachments: [],
      },
      ctx.now,
    );
    const answer: SendAcceptedResponse = { id, messageId, recipients: unique.length };
    return { status: 202, body: answer };
  },
};

/**
 * `POST /v1/send/group/{groupId}`: one personalised copy per member, with the member's substitutions, an unsubscribe
 * link and List-Unsubscribe headers. Members whose delivery fails are removed from the group.
 */
export const sendGroupOperation: Operation = {
  scopes: ['group.sender'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const [groupId] = ctx.params as [string];
    requireGroup(ctx.state, groupId);
    const body = await ctx.json();
    if ('to' in body)
      throw new HttpError(400, 'invalid_request', 'A group send has no "to": the recipients are the group members');
    rejectUnknownFields(body, ['from', 'subject', 'textContent']);
    const from = validateAddress(body.from, 'from');
    const subject = validateSubject(body.subject, 'subject');
    const content = validateTextContent(body.textContent, 'textContent');
    requirePlusForImages(ctx.key, content);

    const urls = hostImages(ctx.state, content, ctx.now);
    const members = ctx.state.groups.members(groupId)!;
    const id = `msg_${randomUUID()}`;
    const template = renderContent(subject, content, urls);
    const templateId = newMessageId();
    const delivered: string[] = [];
    const failed: string[] = [];
    const copies: {
      member: GroupMember;
      raw: Buffer;
      messageId: string;
      rendered: ReturnType<typeof renderContent>;
    }[] = [];
    for (const member of members) {
      if (isUndeliverable(member.email)) {
        // The spec: a failed delivery removes the address from the group.
        ctx.state.groups.remove(groupId, member.email);
        failed.push(member.email);
        continue;
      }
      const token = ctx.state.groups.issueUnsubscribeToken(groupId, member.email);
      const unsubscribeUrl = `${ctx.state.baseUrl}/unsubscribe/${token}`;
      const values = new Map<string, string>();
      for (const [key, value] of Object.entries(member.substitutions)) values.set(stripBraces(key), value);
      values.set('unsubscribe', unsubscribeUrl);
      for (const [name, url] of urls) values.set(name, url);
      const rendered = renderContent(subject, content, values);
      const messageId = newMessageId();
      const raw = await composeMessage({
        from,
        to: [{ email: member.email, ...(member.name ? { name: member.name } : {}) }],
        subject: rendered.subject,
        html: rendered.html,
        text: rendered.text,
        messageId,
        date: ctx.now,
        headers: {
          'List-Unsubscribe': `<${unsubscribeUrl}>, <mailto:unsubscribe@emulator.eml-api.test?subject=unsubscribe%20${token}>`,
          'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
          'X-Group-Id': groupId,
        },
      });
      copies.push({ member, raw, messageId, rendered });
      delivered.push(member.email);
    }
    const templateRaw = await composeMessage({
      from,
      to: [],
      subject: template.subject,
      html: template.html,
      text: template.text,
      messageId: templateId,
      date: ctx.now,
      headers: { 'X-Group-Id': groupId },
    });
    ctx.state.mail.record({
      id,
      endpoint: API_PATHS.sendGroup(groupId),
      from: from.email,
      recipients: delivered,
      subject: template.subject,
      messageId: templateId,
      raw: templateRaw,
      text: template.text,
      html: template.html,
      attachments: [],
      acceptedAt: ctx.now,
      group: groupId,
      tracking: content.tracking,
      failed,
    });
    for (const copy of copies) {
      ctx.state.mail.store(
        {
          messageRef: id,
          raw: copy.raw,
          recipients: [copy.member.email],
          from: from.email,
          subject: copy.rendered.subject,
          messageId: copy.messageId,
          text: copy.rendered.text,
          html: copy.rendered.html,
          attachments: [],
          group: groupId,
        },
        ctx.now,
      );
    }
    const answer: GroupSendAcceptedResponse = { id, recipients: delivered.length, failed: failed.length };
    return { status: 202, body: answer };
  },
};

/** What the emulator needs to build a message (one delivered copy of a JSON send). */
export interface ComposeInput {
  from: ApiAddress;
  to: ApiAddress[];
  cc?: ApiAddress[];
  /** Kept as a Bcc header, as the service's EML sends keep it. */
  bcc?: ApiAddress[];
  replyTo?: ApiAddress[];
  subject: string;
  html: string | undefined;
  text: string | undefined;
  messageId: string;
  date: Date;
  headers?: Record<string, string>;
  /** Files, inline when they have a `cid`. */
  attachments?: { filename: string; content: Buffer; contentType?: string; cid?: string }[];
}

// The emulator builds the MIME of JSON and group sends with Nodemailer itself
// (a peer dependency of this package), as a real service would with its own composer.
const composer = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' });

/** Builds an RFC 5322 message for one recipient. */
export async function composeMessage(input: ComposeInput): Promise<Buffer> {
  const addresses = (list: ApiAddress[] | undefined) => list?.map((a) => ({ name: a.name ?? '', address: a.email }));
  const info = await composer.sendMail({
    from: { name: input.from.name ?? '', address: input.from.email },
    to: addresses(input.to),
    cc: addresses(input.cc),
    bcc: addresses(input.bcc),
    replyTo: addresses(input.replyTo),
    attachments: input.attachments,
    subject: input.subject,
    html: input.html,
    text: input.text,
    messageId: input.messageId,
    date: input.date,
    headers: input.headers,
    disableFileAccess: true,
    disableUrlAccess: true,
  });
  return info.message as Buffer;
}

/** Subject, html and text of one message after placeholders were replaced. */
export interface RenderedContent {
  subject: string;
  html: string | undefined;
  text: string | undefined;
}

/**
 * Hosts the images of a send (resetting the expiry of ones already hosted).
 * @returns placeholder name → hosted image URL
 */
export function hostImages(state: EmulatorState, content: ValidTextContent, now: Date): Map<string, string> {
  const urls = new Map<string, string>();
  for (const image of content.images) {
    const sha = state.images.put(image.data, image.mimeType, now);
    urls.set(image.name, `${state.baseUrl}/images/${sha}`);
  }
  return urls;
}

/**
 * Replaces placeholders in subject, html and text. Values are HTML-escaped in html, so a member's name can never inject
 * markup.
 */
export function renderContent(
  subject: string,
  content: ValidTextContent,
  values: ReadonlyMap<string, string>,
): RenderedContent {
  const htmlValues = new Map<string, string>();
  for (const [k, v] of values) htmlValues.set(k, escapeHtml(v));
  return {
    // A substituted value must not be able to add header lines.
    subject: renderPlaceholders(subject, values).replace(/[\r\n]+/g, ' '),
    html: content.html === undefined ? undefined : renderPlaceholders(content.html, htmlValues),
    text: content.text === undefined ? undefined : renderPlaceholders(content.text, values),
  };
}

/** A new Message-ID in the emulator's own domain. */
export function newMessageId(): string {
  return `<${randomUUID()}@emulator.eml-api.test>`;
}

/** An embedded image after validation, with its bytes decoded. */
export interface ValidImage {
  name: string;
  data: Buffer;
  mimeType: ApiImage['mimeType'];
}

/** `textContent` after validation. */
export interface ValidTextContent {
  html: string | undefined;
  text: string | undefined;
  tracking: boolean;
  images: ValidImage[];
}

const IMAGE_TYPES: readonly ApiImage['mimeType'][] = ['PNG', 'JPEG', 'GIF', 'WEBP'];

const bad = (message: string, code: 'invalid_request' | 'invalid_address' = 'invalid_request') =>
  new HttpError(400, code, message);

/** Validates an address object `{ email, name? }` at `path`. */
export function validateAddress(value: unknown, path: string): ApiAddress {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`${path} must be an object { "email", "name" }`);
  }
  const o = value as Record<string, unknown>;
  rejectUnknownFields(o, ['email', 'name'], path);
  if (typeof o.email !== 'string') throw bad(`${path}.email is required and must be a string`);
  const problem = addressProblem(o.email);
  if (problem) throw bad(`${path}.email ${problem}: ${JSON.stringify(o.email.slice(0, 100))}`, 'invalid_address');
  if (o.name !== undefined && typeof o.name !== 'string') throw bad(`${path}.name must be a string`);
  const nameProblem = o.name === undefined ? undefined : displayNameProblem(o.name);
  if (nameProblem) throw bad(`${path}.name ${nameProblem}`, 'invalid_address');
  return o.name === undefined ? { email: o.email } : { email: o.email, name: o.name };
}

/** Validates a required non-empty single-line string at `path`. */
export function validateSubject(value: unknown, path: string): string {
  if (typeof value !== 'string' || value.length === 0) throw bad(`${path} is required and must be a non-empty string`);
  if (/[\r\n]/.test(value)) throw bad(`${path} must not contain line breaks`);
  return value;
}

/** Validates `textContent` (html and/or text, tracking, images). */
export function validateTextContent(value: unknown, path: string): ValidTextContent {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`${path} is required and must be an object { "html", "text", "tracking", "images" }`);
  }
  const o = value as Record<string, unknown>;
  rejectUnknownFields(o, ['html', 'text', 'tracking', 'images'], path);
  for (const key of ['html', 'text'] as const) {
    if (o[key] !== undefined && typeof o[key] !== 'string') throw bad(`${path}.${key} must be a string`);
  }
  if (!o.html && !o.text) throw bad(`${path} needs html or text`);
  if (o.tracking !== undefined && typeof o.tracking !== 'boolean') throw bad(`${path}.tracking must be true or false`);
  if (o.images !== undefined && !Array.isArray(o.images)) throw bad(`${path}.images must be an array`);
  const images = ((o.images as unknown[] | undefined) ?? []).map((image, i) =>
    validateImage(image, `${path}.images[${i}]`),
  );
  const names = new Set<string>();
  for (const image of images) {
    if (names.has(image.name)) throw bad(`${path}.images has two images named "${image.name}"`);
    names.add(image.name);
  }
  return {
    html: o.html as string | undefined,
    text: o.text as string | undefined,
    tracking: o.tracking === true,
    images,
  };
}

function validateImage(value: unknown, path: string): ValidImage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`${path} must be an object { "name", "data", "mimeType" }`);
  }
  const o = value as Record<string, unknown>;
  rejectUnknownFields(o, ['name', 'data', 'mimeType'], path);
  // The spec writes image names in double braces; the bare name is accepted too.
  const name = typeof o.name === 'string' ? stripBraces(o.name) : undefined;
  if (name === undefined || !isPlaceholderKey(name)) {
    throw bad(`${path}.name must be ${PLACEHOLDER_KEY_RULE}, optionally written {{name}}`);
  }
  if (name === 'unsubscribe') throw bad(`${path}.name "unsubscribe" is reserved for the unsubscribe link`);
  if (typeof o.mimeType !== 'string' || !IMAGE_TYPES.includes(o.mimeType as ApiImage['mimeType'])) {
    throw bad(`${path}.mimeType must be one of ${IMAGE_TYPES.join(', ')} (upper case)`);
  }
  if (typeof o.data !== 'string') throw bad(`${path}.data must be a Base64 string`);
  const data = decodeBase64Strict(o.data, `${path}.data`);
  const mimeType = o.mimeType as ApiImage['mimeType'];
  if (!hasSignature(data, mimeType))
    throw bad(`${path}.data is not a ${mimeType} image (its first bytes do not match)`);
  return { name, data, mimeType };
}

function hasSignature(data: Buffer, type: ApiImage['mimeType']): boolean {
  switch (type) {
    case 'PNG':
      return data.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    case 'JPEG':
      return data[0] === 0xff && data[1] === 0xd8 && data[2] === 0xff;
    case 'GIF':
      return data.subarray(0, 4).toString('latin1') === 'GIF8';
    case 'WEBP':
      return data.subarray(0, 4).toString('latin1') === 'RIFF' && data.subarray(8, 12).toString('latin1') === 'WEBP';
  }
}

/**
 * Embedded (hosted) images need the plus plan.
 * @throws {HttpError} 403 `plan_required`
 */
export function requirePlusForImages(key: KnownKey, content: ValidTextContent): void {
  if (content.images.length > 0 && key.plan !== 'plus') {
    throw new HttpError(403, 'plan_required', 'textContent.images needs the plus plan; this key is on the free plan');
  }
}

/**
 * Replaces `{{key}}` placeholders in one pass, so a substituted value that itself contains braces is never expanded
 * again. Unknown placeholders stay.
 * @param values keyed by bare name (`first_name`, `unsubscribe`, `logo`)
 * @param escape applied to substituted values (HTML escaping for html bodies)
 */
export function renderPlaceholders(
  template: string,
  values: ReadonlyMap<string, string>,
  escape = (v: string) => v,
): string {
  return template.replace(PLACEHOLDER_PATTERN, (whole, key: string) => {
    const value = values.get(key);
    return value === undefined ? whole : escape(value);
  });
}

/**
 * Decodes standard Base64 by the wire contract's rule (padded; line breaks and spaces allowed). Anything else is
 * refused, because Node's decoder would silently skip it and deliver a corrupted message.
 * @throws {HttpError} 400 `invalid_base64` naming the field
 */
export function decodeBase64Strict(value: string, field: string): Buffer {
  const compact = compactBase64(value);
  if (compact.length === 0) {
    throw new HttpError(400, 'invalid_base64', `${field} is empty; expected the Base64-encoded message`);
  }
  const problem = base64Problem(compact);
  if (problem !== undefined) throw new HttpError(400, 'invalid_base64', `${field} is not valid Base64: ${problem}`);
  return Buffer.from(compact, 'base64');
}

/** An uploaded message as the emulator reads it. */
export type ParsedEml = ReadMessage;

/** Header fields that hold addresses. */
const ADDRESS_FIELDS = new Set(['from', 'to', 'cc', 'bcc', 'sender', 'reply-to']);

/**
 * Parses an uploaded message with mailparser and checks what delivery needs: header fields, a From address and at least
 * one valid recipient.
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

type SimpleParser = (source: Buffer, options?: SimpleParserOptions) => Promise<ParsedMail>;

let simpleParser: SimpleParser | undefined;

/**
 * Loads mailparser, the MIME parser the emulator reads messages with. It is an optional peer dependency: an app that
 * only sends installs no MIME parser.
 * @throws {EmlApiError} `ECONFIG` saying what to install when it is missing
 */
export function loadMimeParser(): SimpleParser {
  simpleParser ??= requirePeer<{ simpleParser: SimpleParser }>(
    'mailparser',
    '--save-dev mailparser',
    'The emulator',
  ).simpleParser;
  return simpleParser;
}

/** Parses a whole message (or just its header section) with mailparser. */
export function parseMime(source: Buffer, options?: SimpleParserOptions): Promise<ParsedMail> {
  return loadMimeParser()(source, options);
}

/**
 * Whether delivery to an address fails. Domains ending in `.invalid` (reserved by RFC 2606) are undeliverable, so tests
 * can trigger failures on purpose.
 */
export function isUndeliverable(address: string): boolean {
  const domain = address.slice(address.lastIndexOf('@') + 1).toLowerCase();
  return domain === 'invalid' || domain.endsWith('.invalid');
}
