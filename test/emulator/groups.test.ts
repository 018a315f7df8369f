import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { simpleParser } from 'mailparser';
import { Client, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiScope } from '../../src/api-types.js';
import { startEmulator, type DeliveredMessage, type Emulator } from '../../src/emulator/index.js';

/**
 * Real HTTP requests against the emulator's group endpoints, standard sends,
 * unsubscribe pages and hosted images, checked against SERVICE-SPEC.md parts
 * 2, 3 and 5 and the decisions of ../shared/CONTRACT.md.
 */

const LOGO = readFileSync(fileURLToPath(new URL('../fixtures/logo.png', import.meta.url)));
const LOGO_SHA256 = createHash('sha256').update(LOGO).digest('hex');
/** The first bytes of a JFIF JPEG: not a PNG. */
const JPEG_BYTES = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00]);
/** Bytes that are no image format at all. */
const NOISE_BYTES = Buffer.from(Array.from({ length: 64 }, (_, i) => (i * 37 + 11) & 0xff));
const DAY_MS = 24 * 60 * 60 * 1000;

/** One key per scope, each holding exactly that scope. */
const SCOPE_KEYS: Record<ApiScope, string> = {
  sender: 'k-only-sender',
  'group.sender': 'k-only-group-sender',
  'group:insert': 'k-only-group-insert',
  'group:remove': 'k-only-group-remove',
};
const SCOPES = Object.keys(SCOPE_KEYS) as ApiScope[];
const FREE_KEY = 'k-free-senders';
const PLUS_KEY = 'k-plus-senders';

const FROM = { email: 'news@example.test', name: 'News' };

type Method = 'GET' | 'POST' | 'DELETE' | 'HEAD';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: unknown;
}

interface CallOptions {
  method?: Method;
  body?: string;
  headers?: Record<string, string>;
  /** Send the path as written (an undici Client does no URL parsing or dot-segment resolution). */
  raw?: boolean;
}

let emu: Emulator;

/** Checks what every API answer must have (JSON, never 5xx) and returns it parsed. */
function checkAnswer(status: number, headers: Answer['headers'], text: string): Answer {
  expect(headers['content-type'], `content-type of a ${status} answer`).toMatch(/^application\/json\b/);
  let json: unknown;
  expect(() => (json = JSON.parse(text)), `JSON body of a ${status} answer: ${text.slice(0, 200)}`).not.toThrow();
  expect(status, `unexpected 5xx answer: ${text.slice(0, 200)}`).toBeLessThan(500);
  return { status, headers, text, json };
}

async function call(base: string, path: string, options: CallOptions = {}): Promise<Answer> {
  const method = options.method ?? 'POST';
  if (options.raw) {
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

/** An API request to `emu` with a JSON body (when given) and a key (the all-scopes one by default). */
function api(
  method: Method,
  path: string,
  body?: unknown,
  key: string = emu.apiKey,
  options: { raw?: boolean; base?: string } = {},
): Promise<Answer> {
  return call(options.base ?? emu.url, path, {
    method,
    raw: options.raw,
    body: body === undefined ? undefined : JSON.stringify(body),
    headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
  });
}

/** Asserts an error answer and returns its message. */
function expectError(answer: Answer, status: number, code: string): string {
  expect(answer.status, answer.text).toBe(status);
  const body = answer.json as { error?: { code?: unknown; message?: unknown } };
  expect(body.error?.code, answer.text).toBe(code);
  expect(typeof body.error?.message, answer.text).toBe('string');
  expect((body.error?.message as string).length).toBeGreaterThan(0);
  return body.error?.message as string;
}

interface GroupAccepted {
  id: string;
  recipients: number;
  failed: number;
}

interface StandardAccepted {
  id: string;
  messageId: string;
  recipients: number;
}

interface AddAnswer {
  added: string[];
  skipped: { email: string; reason: string }[];
}

const groupPath = (groupId: string) => `/v1/group/${encodeURIComponent(groupId)}`;
const checkPath = (groupId: string, email: string) => `${groupPath(groupId)}/check/${encodeURIComponent(email)}`;
const sendGroupPath = (groupId: string) => `/v1/send/group/${encodeURIComponent(groupId)}`;

interface Entry {
  email: string;
  name?: string;
  substitutions?: Record<string, string>;
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

interface Content {
  html?: string;
  text?: string;
  tracking?: boolean;
  images?: { name: string; data: string; mimeType: string }[];
}

const groupEmail = (subject: string, textContent: Content) => ({ from: FROM, subject, textContent });

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

const standardEmail = (to: string[], subject: string, textContent: Content) => ({
  to: to.map((email) => ({ email })),
  from: FROM,
  subject,
  textContent,
});

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
function copyOf(address: string, sendId: string, target: Emulator = emu): DeliveredMessage {
  const copies = target.mailbox(address).filter((c) => c.messageRef === sendId);
  expect(copies, `copies of ${sendId} for ${address}`).toHaveLength(1);
  return copies[0]!;
}

/** Values of one header field in a raw message, unfolded (RFC 5322 section 2.2.3). */
function headerValues(raw: Buffer, name: string): string[] {
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

/** Unsubscribe links of `base` in a text. */
function unsubscribeLinks(text: string | undefined, base: string = emu.url): string[] {
  const re = new RegExp(`${escapeRegExp(base)}/unsubscribe/[A-Za-z0-9_-]+`, 'g');
  return (text ?? '').match(re) ?? [];
}

/** Hosted image URLs of `base` in a text. */
function imageUrls(text: string | undefined, base: string = emu.url): string[] {
  const re = new RegExp(`${escapeRegExp(base)}/images/[0-9a-f]{64}(?![0-9a-f])`, 'g');
  return (text ?? '').match(re) ?? [];
}

const b64 = (data: string | Buffer) => Buffer.from(data).toString('base64');
const logoImage = (mimeType = 'PNG', data: Buffer = LOGO) => ({ name: 'logo', data: b64(data), mimeType });

interface Page {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** A request to a public (no key) route; any content type. */
async function fetchPublic(url: string, method: Method = 'GET', body?: string, contentType?: string): Promise<Page> {
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
function expectHtmlPage(page: Page, status: number): string {
  const text = page.body.toString('utf8');
  expect(page.status, text.slice(0, 300)).toBe(status);
  expect(page.headers['content-type']).toMatch(/^text\/html\b/);
  expect(text).toMatch(/^<!doctype html>/i);
  expect(() => JSON.parse(text)).toThrow();
  return text;
}

let serial = 0;
/** A fresh address for one test, so mailboxes never mix. */
const address = (tag: string, domain = 'example.test') => `${tag}-${++serial}@${domain}`;
/** A fresh group, created as the dashboard would. */
function freshGroup(tag: string, target: Emulator = emu): string {
  const id = `${tag}-${++serial}`;
  target.createGroup(id);
  return id;
}

beforeAll(async () => {
  emu = await startEmulator({
    groups: ['newsletter'],
    apiKeys: [
      ...SCOPES.map((scope) => ({ key: SCOPE_KEYS[scope], scopes: [scope], plan: 'plus' as const })),
      { key: FREE_KEY, scopes: ['sender', 'group.sender'], plan: 'free' },
      { key: PLUS_KEY, scopes: ['sender', 'group.sender'], plan: 'plus' },
    ],
  });
});

afterAll(() => emu.close());

describe('group membership states (SERVICE-SPEC part 3)', () => {
  it('not a member -> add -> member, keeping the substitutions for personalised group emails', async () => {
    const group = freshGroup('state-add');
    const ann = address('ann');
    expect(await isMember(group, ann)).toBe(false);

    await addOk(group, [{ email: ann, name: 'Ann Example', substitutions: { '{{first_name}}': 'Ann' } }]);

    expect(await isMember(group, ann)).toBe(true);
    expect(emu.members(group)).toEqual([
      { email: ann, name: 'Ann Example', substitutions: { '{{first_name}}': 'Ann' } },
    ]);
    const sent = await sendGroupOk(group, 'Hello {{first_name}}', { text: 'Dear {{first_name}}' });
    expect(sent).toMatchObject({ recipients: 1, failed: 0 });
    const copy = copyOf(ann, sent.id);
    expect(copy.subject).toBe('Hello Ann');
    expect(copy.text).toBe('Dear Ann');
  });

  it('member -> remove -> not a member, answering 200 { removed: true }', async () => {
    const group = freshGroup('state-remove');
    const bob = address('bob');
    const stay = address('stay');
    await addOk(group, [{ email: bob }, { email: stay }]);

    const answer = await removeMember(group, bob);
    expect(answer.status, answer.text).toBe(200);
    expect(answer.json).toEqual({ removed: true });

    expect(await isMember(group, bob)).toBe(false);
    expect(await isMember(group, stay)).toBe(true);
    expect(emu.members(group).map((m) => m.email)).toEqual([stay]);
  });

  it('member -> a group email whose delivery fails (.invalid domain) -> not a member, counted in failed', async () => {
    const group = freshGroup('state-bounce');
    const good = address('good');
    const gone = address('gone', 'bounce.invalid');
    await addOk(group, [{ email: good }, { email: gone }]);

    const sent = await sendGroupOk(group, 'Monthly news', { text: 'News' });

    expect(sent.recipients).toBe(1);
    expect(sent.failed).toBe(1);
    expect(emu.members(group).map((m) => m.email)).toEqual([good]);
    expect(await isMember(group, gone)).toBe(false);
    expect(await isMember(group, good)).toBe(true);
    expect(emu.mailbox(gone)).toHaveLength(0);
    copyOf(good, sent.id);
    const record = emu.messages().find((m) => m.id === sent.id)!;
    expect(record.group).toBe(group);
    expect(record.failed).toEqual([gone]);

    // The next send no longer counts the removed member at all.
    const next = await sendGroupOk(group, 'More news', { text: 'News' });
    expect(next).toMatchObject({ recipients: 1, failed: 0 });
  });

  it('re-adding an existing member updates its name and substitutions without a duplicate', async () => {
    const group = freshGroup('state-readd');
    const cy = address('cy');
    const other = address('other');
    await addOk(group, [
      { email: cy, name: 'Cy Old', substitutions: { '{{first_name}}': 'Old', '{{city}}': 'Oslo' } },
      { email: other },
    ]);
    await addOk(group, [{ email: cy, name: 'Cy New', substitutions: { '{{first_name}}': 'New' } }]);

    expect(emu.members(group)).toEqual([
      { email: cy, name: 'Cy New', substitutions: { '{{first_name}}': 'New' } },
      { email: other, name: undefined, substitutions: {} },
    ]);
    const sent = await sendGroupOk(group, 'Hi {{first_name}} from {{city}}', { text: 'x' });
    expect(sent.recipients).toBe(2);
    expect(copyOf(cy, sent.id).subject).toBe('Hi New from {{city}}');
  });

  it('answers 404 not_a_member when removing an address that is not in the group', async () => {
    const group = freshGroup('state-notmember');
    const member = address('member');
    await addOk(group, [{ email: member }]);
    const message = expectError(await removeMember(group, address('stranger')), 404, 'not_a_member');
    expect(message.length).toBeGreaterThan(0);
    expect(emu.members(group).map((m) => m.email)).toEqual([member]);
  });

  it('answers the check endpoint with { member: true } or { member: false }', async () => {
    const group = freshGroup('state-check');
    const member = address('member');
    await addOk(group, [{ email: member }]);
    const yes = await api('GET', checkPath(group, member));
    expect(yes.status, yes.text).toBe(200);
    expect(yes.json).toEqual({ member: true });
    const no = await api('GET', checkPath(group, address('stranger')));
    expect(no.status, no.text).toBe(200);
    expect(no.json).toEqual({ member: false });
  });

  it('answers 404 group_not_found on every group endpoint for an unknown group', async () => {
    const unknown = 'no-such-group';
    expect(emu.groups()).not.toContain(unknown);
    const before = emu.messages().length;
    const answers = [
      await sendGroup(unknown, 'Hi', { text: 'Hi' }),
      await addMembers(unknown, [{ email: address('x') }]),
      await addMembers(unknown, [{ email: address('x') }], { onFailure: 'SKIP' }),
      await removeMember(unknown, address('x')),
      await api('GET', checkPath(unknown, address('x'))),
    ];
    for (const answer of answers) expect(expectError(answer, 404, 'group_not_found')).toContain(unknown);
    expect(emu.messages()).toHaveLength(before);
    expect(emu.groups()).not.toContain(unknown);
  });
});

describe('scopes (CONTRACT.md "Scopes")', () => {
  const group = 'scopes';
  const member = 'scope-member@example.test';
  let emlSerial = 0;

  beforeAll(async () => {
    emu.createGroup(group);
    await addOk(group, [{ email: member }]);
  });

  interface Endpoint {
    name: string;
    /** Scopes any one of which lets a key through. */
    needs: ApiScope[];
    okStatus: number;
    /** Prepares state (with the all-scopes key) and returns the request to make. */
    request(): Promise<{ method: Method; path: string; body?: unknown }>;
    /** What the refused request must not have changed. */
    unchanged?(): Promise<void>;
  }

  let addTarget = '';
  const removeTarget = 'scope-remove@example.test';
  const endpoints: Endpoint[] = [
    {
      name: 'POST /v1/send/eml',
      needs: ['sender'],
      okStatus: 202,
      request: () => {
        emlSerial += 1;
        const eml = [
          'From: news@example.test',
          'To: scope-eml@example.test',
          'Subject: Scope check',
          `Message-ID: <scope-${emlSerial}@example.test>`,
          '',
          'Hello',
        ].join('\r\n');
        return Promise.resolve({ method: 'POST', path: '/v1/send/eml', body: { mail: b64(eml) } });
      },
    },
    {
      name: 'POST /v1/send/email',
      needs: ['sender'],
      okStatus: 202,
      request: () =>
        Promise.resolve({
          method: 'POST',
          path: '/v1/send/email',
          body: standardEmail(['scope-std@example.test'], 'Scope check', { text: 'Hello' }),
        }),
    },
    {
      name: 'POST /v1/send/group/{id}',
      needs: ['group.sender'],
      okStatus: 202,
      request: () =>
        Promise.resolve({
          method: 'POST',
          path: sendGroupPath(group),
          body: groupEmail('Scope check', { text: 'Hello' }),
        }),
    },
    {
      name: 'POST /v1/group/{id}',
      needs: ['group:insert'],
      okStatus: 200,
      request: () => {
        addTarget = address('scope-add');
        return Promise.resolve({
          method: 'POST',
          path: groupPath(group),
          body: { entries: [{ email: addTarget }], groupId: group },
        });
      },
      unchanged: async () => expect(await isMember(group, addTarget)).toBe(false),
    },
    {
      name: 'DELETE /v1/group/{id}',
      needs: ['group:remove'],
      okStatus: 200,
      request: async () => {
        await addOk(group, [{ email: removeTarget }]);
        return { method: 'DELETE', path: groupPath(group), body: { email: removeTarget } };
      },
      unchanged: async () => expect(await isMember(group, removeTarget)).toBe(true),
    },
    {
      name: 'GET /v1/group/{id}/check/{email}',
      needs: ['group:insert', 'group:remove', 'group.sender'],
      okStatus: 200,
      request: () => Promise.resolve({ method: 'GET', path: checkPath(group, member) }),
    },
  ];

  for (const endpoint of endpoints) {
    for (const scope of SCOPES) {
      const allowed = endpoint.needs.includes(scope);
      const title = allowed
        ? `${endpoint.name} lets a key holding only "${scope}" through`
        : `${endpoint.name} refuses a key holding only "${scope}" with 403 missing_scope naming ${endpoint.needs.map((s) => `"${s}"`).join(' / ')}`;
      it(title, async () => {
        const req = await endpoint.request();
        const messagesBefore = emu.messages().length;
        const answer = await api(req.method, req.path, req.body, SCOPE_KEYS[scope]);
        if (allowed) {
          expect(answer.status, answer.text).toBe(endpoint.okStatus);
          if (endpoint.name.startsWith('DELETE')) {
            expect(answer.json).toEqual({ removed: true });
          }
          if (endpoint.name.startsWith('GET')) expect(answer.json).toEqual({ member: true });
          return;
        }
        const message = expectError(answer, 403, 'missing_scope');
        for (const needed of endpoint.needs) expect(message).toContain(needed);
        expect(emu.messages()).toHaveLength(messagesBefore);
        await endpoint.unchanged?.();
      });
    }
  }

  it('refuses a sender-only key on the check endpoint before looking the group up', async () => {
    const answer = await api('GET', checkPath('no-such-group', member), undefined, SCOPE_KEYS.sender);
    expectError(answer, 403, 'missing_scope');
  });
});

describe('the plus plan for embedded images', () => {
  const group = 'plan';
  const member = 'plan-member@example.test';
  const withImage: Content = { html: '<p><img src="{{logo}}"></p>', images: [logoImage()] };
  const withoutImage: Content = { html: '<p>No image</p>' };

  beforeAll(async () => {
    emu.createGroup(group);
    await addOk(group, [{ email: member }]);
  });

  it('answers 403 plan_required for textContent.images with a free-plan key on /v1/send/email', async () => {
    const before = emu.messages().length;
    const answer = await sendEmail(['plan-std@example.test'], 'Logo', withImage, FREE_KEY);
    expect(expectError(answer, 403, 'plan_required')).toMatch(/plus/i);
    expect(emu.messages()).toHaveLength(before);
    expect(emu.mailbox('plan-std@example.test')).toHaveLength(0);
  });

  it('answers 403 plan_required for textContent.images with a free-plan key on a group send', async () => {
    const before = emu.messages().length;
    const answer = await sendGroup(group, 'Logo', withImage, FREE_KEY);
    expect(expectError(answer, 403, 'plan_required')).toMatch(/plus/i);
    expect(emu.messages()).toHaveLength(before);
    expect(emu.mailbox(member)).toHaveLength(0);
  });

  it('accepts the same bodies without images from the free-plan key', async () => {
    const standard = await sendEmail(['plan-std@example.test'], 'No logo', withoutImage, FREE_KEY);
    expect(standard.status, standard.text).toBe(202);
    const grouped = await sendGroup(group, 'No logo', withoutImage, FREE_KEY);
    expect(grouped.status, grouped.text).toBe(202);
  });

  it('accepts images from a plus-plan key on both endpoints', async () => {
    const standard = await sendEmail(['plan-std@example.test'], 'Logo', withImage, PLUS_KEY);
    expect(standard.status, standard.text).toBe(202);
    const grouped = await sendGroup(group, 'Logo', withImage, PLUS_KEY);
    expect(grouped.status, grouped.text).toBe(202);
    expect(imageUrls(copyOf(member, (grouped.json as GroupAccepted).id).html)).toHaveLength(1);
  });
});

describe('substitutions', () => {
  it('answers 400 for a substitution key not written {{key}} (onFailure ABORT) and adds nothing', async () => {
    const group = freshGroup('subst-bare');
    const entries = [{ email: address('fine') }, { email: address('bare'), substitutions: { first_name: 'Ann' } }];
    for (const extra of [{}, { onFailure: 'ABORT' }]) {
      const message = expectError(await addMembers(group, entries, extra), 400, 'invalid_request');
      expect(message).toContain('first_name');
      expect(message).toContain('entries[1]');
    }
    expect(emu.members(group)).toEqual([]);
  });

  it('skips an entry with a bare substitution key under SKIP, with a reason naming the key', async () => {
    const group = freshGroup('subst-skip');
    const fine = address('fine');
    const bare = address('bare');
    const answer = await addMembers(
      group,
      [
        { email: fine, substitutions: { '{{first_name}}': 'Fay' } },
        { email: bare, substitutions: { first_name: 'Ann' } },
      ],
      { onFailure: 'SKIP' },
    );
    expect(answer.status, answer.text).toBe(200);
    const body = answer.json as AddAnswer;
    expect(body.added).toEqual([fine]);
    expect(body.skipped).toHaveLength(1);
    expect(body.skipped[0]!.email).toBe(bare);
    expect(body.skipped[0]!.reason).toContain('first_name');
    expect(emu.members(group)).toEqual([{ email: fine, name: undefined, substitutions: { '{{first_name}}': 'Fay' } }]);
  });

  describe('in a group email', () => {
    const group = 'subst-send';
    const ann = 'subst-ann@example.test';
    const bob = 'subst-bob@example.test';
    const cyd = 'subst-cyd@example.test';
    let sent: GroupAccepted;

    beforeAll(async () => {
      emu.createGroup(group);
      await addOk(group, [
        { email: ann, name: 'Ann', substitutions: { '{{first_name}}': 'Ann <b>', '{{plan}}': 'Gold & "Co"' } },
        { email: bob, name: 'Bob', substitutions: { '{{first_name}}': 'Bob' } },
        { email: cyd },
      ]);
      sent = await sendGroupOk(group, 'Hello {{first_name}}', {
        html: '<p>Hi {{first_name}}, plan {{plan}}</p><p><a href="{{unsubscribe}}">Unsubscribe</a></p>',
        text: 'Hi {{first_name}}, plan {{plan}}\nUnsubscribe: {{unsubscribe}}',
      });
    });

    it('answers 202 with one recipient per member', () => {
      expect(sent).toMatchObject({ recipients: 3, failed: 0 });
      for (const member of [ann, bob, cyd]) copyOf(member, sent.id);
    });

    it("replaces each member's placeholders in subject, html and text", async () => {
      const copy = copyOf(bob, sent.id);
      expect(copy.subject).toBe('Hello Bob');
      expect(copy.html).toContain('<p>Hi Bob, plan {{plan}}</p>');
      expect(copy.text).toContain('Hi Bob, plan {{plan}}');
      const parsed = await simpleParser(copy.raw);
      expect(parsed.subject).toBe('Hello Bob');
      expect(parsed.html || '').toContain('Hi Bob');
      expect(parsed.text).toContain('Hi Bob');
      expect([parsed.to ?? []].flat().flatMap((a) => a.value.map((v) => v.address))).toEqual([bob]);
    });

    it('keeps the literal placeholder for a member without that substitution', () => {
      const copy = copyOf(cyd, sent.id);
      expect(copy.subject).toBe('Hello {{first_name}}');
      expect(copy.html).toContain('Hi {{first_name}}, plan {{plan}}');
      expect(copy.text).toContain('Hi {{first_name}}, plan {{plan}}');
    });

    it('HTML-escapes values in html but not in text or subject', async () => {
      const copy = copyOf(ann, sent.id);
      expect(copy.html).toContain('<p>Hi Ann &lt;b&gt;, plan Gold &amp; &quot;Co&quot;</p>');
      expect(copy.html).not.toContain('Ann <b>');
      expect(copy.text).toContain('Hi Ann <b>, plan Gold & "Co"');
      expect(copy.subject).toBe('Hello Ann <b>');
      const parsed = await simpleParser(copy.raw);
      expect(parsed.subject).toBe('Hello Ann <b>');
      expect(parsed.html || '').toContain('Ann &lt;b&gt;');
      expect(parsed.html || '').not.toContain('Ann <b>');
    });

    it("replaces {{unsubscribe}} with the member's own link under the emulator's URL", () => {
      const links = [ann, bob, cyd].map((member) => {
        const copy = copyOf(member, sent.id);
        const inHtml = unsubscribeLinks(copy.html);
        const inText = unsubscribeLinks(copy.text);
        expect(inHtml, member).toHaveLength(1);
        expect(inText, member).toEqual(inHtml);
        expect(copy.html).not.toContain('{{unsubscribe}}');
        expect(copy.text).not.toContain('{{unsubscribe}}');
        return inHtml[0]!;
      });
      expect(new Set(links).size).toBe(3);
    });

    it('gives every copy List-Unsubscribe (its link and a mailto) and List-Unsubscribe-Post One-Click', async () => {
      for (const member of [ann, bob, cyd]) {
        const copy = copyOf(member, sent.id);
        const [link] = unsubscribeLinks(copy.text);
        const listUnsubscribe = headerValues(copy.raw, 'List-Unsubscribe');
        expect(listUnsubscribe, member).toHaveLength(1);
        expect(listUnsubscribe[0]).toContain(`<${link}>`);
        expect(listUnsubscribe[0]).toMatch(/<mailto:[^>]+>/);
        expect(headerValues(copy.raw, 'List-Unsubscribe-Post')).toEqual(['List-Unsubscribe=One-Click']);
        const parsed = await simpleParser(copy.raw);
        const list = parsed.headers.get('list') as { unsubscribe?: { url?: string; mail?: string } } | undefined;
        expect(list?.unsubscribe?.url, member).toBe(link);
        expect(list?.unsubscribe?.mail, member).toMatch(/@/);
      }
    });
  });
});

describe('add requests: SKIP and ABORT', () => {
  const batch = (valid: string[]) => [
    { email: valid[0]!, name: 'First' },
    { email: 'not-an-address', name: 'Broken' },
    { email: valid[1]!, name: 'Third' },
  ];

  it('adds nothing and answers 400 naming the bad entry when onFailure is omitted (ABORT is the default)', async () => {
    const group = freshGroup('abort-default');
    const answer = await addMembers(group, batch([address('one'), address('three')]));
    expect(expectError(answer, 400, 'invalid_address')).toContain('entries[1]');
    expect(emu.members(group)).toEqual([]);
  });

  it('adds nothing and answers 400 with onFailure ABORT', async () => {
    const group = freshGroup('abort');
    const existing = address('existing');
    await addOk(group, [{ email: existing }]);
    const answer = await addMembers(group, batch([address('one'), address('three')]), { onFailure: 'ABORT' });
    expect(expectError(answer, 400, 'invalid_address')).toContain('entries[1]');
    expect(emu.members(group).map((m) => m.email)).toEqual([existing]);
  });

  it('adds the valid entries and reports the others with onFailure SKIP', async () => {
    const group = freshGroup('skip');
    const one = address('one');
    const three = address('three');
    const answer = await addMembers(group, batch([one, three]), { onFailure: 'SKIP' });
    expect(answer.status, answer.text).toBe(200);
    expect(answer.json).toEqual({
      added: [one, three],
      skipped: [{ email: 'not-an-address', reason: expect.stringMatching(/\S/) }],
    });
    expect(emu.members(group)).toEqual([
      { email: one, name: 'First', substitutions: {} },
      { email: three, name: 'Third', substitutions: {} },
    ]);
  });

  it('answers 400 when the body groupId differs from the path, adding nothing', async () => {
    const group = freshGroup('mismatch');
    const answer = await addMembers(group, [{ email: address('one') }], { groupId: 'newsletter', onFailure: 'SKIP' });
    expect(expectError(answer, 400, 'invalid_request')).toContain('groupId');
    expect(emu.members(group)).toEqual([]);
    expect(emu.members('newsletter')).toEqual([]);
  });

  it('answers 400 for more than 1000 entries and accepts exactly 1000', async () => {
    const group = freshGroup('limit');
    const entries = (n: number) => Array.from({ length: n }, (_, i) => ({ email: `bulk-${i}@example.test` }));
    expectError(await addMembers(group, entries(1001), { onFailure: 'SKIP' }), 400, 'invalid_request');
    expect(emu.members(group)).toEqual([]);
    const ok = await addMembers(group, entries(1000));
    expect(ok.status, ok.text).toBe(200);
    expect((ok.json as AddAnswer).added).toHaveLength(1000);
    expect(emu.members(group)).toHaveLength(1000);
  });

  it('answers 400 for an onFailure value other than SKIP or ABORT', async () => {
    const group = freshGroup('onfailure');
    const answer = await addMembers(group, [{ email: address('one') }], { onFailure: 'IGNORE' });
    expect(expectError(answer, 400, 'invalid_request')).toContain('onFailure');
    expect(emu.members(group)).toEqual([]);
  });
});

describe('the hosted unsubscribe form', () => {
  const group = 'unsubscribe';
  const ann = 'unsub-ann@example.test';
  const bob = 'unsub-bob@example.test';
  const cyd = 'unsub-cyd@example.test';
  const links = new Map<string, string>();

  beforeAll(async () => {
    emu.createGroup(group);
    await addOk(group, [{ email: ann }, { email: bob }, { email: cyd }]);
    const sent = await sendGroupOk(group, 'News', { html: '<a href="{{unsubscribe}}">Unsubscribe</a>' });
    for (const member of [ann, bob, cyd]) {
      const [link] = unsubscribeLinks(copyOf(member, sent.id).html);
      expect(link, member).toBeDefined();
      links.set(member, link!);
    }
  });

  it('shows a confirmation form on GET without unsubscribing', async () => {
    const html = expectHtmlPage(await fetchPublic(links.get(ann)!), 200);
    expect(html).toMatch(/<form\b[^>]*method="post"/i);
    expect(html).toMatch(/<button\b[^>]*id="confirm"/);
    expect(html).toContain(ann);
    expect(await isMember(group, ann)).toBe(true);
  });

  it('removes the member when the form is confirmed (POST)', async () => {
    const page = await fetchPublic(links.get(ann)!, 'POST', '', 'application/x-www-form-urlencoded');
    expectHtmlPage(page, 200);
    expect(await isMember(group, ann)).toBe(false);
    expect(emu.members(group).map((m) => m.email)).not.toContain(ann);
    expect(emu.members(group).map((m) => m.email)).toEqual([bob, cyd]);
  });

  it('answers a used link with a 404 HTML page on GET and POST', async () => {
    expectHtmlPage(await fetchPublic(links.get(ann)!), 404);
    expectHtmlPage(await fetchPublic(links.get(ann)!, 'POST', '', 'application/x-www-form-urlencoded'), 404);
    expect(emu.members(group).map((m) => m.email)).toEqual([bob, cyd]);
  });

  it('answers an unknown or malformed token with a 404 HTML page', async () => {
    for (const token of ['AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'x', 'not.a.token', `${'a'.repeat(200)}`]) {
      const url = `${emu.url}/unsubscribe/${token}`;
      expectHtmlPage(await fetchPublic(url), 404);
      expectHtmlPage(
        await fetchPublic(url, 'POST', 'List-Unsubscribe=One-Click', 'application/x-www-form-urlencoded'),
        404,
      );
    }
    expect(emu.members(group).map((m) => m.email)).toEqual([bob, cyd]);
  });

  it('removes the member on an RFC 8058 one-click POST', async () => {
    const page = await fetchPublic(
      links.get(bob)!,
      'POST',
      'List-Unsubscribe=One-Click',
      'application/x-www-form-urlencoded',
    );
    expect(page.status, page.body.toString('utf8').slice(0, 200)).toBe(200);
    expect(await isMember(group, bob)).toBe(false);
    expect(emu.members(group).map((m) => m.email)).toEqual([cyd]);
  });

  it('says so, instead of claiming a removal, when the member was already removed another way', async () => {
    const removed = await removeMember(group, cyd);
    expect(removed.status).toBe(200);
    const html = expectHtmlPage(await fetchPublic(links.get(cyd)!), 200);
    expect(html).toContain('is no longer on the list');
    expect(html).not.toMatch(/id="confirm"/);
    // The link is retired: a second visit is the "not valid" page.
    expectHtmlPage(await fetchPublic(links.get(cyd)!), 404);
  });
});

describe('hosted images', () => {
  it('accepts an image name written in double braces, as the spec writes it', async () => {
    const to = address('img-braces');
    const answer = await sendEmail([to], 'Braces', {
      html: '<img src="{{logo}}">',
      images: [{ name: '{{logo}}', data: b64(LOGO), mimeType: 'PNG' }],
    });
    expect(answer.status).toBe(202);
    expect(emu.mailbox(to)[0]!.html).toContain(`${emu.url}/images/${LOGO_SHA256}`);
  });

  const imageHtml = '<p><img src="{{logo}}" alt="Logo"></p>';

  it('replaces {{logo}} in a standard send with a hosted URL that serves the PNG', async () => {
    const to = address('img-std');
    const sent = await sendEmailOk([to], 'Logo', { html: imageHtml, images: [logoImage()] });
    const html = copyOf(to, sent.id).html;
    const urls = imageUrls(html);
    expect(urls).toEqual([`${emu.url}/images/${LOGO_SHA256}`]);
    expect(html).toContain(`<img src="${urls[0]}" alt="Logo">`);
    expect(html).not.toContain('{{logo}}');

    const image = await fetchPublic(urls[0]!);
    expect(image.status).toBe(200);
    expect(image.headers['content-type']).toBe('image/png');
    expect(image.body.equals(LOGO)).toBe(true);

    const head = await fetchPublic(urls[0]!, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers['content-type']).toBe('image/png');
    expect(head.headers['content-length']).toBe(String(LOGO.length));
    expect(head.body).toHaveLength(0);
  });

  it('replaces {{logo}} in every copy of a group send with the same hosted URL', async () => {
    const group = freshGroup('img-group');
    const members = [address('img-a'), address('img-b')];
    await addOk(
      group,
      members.map((email) => ({ email })),
    );
    const sent = await sendGroupOk(group, 'Logo', { html: imageHtml, images: [logoImage()] });
    for (const member of members) {
      expect(imageUrls(copyOf(member, sent.id).html)).toEqual([`${emu.url}/images/${LOGO_SHA256}`]);
    }
    const image = await fetchPublic(`${emu.url}/images/${LOGO_SHA256}`);
    expect(image.status).toBe(200);
    expect(image.body.equals(LOGO)).toBe(true);
  });

  it('answers 400 when the data does not match the declared type', async () => {
    const group = freshGroup('img-bad');
    await addOk(group, [{ email: address('img-bad-member') }]);
    const before = emu.messages().length;
    for (const data of [JPEG_BYTES, NOISE_BYTES]) {
      const answer = await sendEmail([address('img-bad')], 'Bad', {
        html: imageHtml,
        images: [logoImage('PNG', data)],
      });
      expect(expectError(answer, 400, 'invalid_request')).toContain('textContent.images[0].data');
      const grouped = await sendGroup(group, 'Bad', { html: imageHtml, images: [logoImage('PNG', data)] });
      expect(expectError(grouped, 400, 'invalid_request')).toContain('textContent.images[0].data');
    }
    expect(emu.messages()).toHaveLength(before);
  });

  it('answers 400 for a lower-case mimeType such as "png"', async () => {
    const answer = await sendEmail([address('img-lower')], 'Lower', {
      html: imageHtml,
      images: [logoImage('png')],
    });
    expect(expectError(answer, 400, 'invalid_request')).toContain('mimeType');
  });

  it('answers 404 for an image that was never hosted, and refuses other methods', async () => {
    const missing = await fetchPublic(`${emu.url}/images/${'0'.repeat(64)}`);
    expect(missing.status).toBe(404);
    const notHex = await fetchPublic(`${emu.url}/images/${LOGO_SHA256.toUpperCase()}`);
    expect(notHex.status).toBe(404);
    const post = await fetchPublic(`${emu.url}/images/${LOGO_SHA256}`, 'POST', 'x', 'text/plain');
    expect(post.status).toBe(405);
  });

  describe('expiry, 180 days after the last use', () => {
    const start = new Date('2030-01-01T00:00:00Z');
    let clock = start;
    let timed: Emulator;
    const at = (days: number) => {
      clock = new Date(start.getTime() + days * DAY_MS);
    };

    beforeAll(async () => {
      timed = await startEmulator({ now: () => clock });
    });
    afterAll(() => timed.close());

    async function sendLogo(): Promise<string> {
      const to = address('img-clock');
      const answer = await api(
        'POST',
        '/v1/send/email',
        standardEmail([to], 'Logo', { html: imageHtml, images: [logoImage()] }),
        timed.apiKey,
        { base: timed.url },
      );
      expect(answer.status, answer.text).toBe(202);
      const [url] = imageUrls(copyOf(to, (answer.json as StandardAccepted).id, timed).html, timed.url);
      expect(url).toBe(`${timed.url}/images/${LOGO_SHA256}`);
      return url!;
    }

    it('serves the image at day 179 and answers 404 from day 180', async () => {
      timed.reset();
      at(0);
      const url = await sendLogo();
      at(179);
      expect((await fetchPublic(url)).status).toBe(200);
      expect((await fetchPublic(url, 'HEAD')).status).toBe(200);
      at(180);
      expect((await fetchPublic(url)).status).toBe(404);
      expect((await fetchPublic(url, 'HEAD')).status).toBe(404);
      at(181);
      expect((await fetchPublic(url)).status).toBe(404);
    });

    it('resets the expiry when the same image is sent again', async () => {
      timed.reset();
      at(0);
      const url = await sendLogo();
      at(100);
      expect(await sendLogo()).toBe(url);
      at(250);
      const served = await fetchPublic(url);
      expect(served.status).toBe(200);
      expect(served.body.equals(LOGO)).toBe(true);
      at(279);
      expect((await fetchPublic(url)).status).toBe(200);
      at(281);
      expect((await fetchPublic(url)).status).toBe(404);
    });

    it('hosts an expired image again when it is sent after expiry', async () => {
      timed.reset();
      at(0);
      const url = await sendLogo();
      at(200);
      expect((await fetchPublic(url)).status).toBe(404);
      expect(await sendLogo()).toBe(url);
      at(379);
      expect((await fetchPublic(url)).status).toBe(200);
      at(380);
      expect((await fetchPublic(url)).status).toBe(404);
    });
  });
});

describe('hostile path parameters', () => {
  const hostile = ['..', '.', '%2E%2E', '%2e', '%2F', 'a%2Fb', '%3F', '%23', 'caf%C3%A9', '%00', '%2E%2E%2Fsend%2Feml'];
  const badEncoding = ['%', '%C3', '%E0%A4%A', '%FF', '%zz'];

  beforeAll(() => {
    emu.createGroup('café/x');
  });

  /** The four group routes with a raw (unencoded-by-us) group segment. */
  const routes = (segment: string) =>
    [
      { method: 'POST', path: `/v1/send/group/${segment}`, body: groupEmail('Hostile', { text: 'Hi' }) },
      { method: 'POST', path: `/v1/group/${segment}`, body: { entries: [{ email: 'hostile@example.test' }] } },
      { method: 'DELETE', path: `/v1/group/${segment}`, body: { email: 'hostile@example.test' } },
      { method: 'GET', path: `/v1/group/${segment}/check/hostile%40example.test`, body: undefined },
    ] as const;

  it('answers 404 group_not_found for encoded, dot and control-character group ids on every group route', async () => {
    const before = emu.messages().length;
    for (const segment of hostile) {
      for (const route of routes(segment)) {
        const answer = await api(route.method, route.path, route.body, emu.apiKey, { raw: true });
        const where = `${route.method} ${route.path} -> ${answer.text}`;
        expect(answer.status, where).toBe(404);
        expect((answer.json as { error?: { code?: string } }).error?.code, where).toBe('group_not_found');
      }
    }
    expect(emu.messages()).toHaveLength(before);
    expect(emu.mailbox('hostile@example.test')).toHaveLength(0);
  });

  it('answers 400 (or 404 group_not_found) for invalid percent-encoding, never another route', async () => {
    for (const segment of badEncoding) {
      for (const route of routes(segment)) {
        const answer = await api(route.method, route.path, route.body, emu.apiKey, { raw: true });
        const where = `${route.method} ${route.path} -> ${answer.text}`;
        const code = (answer.json as { error?: { code?: string } }).error?.code;
        if (answer.status === 400) expect(code, where).toBe('invalid_request');
        else {
          expect(answer.status, where).toBe(404);
          expect(code, where).toBe('group_not_found');
        }
      }
    }
    expect(emu.mailbox('hostile@example.test')).toHaveLength(0);
  });

  it('reaches a group named "café/x" as /v1/group/caf%C3%A9%2Fx on every group route', async () => {
    const segment = 'caf%C3%A9%2Fx';
    expect(encodeURIComponent('café/x')).toBe(segment);
    const member = address('cafe');
    const raw = { raw: true };

    const added = await api(
      'POST',
      `/v1/group/${segment}`,
      { entries: [{ email: member }], groupId: 'café/x' },
      emu.apiKey,
      raw,
    );
    expect(added.status, added.text).toBe(200);
    expect(emu.members('café/x').map((m) => m.email)).toEqual([member]);

    const checked = await api(
      'GET',
      `/v1/group/${segment}/check/${encodeURIComponent(member)}`,
      undefined,
      emu.apiKey,
      raw,
    );
    expect(checked.json).toEqual({ member: true });

    const sent = await api('POST', `/v1/send/group/${segment}`, groupEmail('Café', { text: 'Hi' }), emu.apiKey, raw);
    expect(sent.status, sent.text).toBe(202);
    const copy = copyOf(member, (sent.json as GroupAccepted).id);
    expect(emu.messages().find((m) => m.id === copy.messageRef)?.group).toBe('café/x');

    const removed = await api('DELETE', `/v1/group/${segment}`, { email: member }, emu.apiKey, raw);
    expect(removed.json).toEqual({ removed: true });
    expect(emu.members('café/x')).toEqual([]);
    // Only the exact id matches: "café" alone is a different, unknown group.
    const cafe = await api(
      'GET',
      `/v1/group/caf%C3%A9/check/${encodeURIComponent(member)}`,
      undefined,
      emu.apiKey,
      raw,
    );
    expectError(cafe, 404, 'group_not_found');
  });
});

describe('programmatic API: reset, createGroup, members', () => {
  let local: Emulator;
  const insertKey = 'k-local-insert';

  beforeAll(async () => {
    local = await startEmulator({ groups: ['kept'], apiKeys: [{ key: insertKey, scopes: ['group:insert'] }] });
  });
  afterAll(() => local.close());

  it('reset() clears messages, mailboxes, members, images and unsubscribe links but keeps groups and keys', async () => {
    const opts = { base: local.url };
    const member = 'reset-member@example.test';
    local.createGroup('extra');
    const add = await api(
      'POST',
      groupPath('kept'),
      { entries: [{ email: member }], groupId: 'kept' },
      insertKey,
      opts,
    );
    expect(add.status, add.text).toBe(200);
    const sent = await api(
      'POST',
      sendGroupPath('kept'),
      groupEmail('Before reset', {
        html: '<img src="{{logo}}"><a href="{{unsubscribe}}">u</a>',
        images: [logoImage()],
      }),
      local.apiKey,
      opts,
    );
    expect(sent.status, sent.text).toBe(202);
    const [copy] = local.mailbox(member);
    const [imageUrl] = imageUrls(copy?.html, local.url);
    const [link] = unsubscribeLinks(copy?.html, local.url);
    expect((await fetchPublic(imageUrl!)).status).toBe(200);
    expect(local.messages()).toHaveLength(1);

    local.reset();

    expect(local.messages()).toEqual([]);
    expect(local.mailbox(member)).toEqual([]);
    expect(local.members('kept')).toEqual([]);
    expect((await fetchPublic(imageUrl!)).status).toBe(404);
    expectHtmlPage(await fetchPublic(link!), 404);
    expect(local.groups().sort()).toEqual(['extra', 'kept']);
    const again = await api(
      'POST',
      groupPath('kept'),
      { entries: [{ email: member }], groupId: 'kept' },
      insertKey,
      opts,
    );
    expect(again.status, again.text).toBe(200);
    expect(local.members('kept').map((m) => m.email)).toEqual([member]);
    local.reset();
  });

  it('createGroup() is idempotent and keeps the members of an existing group', async () => {
    const member = 'idem-group@example.test';
    local.createGroup('twice');
    const add = await api('POST', groupPath('twice'), { entries: [{ email: member }], groupId: 'twice' }, insertKey, {
      base: local.url,
    });
    expect(add.status, add.text).toBe(200);
    local.createGroup('twice');
    expect(local.groups().filter((g) => g === 'twice')).toHaveLength(1);
    expect(local.members('twice').map((m) => m.email)).toEqual([member]);
  });

  it('members() throws for a group that does not exist', () => {
    expect(() => local.members('never-created')).toThrow(/never-created/);
  });
});

describe('POST /v1/send/email', () => {
  it('sends one message with every recipient in To and delivers a copy to each', async () => {
    const to = [address('std-a'), address('std-b'), address('std-c')];
    const sent = await sendEmailOk(to, 'Together', { html: '<p>Hi all</p>', text: 'Hi all' });
    expect(sent.recipients).toBe(3);
    const records = emu.messages().filter((m) => m.id === sent.id);
    expect(records).toHaveLength(1);
    expect(records[0]!.recipients).toEqual(to);
    expect(records[0]!.messageId).toBe(sent.messageId);
    for (const recipient of to) {
      const copy = copyOf(recipient, sent.id);
      expect(copy.messageId).toBe(sent.messageId);
      const parsed = await simpleParser(copy.raw);
      expect([parsed.to ?? []].flat().flatMap((a) => a.value.map((v) => v.address))).toEqual(to);
      expect(parsed.subject).toBe('Together');
      expect(parsed.text?.trim()).toBe('Hi all');
    }
  });

  it('does not deliver to a .invalid recipient and records it in failed', async () => {
    const good = address('std-good');
    const bad = address('std-bad', 'nowhere.invalid');
    const sent = await sendEmailOk([good, bad], 'Partly', { text: 'Hi' });
    const record = emu.messages().find((m) => m.id === sent.id)!;
    expect(record.failed).toEqual([bad]);
    expect(record.recipients).toEqual([good]);
    expect(emu.mailbox(bad)).toHaveLength(0);
    copyOf(good, sent.id);
  });

  it('records tracking: true on the message, and false when absent', async () => {
    const on = await sendEmailOk([address('track-on')], 'Tracked', { html: '<p>x</p>', tracking: true });
    const off = await sendEmailOk([address('track-off')], 'Untracked', { html: '<p>x</p>' });
    expect(emu.messages().find((m) => m.id === on.id)?.tracking).toBe(true);
    expect(emu.messages().find((m) => m.id === off.id)?.tracking).toBe(false);
  });

  it('names the field in validation errors', async () => {
    const before = emu.messages().length;
    const badTo = await api('POST', '/v1/send/email', {
      ...standardEmail([address('v-ok')], 'Hi', { text: 'Hi' }),
      to: [{ email: address('v-ok') }, { email: 'broken@' }],
    });
    expect(expectError(badTo, 400, 'invalid_address')).toContain('to[1].email');

    const noBody = await sendEmail([address('v-ok')], 'Hi', {});
    const noBodyMessage = expectError(noBody, 400, 'invalid_request');
    expect(noBodyMessage).toContain('textContent');
    expect(noBodyMessage).toMatch(/html or text/);

    const newline = await sendEmail([address('v-ok')], 'Hi\r\nBcc: victim@example.test', { text: 'Hi' });
    expect(expectError(newline, 400, 'invalid_request')).toContain('subject');

    const noTo = await api('POST', '/v1/send/email', { ...standardEmail([], 'Hi', { text: 'Hi' }) });
    expect(expectError(noTo, 400, 'no_recipients')).toContain('to');

    const badFrom = await api('POST', '/v1/send/email', {
      ...standardEmail([address('v-ok')], 'Hi', { text: 'Hi' }),
      from: { email: 'nobody' },
    });
    expect(expectError(badFrom, 400, 'invalid_address')).toContain('from.email');

    const withTo = await api('POST', sendGroupPath('newsletter'), {
      ...groupEmail('Hi', { text: 'Hi' }),
      to: [{ email: address('v-ok') }],
    });
    expect(expectError(withTo, 400, 'invalid_request')).toContain('to');

    expect(emu.messages()).toHaveLength(before);
  });
});
