import { rejectionOf } from '../helpers/async.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiError } from '../../src/index.js';
import { encodePathSegment } from '../../src/protocol/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';

const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
  'base64',
);

describe('EmlApiClient against the emulator', () => {
  let emu: Emulator;
  let client: EmlApiClient;
  beforeAll(async () => {
    emu = await startEmulator({
      groups: ['newsletter'],
      apiKeys: [{ key: 'k-free', scopes: ['sender', 'group.sender'], plan: 'free' }],
    });
    client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
  });
  beforeEach(() => emu.reset());
  afterAll(async () => {
    await client.close();
    await emu.close();
  });

  it('adds members given in every address form, converting them to { email, name }', async () => {
    const result = await client.addToGroup('newsletter', [
      'Ann Example <ann@example.test>',
      '"Doe, Jane" <jane@example.test>',
      'carl@example.test',
      { name: 'Dora', address: 'dora@example.test' },
      { email: 'eve@example.test', name: 'Eve' },
    ]);
    expect(result).toEqual({
      added: ['ann@example.test', 'jane@example.test', 'carl@example.test', 'dora@example.test', 'eve@example.test'],
      skipped: [],
      batches: 1,
    });
    expect(emu.members('newsletter').map((m) => [m.email, m.name])).toEqual([
      ['ann@example.test', 'Ann Example'],
      ['jane@example.test', 'Doe, Jane'],
      ['carl@example.test', undefined],
      ['dora@example.test', 'Dora'],
      ['eve@example.test', 'Eve'],
    ]);
  });

  it('sends substitution keys as {{key}} whether given with or without braces', async () => {
    await client.addToGroup('newsletter', [
      {
        email: 'ann@example.test',
        substitutions: { first_name: 'Ann', '{{city}}': 'Graz', ' {{ plan }} ': 'gold', n: 3 },
      },
    ]);
    expect(emu.members('newsletter')[0]!.substitutions).toEqual({
      '{{first_name}}': 'Ann',
      '{{city}}': 'Graz',
      '{{plan}}': 'gold',
      '{{n}}': '3',
    });
    await client.sendToGroup('newsletter', {
      from: 'news@example.test',
      subject: 'Hi {{first_name}} from {{city}}',
      textContent: { text: '{{plan}} member #{{n}}' },
    });
    const [copy] = emu.mailbox('ann@example.test');
    expect(copy!.subject).toBe('Hi Ann from Graz');
    expect(copy!.text).toContain('gold member #3');
  });

  it('rejects a bad entry before any request with ABORT, and reports it as skipped with SKIP', async () => {
    const members = ['ok@example.test', 'not an address', 'fine@example.test'];
    const err = await client.addToGroup('newsletter', members).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'EMESSAGE' });
    expect((err as Error).message).toContain('members[1]');
    expect(emu.members('newsletter')).toEqual([]);

    const skipped = await client.addToGroup('newsletter', members, { onFailure: 'SKIP' });
    expect(skipped.added).toEqual(['ok@example.test', 'fine@example.test']);
    expect(skipped.skipped).toEqual([
      { email: 'not an address', reason: expect.stringContaining('not a valid email address') },
    ]);
  });

  it('sends large lists in batches and reports every entry', async () => {
    const members = Array.from({ length: 23 }, (_, i) => ({ email: `m${i}@example.test`, substitutions: { i } }));
    const result = await client.addToGroup('newsletter', members, { batchSize: 5 });
    expect(result.batches).toBe(5);
    expect(result.added).toHaveLength(23);
    expect(emu.members('newsletter')).toHaveLength(23);
  });

  it('removes members and says whether they were members', async () => {
    await client.addToGroup('newsletter', ['ann@example.test']);
    await expect(client.isInGroup('newsletter', 'ann@example.test')).resolves.toBe(true);
    await expect(client.removeFromGroup('newsletter', 'Ann <ann@example.test>')).resolves.toBe(true);
    await expect(client.isInGroup('newsletter', 'ann@example.test')).resolves.toBe(false);
    await expect(client.removeFromGroup('newsletter', 'ann@example.test')).resolves.toBe(false);
  });

  it('rejects with group_not_found for an unknown group on every group operation', async () => {
    const calls = [
      () => client.addToGroup('nope', ['a@example.test']),
      () => client.removeFromGroup('nope', 'a@example.test'),
      () => client.isInGroup('nope', 'a@example.test'),
      () => client.sendToGroup('nope', { from: 'a@example.test', subject: 's', textContent: { text: 't' } }),
    ];
    for (const call of calls) {
      await expect(call()).rejects.toMatchObject({ code: 'EAPI', responseCode: 404, apiCode: 'group_not_found' });
    }
  });

  it('sends a standard email with hosted images on the plus plan', async () => {
    const result = await client.sendEmail({
      to: ['Ann <ann@example.test>', 'bob@example.test'],
      from: { name: 'Shop', address: 'shop@example.test' },
      subject: 'Logo',
      textContent: {
        html: '<img src="{{logo}}">',
        tracking: true,
        images: [{ name: 'logo', data: PNG, mimeType: 'image/png' }],
      },
    });
    expect(result.response).toBe('202 Accepted');
    expect(result.messageId).toMatch(/^<.+>$/);
    const [copy] = emu.mailbox('bob@example.test');
    expect(copy!.html).toMatch(new RegExp(`<img src="${emu.url}/images/[0-9a-f]{64}">`));
    expect(emu.messages()[0]!.tracking).toBe(true);
  });

  it('gets plan_required for images on the free plan', async () => {
    const free = new EmlApiClient({ apiKey: 'k-free', baseUrl: emu.url });
    const err = await free
      .sendEmail({
        to: 'ann@example.test',
        from: 'shop@example.test',
        subject: 'Logo',
        textContent: { html: '<img src="{{logo}}">', images: [{ name: 'logo', data: PNG, mimeType: 'PNG' }] },
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EAUTH', responseCode: 403, apiCode: 'plan_required' });
    await free.close();
  });

  it('rejects bad input with EMESSAGE naming the argument, before any request', async () => {
    const before = emu.messages().length;
    const attempts: [() => Promise<unknown>, RegExp][] = [
      [
        () => client.sendEmail({ to: [], from: 'a@example.test', subject: 's', textContent: { text: 't' } }),
        /to needs at least one/,
      ],
      [
        () => client.sendEmail({ to: 'x', from: 'a@example.test', subject: 's', textContent: { text: 't' } }),
        /sendEmail: to: "x" is not a valid/,
      ],
      [
        () =>
          client.sendEmail({
            to: 'b@example.test',
            from: 'a@example.test',
            subject: 'a\nb',
            textContent: { text: 't' },
          }),
        /subject must not contain line breaks/,
      ],
      [
        () => client.sendEmail({ to: 'b@example.test', from: 'a@example.test', subject: 's', textContent: {} }),
        /needs html or text/,
      ],
      [
        () =>
          client.sendEmail({
            to: 'b@example.test',
            from: 'a@example.test',
            subject: 's',
            textContent: { html: 'x', images: [{ name: 'logo', data: PNG, mimeType: 'image/bmp' }] },
          }),
        /images\[0\]\.mimeType "image\/bmp"/,
      ],
      [
        () => client.sendToGroup('', { from: 'a@example.test', subject: 's', textContent: { text: 't' } }),
        /groupId must be a non-empty string/,
      ],
      [
        () => client.addToGroup('newsletter', [{ email: 'a@example.test', substitutions: { 'bad key': 'x' } }]),
        /substitutions key "bad key"/,
      ],
      [
        () => client.addToGroup('newsletter', [{ email: 'a@example.test', substitutions: { unsubscribe: 'x' } }]),
        /reserved/,
      ],
      [() => client.addToGroup('newsletter', [], { batchSize: 0 }), /batchSize/],
      [() => client.isInGroup('newsletter', 'nobody'), /not a valid email address/],
    ];
    for (const [call, message] of attempts) {
      const err = await call().catch((e: unknown) => e);
      expect(err, String(message)).toMatchObject({ code: 'EMESSAGE' });
      expect((err as Error).message).toMatch(message);
    }
    expect(emu.messages().length).toBe(before);
  });
});

describe('hostile path parameters', () => {
  let emu: Emulator;
  let client: EmlApiClient;
  const HOSTILE = ['..', '.', '../admin', 'a/b', 'x?y=1', 'x#frag', 'café ☕', '%2F', ' ', 'news letter'];
  beforeAll(async () => {
    emu = await startEmulator({ groups: HOSTILE });
    client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
  });
  afterAll(async () => {
    await client.close();
    await emu.close();
  });

  it('encodes every group id and address so it stays one path segment', async () => {
    for (const groupId of HOSTILE) {
      const address = `we/ird?#${HOSTILE.indexOf(groupId)}@example.test`;
      await client.addToGroup(groupId, [{ email: `m${HOSTILE.indexOf(groupId)}@example.test` }]);
      await expect(client.isInGroup(groupId, `m${HOSTILE.indexOf(groupId)}@example.test`)).resolves.toBe(true);
      await expect(client.isInGroup(groupId, 'other@example.test')).resolves.toBe(false);
      expect(emu.members(groupId).map((m) => m.email)).toEqual([`m${HOSTILE.indexOf(groupId)}@example.test`]);
      expect(encodePathSegment(groupId)).not.toMatch(/[/?#]|^\.{1,2}$/);
      expect(encodePathSegment(address)).not.toMatch(/[/?#]/);
    }
  });
});

describe('isInGroup and removeFromGroup against other response styles', () => {
  // A stand-in for a real service whose answer shapes differ from the
  // emulator's: the contract says the client must cope with them.
  let service: FakeService;
  beforeAll(async () => {
    service = await startFakeService();
  });
  afterAll(() => service.close());

  const cases: [string, number, unknown, boolean][] = [
    ['{ "member": true }', 200, { member: true }, true],
    ['{ "member": false }', 200, { member: false }, false],
    ['{ "isMember": false }', 200, { isMember: false }, false],
    ['{ "exists": true }', 200, { exists: true }, true],
    ['a bare false', 200, false, false],
    ['{ "data": { "member": false } }', 200, { data: { member: false } }, false],
    ['204 (status-style services: 204 member, 404 not)', 204, undefined, true],
    ['404 with no body', 404, undefined, false],
    ['404 not_a_member', 404, { error: { code: 'not_a_member', message: 'no' } }, false],
  ];
  for (const [label, status, body, expected] of cases) {
    it(`isInGroup reads ${label} as ${expected}`, async () => {
      service.answer({ status, body });
      const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url });
      await expect(client.isInGroup('g', 'a@example.test')).resolves.toBe(expected);
      await client.close();
    });
  }

  // A 2xx the client cannot read must never count as "member": code that checks
  // membership before mailing someone would mail non-members.
  const unreadable: [string, { status: number; body?: unknown; text?: string; headers?: Record<string, string> }][] = [
    ['{ "member": "false" } (a string)', { status: 200, body: { member: 'false' } }],
    ['{ "result": "yes" }', { status: 200, body: { result: 'yes' } }],
    ['an empty JSON object', { status: 200, body: {} }],
    ['200 with no body', { status: 200 }],
    [
      'an nginx welcome page (a wrong baseUrl)',
      {
        status: 200,
        text: '<html><head><title>Welcome to nginx!</title></head></html>',
        headers: { 'content-type': 'text/html' },
      },
    ],
  ];
  for (const [label, reply] of unreadable) {
    it(`isInGroup refuses ${label} with EAPI instead of reading it as a member`, async () => {
      service.answer(reply);
      const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url });
      const err = await rejectionOf(client.isInGroup('g', 'a@example.test'));
      expect(err.code).toBe('EAPI');
      expect(err.responseCode).toBe(reply.status);
      expect(err.message).toContain('not a membership answer');
      await client.close();
    });
  }

  it('isInGroup and removeFromGroup throw for 404 group_not_found', async () => {
    service.answer({ status: 404, body: { error: { code: 'group_not_found', message: 'no group' } } });
    const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url });
    await expect(client.isInGroup('g', 'a@example.test')).rejects.toMatchObject({ apiCode: 'group_not_found' });
    await expect(client.removeFromGroup('g', 'a@example.test')).rejects.toMatchObject({ apiCode: 'group_not_found' });
    await client.close();
  });

  it('addToGroup counts a whole batch as added when the service lists nothing', async () => {
    service.answer({ status: 204 });
    const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url });
    await expect(client.addToGroup('g', ['a@example.test', 'b@example.test'])).resolves.toEqual({
      added: ['a@example.test', 'b@example.test'],
      skipped: [],
      batches: 1,
    });
    await client.close();
  });

  it('addToGroup reports what earlier batches added when a later one fails', async () => {
    service.script([{ status: 200, body: { added: ['a@example.test', 'b@example.test'], skipped: [] } }], {
      status: 400,
      body: { error: { code: 'invalid_address', message: 'entries[0].email is not valid' } },
    });
    const client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url });
    const err = await client
      .addToGroup('g', ['a@example.test', 'b@example.test', 'c@example.test'], { batchSize: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({
      code: 'EAPI',
      responseCode: 400,
      apiCode: 'invalid_address',
      partial: { added: ['a@example.test', 'b@example.test'], skipped: [], batches: 1 },
    });
    expect((err as Error).message).toContain('batch 2 of 2');
    await client.close();
  });
});
