import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { emulatorApi, type GroupAccepted, headerValues } from '../helpers/emulator-api.js';

/**
 * Real HTTP requests against the emulator's POST /v1/send/group/{id}: one
 * personalised copy per member, with its substitutions and its own unsubscribe
 * link, checked against SERVICE-SPEC.md part 3.
 */

let emu: Emulator;
const { addOk, sendGroupOk, copyOf, unsubscribeLinks } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator();
});

afterAll(() => emu.close());

describe('substitutions in a group email', () => {
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
