import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { type AddAnswer, checkPath, emulatorApi, expectError } from '../helpers/emulator-api.js';

/**
 * Real HTTP requests against the emulator's group membership endpoints
 * (add, remove, check), checked against SERVICE-SPEC.md part 3 and the
 * decisions of ../shared/CONTRACT.md.
 */

let emu: Emulator;
const { api, addMembers, addOk, removeMember, isMember, sendGroup, sendGroupOk, copyOf, address, freshGroup } =
  emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({ groups: ['newsletter'] });
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

  it('answers 400, not 500, when the body groupId is an object that cannot be made a string', async () => {
    const group = freshGroup('object-id');
    // fast-check found it: String({ toString: null }) throws inside the emulator.
    const answer = await addMembers(group, [{ email: address('one') }], { groupId: { toString: null } } as never);
    expect(expectError(answer, 400, 'invalid_request')).toContain('{"toString":null}');
    expect(emu.members(group)).toEqual([]);
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

  it.each(['IGNORE', 'skip', null, 1, { toString: null }])(
    'answers 400, never 500, for an onFailure of %j, other than SKIP or ABORT (null is not absent)',
    async (onFailure) => {
      const group = freshGroup('onfailure');
      const answer = await addMembers(group, [{ email: address('one') }], { onFailure } as never);
      expect(expectError(answer, 400, 'invalid_request')).toContain('onFailure');
      expect(emu.members(group)).toEqual([]);
    },
  );
});
