import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  call,
  emulatorApi,
  expectAccepted,
  expectError,
  type GroupAccepted,
  groupEmail,
  mailBody,
} from '../helpers/emulator-api.js';

/**
 * How the emulator routes requests: unknown paths and methods, each endpoint
 * reached by its own path, and hostile paths and path parameters (dot segments,
 * encoded slashes, bad percent-encoding) that must never reach another route.
 */

const SEND_EML = '/v1/send/eml';
const GROUPS_KEY = 'k-groups';
const SENDER_KEY = 'k-sender';

let emu: Emulator;
const { api, post, copyOf, address } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({
    apiKeys: [
      { key: GROUPS_KEY, scopes: ['group:insert'] },
      { key: SENDER_KEY, scopes: ['sender'] },
    ],
  });
});

afterAll(() => emu.close());

describe('routing', () => {
  it('answers 404 not_found for unknown paths', async () => {
    for (const path of ['/v1/send/nothing', '/v2/send/eml', '/v1/send/eml/', '/v1/send', '/', '/V1/SEND/EML']) {
      expectError(await post(path, mailBody()), 404, 'not_found');
    }
  });

  it('answers 405 method_not_allowed with an Allow header for GET /v1/send/eml', async () => {
    const answer = await call(emu.url, SEND_EML, { method: 'GET', headers: { 'x-api-key': emu.apiKey } });
    expectError(answer, 405, 'method_not_allowed');
    expect(answer.headers['allow']).toBe('POST');
  });

  it('answers 405 method_not_allowed for PUT and DELETE on /v1/send/eml', async () => {
    for (const method of ['PUT', 'DELETE'] as const) {
      const answer = await call(emu.url, SEND_EML, {
        method,
        body: mailBody(),
        headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
      });
      expectError(answer, 405, 'method_not_allowed');
      expect(answer.headers['allow']).toBe('POST');
    }
  });

  it('serves a query string on /v1/send/eml like the bare path', async () => {
    expectAccepted(await post(`${SEND_EML}?debug=1`, mailBody()));
  });
});

describe('the other endpoints', () => {
  // CONTRACT.md: "sender" for /v1/send/email, "group.sender" for group sends,
  // "group:insert" for adds, "group:remove" for removes, any group scope for check.
  const others = [
    {
      method: 'POST',
      path: '/v1/send/email',
      body: JSON.stringify({
        to: [{ email: 'ann@example.test' }],
        from: { email: 'shop@example.test' },
        subject: 'Hi',
        textContent: { text: 'Hi' },
      }),
      key: GROUPS_KEY,
      scopes: ['sender'],
    },
    {
      method: 'POST',
      path: '/v1/send/group/x',
      body: JSON.stringify({ from: { email: 'shop@example.test' }, subject: 'Hi', textContent: { text: 'Hi' } }),
      key: SENDER_KEY,
      scopes: ['group.sender'],
    },
    {
      method: 'POST',
      path: '/v1/group/x',
      body: JSON.stringify({ entries: [{ email: 'ann@example.test' }], groupId: 'x' }),
      key: SENDER_KEY,
      scopes: ['group:insert'],
    },
    {
      method: 'DELETE',
      path: '/v1/group/x',
      body: JSON.stringify({ email: 'ann@example.test' }),
      key: SENDER_KEY,
      scopes: ['group:remove'],
    },
    {
      method: 'GET',
      path: '/v1/group/x/check/a%40b.test',
      body: undefined,
      key: SENDER_KEY,
      scopes: ['group:insert', 'group:remove', 'group.sender'],
    },
  ] as const;

  for (const other of others) {
    it(`answers 403 missing_scope for ${other.method} ${other.path} with a key lacking ${other.scopes.join(' / ')}`, async () => {
      const answer = await call(emu.url, other.path, {
        method: other.method,
        body: other.body,
        headers: { 'x-api-key': other.key, ...(other.body ? { 'content-type': 'application/json' } : {}) },
      });
      const message = expectError(answer, 403, 'missing_scope');
      for (const scope of other.scopes) expect(message).toContain(scope);
    });

    it(`routes ${other.method} ${other.path} to its own operation with the all-scopes key`, async () => {
      const answer = await call(emu.url, other.path, {
        method: other.method,
        body: other.body,
        headers: { 'x-api-key': emu.apiKey, ...(other.body ? { 'content-type': 'application/json' } : {}) },
      });
      // Not swallowed by /v1/send/eml, the router's 404 or a 405 (and never 5xx, checked in call()).
      expect(answer.status, answer.text).not.toBe(405);
      const code = (answer.json as { error?: { code?: string } }).error?.code;
      expect(code).not.toBe('not_found');
      expect(code).not.toBe('method_not_allowed');
      if (other.path === '/v1/send/email') {
        expect(answer.status, answer.text).toBe(202);
      } else {
        // Group "x" does not exist: CONTRACT.md answers 404 group_not_found.
        expect(code, answer.text).toBe('group_not_found');
      }
    });
  }
});

describe('hostile paths', () => {
  const headers = () => ({ 'x-api-key': emu.apiKey, 'content-type': 'application/json' });

  it('does not resolve dot segments: /v1/send/eml/../eml is not /v1/send/eml', async () => {
    const before = emu.messages().length;
    const answer = await call(emu.url, '/v1/send/eml/../eml', { raw: true, body: mailBody(), headers: headers() });
    expectError(answer, 404, 'not_found');
    expect(emu.messages()).toHaveLength(before);
  });

  it('does not decode %2E%2E into a dot segment: /v1/send/%2E%2E/eml', async () => {
    const before = emu.messages().length;
    for (const path of ['/v1/send/%2E%2E/eml', '/v1/send/eml/%2e%2e/eml', '/v1/send%2Feml', '/v1/send/eml%2F']) {
      const answer = await call(emu.url, path, { raw: true, body: mailBody(), headers: headers() });
      expectError(answer, 404, 'not_found');
    }
    expect(emu.messages()).toHaveLength(before);
  });

  it('keeps an encoded slash inside one path parameter: /v1/group/%2F/check/x', async () => {
    const answer = await call(emu.url, '/v1/group/%2F/check/x', { raw: true, method: 'GET', headers: headers() });
    expect(answer.status, answer.text).toBeGreaterThanOrEqual(400);
    expect(answer.status, answer.text).not.toBe(405);
    expect((answer.json as { error?: { code?: string } }).error?.code).not.toBe('not_found');
  });

  it('answers a 4xx JSON error for bad percent-encoding: /v1/group/%E0%A4%A/check/x', async () => {
    const answer = await call(emu.url, '/v1/group/%E0%A4%A/check/x', {
      raw: true,
      method: 'GET',
      headers: headers(),
    });
    expect([400, 404]).toContain(answer.status);
    expect((answer.json as { error?: { code?: unknown } }).error?.code).toEqual(expect.any(String));
  });

  it('never answers 5xx for odd paths', async () => {
    const paths = [
      '/v1/send/eml%00',
      '/v1/send/eml;x=1',
      '/v1/send//eml',
      '//v1/send/eml',
      '/v1/send/group/%E0%A4%A',
      '/v1/send/group/..',
      '/v1/group/%2E%2E',
      '/v1/group/x/check/%',
      '/v1/group/x/check/a%40b.test/extra',
      `/v1/send/${'a'.repeat(3000)}`,
    ];
    for (const path of paths) {
      const answer = await call(emu.url, path, { raw: true, body: mailBody(), headers: headers() });
      expect(answer.status, `${path.slice(0, 60)} -> ${answer.text}`).toBeGreaterThanOrEqual(400);
      expect(answer.status, `${path.slice(0, 60)} -> ${answer.text}`).toBeLessThan(500);
    }
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
