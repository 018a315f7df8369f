import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  emulatorApi,
  expectHtmlPage,
  fetchPublic,
  groupEmail,
  groupPath,
  logoImage,
  sendGroupPath,
} from '../helpers/emulator-api.js';

/**
 * The emulator's programmatic API next to its HTTP API: reset(),
 * createGroup() and members() as a test suite uses them.
 */

describe('programmatic API: reset, createGroup, members', () => {
  let local: Emulator;
  const { api, imageUrls, unsubscribeLinks } = emulatorApi(() => local);
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

describe('API key accounts', () => {
  it('refuses an account that is not 1 to 100 visible ASCII characters, naming the option', async () => {
    for (const account of ['', 'has space', 'x'.repeat(101), 7]) {
      await expect(
        startEmulator({ apiKeys: [{ key: 'k-acc', scopes: ['sender'], account: account as string }] }),
      ).rejects.toThrow(/^Invalid option apiKeys\[0\]\.account: expected 1 to 100 visible ASCII characters/);
    }
  });
});
