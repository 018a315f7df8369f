import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type ApiScope, type Emulator } from '../../src/emulator/index.js';
import {
  b64,
  checkPath,
  emulatorApi,
  expectError,
  groupEmail,
  groupPath,
  type Method,
  sendGroupPath,
  standardEmail,
} from '../helpers/emulator-api.js';

/**
 * Which scope each endpoint needs: every endpoint with a key holding exactly
 * one scope, per ../shared/CONTRACT.md "Scopes".
 */

/** One key per scope, each holding exactly that scope. */
const SCOPE_KEYS: Record<ApiScope, string> = {
  sender: 'k-only-sender',
  'group.sender': 'k-only-group-sender',
  'group:insert': 'k-only-group-insert',
  'group:remove': 'k-only-group-remove',
};
const SCOPES = Object.keys(SCOPE_KEYS) as ApiScope[];

let emu: Emulator;
const { api, addOk, isMember, address } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({
    apiKeys: SCOPES.map((scope) => ({ key: SCOPE_KEYS[scope], scopes: [scope], plan: 'plus' as const })),
  });
});

afterAll(() => emu.close());

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
