import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { emulatorApi, expectHtmlPage, fetchPublic } from '../helpers/emulator-api.js';

/**
 * The hosted unsubscribe form behind each member's {{unsubscribe}} link:
 * confirmation on GET, removal on POST and on an RFC 8058 one-click POST.
 */

let emu: Emulator;
const { addOk, removeMember, isMember, sendGroupOk, copyOf, unsubscribeLinks } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator();
});

afterAll(() => emu.close());

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
