import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { Client, request } from 'undici';
import { expect } from 'vitest';
import type { DeliveredMessage, Emulator } from '../../src/emulator/index.js';
import { FIXTURES } from './rich-message.js';

/**
 * Real HTTP requests to the emulator's API and public pages, and checks of
 * what every answer must have, shared by the test files of test/emulator/.
 * The requests that need an emulator come from {@link emulatorApi}.
 */

export type Method = 'GET' | 'POST' | 'DELETE' | 'HEAD' | 'PUT';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: unknown;
}

export interface CallOptions {
  method?: Method;
  body?: string | Readable;
  headers?: Record<string, string>;
  /** Send the path as written (no URL parsing, so no dot-segment or %2E%2E resolution). */
  raw?: boolean;
}

/**
 * Checks what every API answer must have (JSON content type, a parseable JSON
 * body, never 5xx) and returns it parsed.
 */
export function checkAnswer(status: number, headers: Answer['headers'], text: string): Answer {
  expect(headers['content-type'], `content-type of a ${status} answer`).toMatch(/^application\/json\b/);
  let json: unknown;
  expect(() => (json = JSON.parse(text)), `JSON body of a ${status} answer: ${text.slice(0, 200)}`).not.toThrow();
  expect(status, `unexpected 5xx answer: ${text.slice(0, 200)}`).toBeLessThan(500);
  return { status, headers, text, json };
}

/** An API request (POST unless told), its answer checked by {@link checkAnswer}. */
export async function call(base: string, path: string, options: CallOptions = {}): Promise<Answer> {
  const method = options.method ?? 'POST';
  if (options.raw) {
    // undici's request() parses the URL, which resolves "/../" and "%2E%2E";
    // a Client sends the path bytes unchanged.
    const client = new Client(base);
    try {
      const res = await client.request({ method, path, headers: options.headers, body: options.body });
      return checkAnswer(res.statusCode, res.headers, await res.body.text());
    } finally {
      await client.close();
    }
  }
  const res = await request(`${base}${path}`, { method, headers: options.headers, body: options.body });
  return checkAnswer(res.statusCode, res.headers, await res.body.text());
}

/** Asserts an error answer and returns its message. */
export function expectError(answer: Answer, status: number, code: string): string {
  expect(answer.status, answer.text).toBe(status);
  const body = answer.json as { error?: { code?: unknown; message?: unknown } };
  expect(body.error?.code, answer.text).toBe(code);
  expect(typeof body.error?.message, answer.text).toBe('string');
  expect((body.error?.message as string).length).toBeGreaterThan(0);
  return body.error?.message as string;
}

/** The answer of an accepted EML or standard send. */
export interface StandardAccepted {
  id: string;
  messageId: string;
  recipients: number;
}

/** Asserts a 202 answer with exactly { id, messageId, recipients } and returns it. */
export function expectAccepted(answer: Answer): StandardAccepted {
  expect(answer.status, answer.text).toBe(202);
  const body = answer.json as StandardAccepted;
  expect(Object.keys(body).sort()).toEqual(['id', 'messageId', 'recipients']);
  expect(typeof body.id).toBe('string');
  expect(body.id.length).toBeGreaterThan(0);
  expect(typeof body.messageId).toBe('string');
  expect(typeof body.recipients).toBe('number');
  return body;
}

export interface GroupAccepted {
  id: string;
  recipients: number;
  failed: number;
}

export interface AddAnswer {
  added: string[];
  skipped: { email: string; reason: string }[];
}

export interface Entry {
  email: string;
  name?: string;
  substitutions?: Record<string, string>;
}

export interface Content {
  html?: string;
  text?: string;
  tracking?: boolean;
  images?: { name: string; data: string; mimeType: string }[];
}

export const b64 = (data: string | Buffer): string => Buffer.from(data).toString('base64');

let emlCounter = 0;
/** A small EML message with a unique Message-ID; `extra` header lines replace the default To. */
export function eml(extra: string[] = ['To: ann@example.test'], body = 'Hello'): string {
  emlCounter += 1;
  return [
    'From: Shop <shop@example.test>',
    ...extra,
    `Subject: Test ${emlCounter}`,
    `Message-ID: <m${emlCounter}.${Date.now()}@example.test>`,
    '',
    body,
  ].join('\r\n');
}

/** JSON body of a send: `{ "mail": base64(eml) }`. */
export const mailBody = (text: string = eml()): string => JSON.stringify({ mail: b64(text) });

export const FROM = { email: 'news@example.test', name: 'News' };

export const groupPath = (groupId: string) => `/v1/group/${encodeURIComponent(groupId)}`;
export const checkPath = (groupId: string, email: string) => `${groupPath(groupId)}/check/${encodeURIComponent(email)}`;
export const sendGroupPath = (groupId: string) => `/v1/send/group/${encodeURIComponent(groupId)}`;

export const groupEmail = (subject: string, textContent: Content) => ({ from: FROM, subject, textContent });

export const standardEmail = (to: string[], subject: string, textContent: Content) => ({
  to: to.map((email) => ({ email })),
  from: FROM,
  subject,
  textContent,
});

/** Values of one header field in a raw message, unfolded (RFC 5322 section 2.2.3). */
export function headerValues(raw: Buffer, name: string): string[] {
  const text = raw.toString('utf8');
  const end = text.search(/\r?\n\r?\n/);
  const head = (end === -1 ? text : text.slice(0, end)).replace(/\r?\n(?=[ \t])/g, '');
  const prefix = `${name.toLowerCase()}:`;
  return head
    .split(/\r?\n/)
    .filter((line) => line.toLowerCase().startsWith(prefix))
    .map((line) => line.slice(prefix.length).trim());
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export const LOGO = readFileSync(`${FIXTURES}logo.png`);
export const LOGO_SHA256 = createHash('sha256').update(LOGO).digest('hex');
export const logoImage = (mimeType = 'PNG', data: Buffer = LOGO) => ({ name: 'logo', data: b64(data), mimeType });

export interface Page {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** A request to a public (no key) route; any content type. */
export async function fetchPublic(
  url: string,
  method: Method = 'GET',
  body?: string,
  contentType?: string,
): Promise<Page> {
  const res = await request(url, {
    method,
    body,
    headers: contentType ? { 'content-type': contentType } : {},
  });
  const data = Buffer.from(await res.body.arrayBuffer());
  expect(res.statusCode, `${method} ${url}: ${data.toString('utf8').slice(0, 200)}`).toBeLessThan(500);
  return { status: res.statusCode, headers: res.headers, body: data };
}

/** Asserts an HTML page (not JSON) with a status, and returns its text. */
export function expectHtmlPage(page: Page, status: number): string {
  const text = page.body.toString('utf8');
  expect(page.status, text.slice(0, 300)).toBe(status);
  expect(page.headers['content-type']).toMatch(/^text\/html\b/);
  expect(text).toMatch(/^<!doctype html>/i);
  expect(() => JSON.parse(text)).toThrow();
  return text;
}

/**
 * Requests to one emulator, which `target` returns (it is started in a
 * beforeAll, after this is called), with its all-scopes key unless another is
 * given.
 * @example
 * let emu: Emulator;
 * const { api, addOk, sendGroupOk, copyOf } = emulatorApi(() => emu);
 * beforeAll(async () => { emu = await startEmulator(); });
 */
export function emulatorApi(target: () => Emulator) {
  /** An API request with a JSON body (when given) and a key (the all-scopes one by default). */
  function api(
    method: Method,
    path: string,
    body?: unknown,
    key: string = target().apiKey,
    options: { raw?: boolean; base?: string } = {},
  ): Promise<Answer> {
    return call(options.base ?? target().url, path, {
      method,
      raw: options.raw,
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    });
  }

  /** POST with the all-scopes key and a JSON content type unless overridden. */
  function post(path: string, body?: string, headers: Record<string, string> = {}): Promise<Answer> {
    return call(target().url, path, {
      body,
      headers: { 'x-api-key': target().apiKey, 'content-type': 'application/json', ...headers },
    });
  }

  function addMembers(
    groupId: string,
    entries: unknown[],
    extra: { onFailure?: string; groupId?: string } = {},
    key?: string,
  ): Promise<Answer> {
    return api('POST', groupPath(groupId), { entries, groupId, ...extra }, key);
  }

  /** Adds members with the all-scopes key and expects all of them added. */
  async function addOk(groupId: string, entries: Entry[]): Promise<void> {
    const answer = await addMembers(groupId, entries);
    expect(answer.status, answer.text).toBe(200);
    expect(answer.json).toEqual({ added: entries.map((e) => e.email), skipped: [] });
  }

  function removeMember(groupId: string, email: string, key?: string): Promise<Answer> {
    return api('DELETE', groupPath(groupId), { email }, key);
  }

  async function isMember(groupId: string, email: string): Promise<boolean> {
    const answer = await api('GET', checkPath(groupId, email));
    expect(answer.status, answer.text).toBe(200);
    const body = answer.json as { member: unknown };
    expect(Object.keys(body)).toEqual(['member']);
    expect(typeof body.member).toBe('boolean');
    return body.member as boolean;
  }

  function sendGroup(groupId: string, subject: string, textContent: Content, key?: string): Promise<Answer> {
    return api('POST', sendGroupPath(groupId), groupEmail(subject, textContent), key);
  }

  async function sendGroupOk(groupId: string, subject: string, textContent: Content): Promise<GroupAccepted> {
    const answer = await sendGroup(groupId, subject, textContent);
    expect(answer.status, answer.text).toBe(202);
    const body = answer.json as GroupAccepted;
    expect(Object.keys(body).sort()).toEqual(['failed', 'id', 'recipients']);
    return body;
  }

  function sendEmail(to: string[], subject: string, textContent: Content, key?: string): Promise<Answer> {
    return api('POST', '/v1/send/email', standardEmail(to, subject, textContent), key);
  }

  async function sendEmailOk(to: string[], subject: string, textContent: Content): Promise<StandardAccepted> {
    const answer = await sendEmail(to, subject, textContent);
    expect(answer.status, answer.text).toBe(202);
    const body = answer.json as StandardAccepted;
    expect(Object.keys(body).sort()).toEqual(['id', 'messageId', 'recipients']);
    return body;
  }

  /** The one copy of a send (by its id) in an address's mailbox. */
  function copyOf(address: string, sendId: string, emu: Emulator = target()): DeliveredMessage {
    const copies = emu.mailbox(address).filter((c) => c.messageRef === sendId);
    expect(copies, `copies of ${sendId} for ${address}`).toHaveLength(1);
    return copies[0]!;
  }

  /** Unsubscribe links of `base` in a text. */
  function unsubscribeLinks(text: string | undefined, base: string = target().url): string[] {
    const re = new RegExp(`${escapeRegExp(base)}/unsubscribe/[A-Za-z0-9_-]+`, 'g');
    return (text ?? '').match(re) ?? [];
  }

  /** Hosted image URLs of `base` in a text. */
  function imageUrls(text: string | undefined, base: string = target().url): string[] {
    const re = new RegExp(`${escapeRegExp(base)}/images/[0-9a-f]{64}(?![0-9a-f])`, 'g');
    return (text ?? '').match(re) ?? [];
  }

  let serial = 0;
  /** A fresh address for one test, so mailboxes never mix. */
  const address = (tag: string, domain = 'example.test') => `${tag}-${++serial}@${domain}`;
  /** A fresh group, created as the dashboard would. */
  function freshGroup(tag: string, emu: Emulator = target()): string {
    const id = `${tag}-${++serial}`;
    emu.createGroup(id);
    return id;
  }

  return {
    api,
    post,
    addMembers,
    addOk,
    removeMember,
    isMember,
    sendGroup,
    sendGroupOk,
    sendEmail,
    sendEmailOk,
    copyOf,
    unsubscribeLinks,
    imageUrls,
    address,
    freshGroup,
  };
}
