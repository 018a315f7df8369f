import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiError, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';
import { FIXTURES } from '../helpers/rich-message.js';

describe.each(NODEMAILERS)('$label: sendMail with group or tracking', ({ nodemailer }) => {
  let emu: Emulator;
  let client: EmlApiClient;
  let transporter: ReturnType<typeof nodemailer.createTransport>;
  beforeAll(async () => {
    emu = await startEmulator({ groups: ['newsletter'] });
    client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
    transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
  });
  beforeEach(async () => {
    emu.reset();
    await client.addToGroup('newsletter', [
      { email: 'ann@example.test', name: 'Ann', substitutions: { first_name: 'Ann' } },
      { email: 'bob@example.test', name: 'Bob', substitutions: { first_name: 'Bob' } },
    ]);
  });
  afterAll(async () => {
    transporter.close();
    await client.close();
    await emu.close();
  });

  it('sends to the group through /v1/send/group, one personalised copy per member', async () => {
    const info = await transporter.sendMail({
      from: 'News <news@example.test>',
      subject: 'Hello {{first_name}}',
      html: '<p>Hi {{first_name}}</p><a href="{{unsubscribe}}">Unsubscribe</a>',
      text: 'Hi {{first_name}}. Unsubscribe: {{unsubscribe}}',
      group: 'newsletter',
    });
    expect(info.response).toBe('202 Accepted');
    expect(info.group).toBe('newsletter');
    expect(info.apiResponse).toMatchObject({ recipients: 2, failed: 0 });
    expect(info.accepted).toEqual([]);
    expect(emu.messages()[0]!.endpoint).toBe('/v1/send/group/newsletter');
    const [ann] = emu.mailbox('ann@example.test');
    const [bob] = emu.mailbox('bob@example.test');
    expect(ann!.subject).toBe('Hello Ann');
    expect(bob!.subject).toBe('Hello Bob');
    expect(ann!.text).toMatch(new RegExp(`Unsubscribe: ${emu.url}/unsubscribe/[A-Za-z0-9_-]+`));
    expect(ann!.raw.toString()).toMatch(/^List-Unsubscribe-Post: List-Unsubscribe=One-Click/m);
  });

  it('turns inline cid: images into hosted images with {{name}} placeholders', async () => {
    await transporter.sendMail({
      from: 'news@example.test',
      subject: 'Logo',
      html: '<p>Hi</p><img src="cid:logo@shop"><img src="cid:logo@shop">',
      attachments: [{ filename: 'logo.png', path: `${FIXTURES}logo.png`, cid: 'logo@shop' }],
      group: 'newsletter',
    });
    const [ann] = emu.mailbox('ann@example.test');
    const urls = ann!.html!.match(new RegExp(`${emu.url}/images/[0-9a-f]{64}`, 'g'));
    expect(urls).toHaveLength(2);
    const res = await fetch(urls![0]!);
    expect(res.headers.get('content-type')).toBe('image/png');
    expect(ann!.html).not.toContain('cid:');
  });

  it('keeps apart inline images whose cid is the start of another (cid:logo and cid:logo2)', async () => {
    const gif = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');
    await transporter.sendMail({
      from: 'news@example.test',
      subject: 'Two logos',
      html: '<img src="cid:logo"><img src="cid:logo2"><img src=\'cid:logo\'>',
      attachments: [
        { filename: 'logo.png', path: `${FIXTURES}logo.png`, cid: 'logo' },
        { filename: 'logo2.gif', content: gif, cid: 'logo2' },
      ],
      group: 'newsletter',
    });
    const [ann] = emu.mailbox('ann@example.test');
    const sources = [...ann!.html!.matchAll(/src=["']([^"']*)["']/g)].map((m) => m[1]!);
    expect(sources).toHaveLength(3);
    for (const src of sources) expect(src).toMatch(new RegExp(`^${emu.url}/images/[0-9a-f]{64}$`));
    expect(sources[0]).toBe(sources[2]);
    expect(sources[1]).not.toBe(sources[0]);
    expect((await fetch(sources[1]!)).headers.get('content-type')).toBe('image/gif');
  });

  it('sends tracking: true through /v1/send/email with tracking on', async () => {
    const info = await transporter.sendMail({
      from: 'shop@example.test',
      to: ['Ann <ann@example.test>', 'bob@example.test'],
      subject: 'Tracked',
      html: '<p>Tracked</p>',
      tracking: true,
    });
    expect(info.accepted).toEqual(['ann@example.test', 'bob@example.test']);
    expect(info.messageId).toBe(emu.messages()[0]!.messageId);
    expect(emu.messages()[0]).toMatchObject({ endpoint: '/v1/send/email', tracking: true });
    expect(emu.mailbox('bob@example.test')).toHaveLength(1);
  });

  it('keeps using the EML endpoint without group or tracking', async () => {
    await transporter.sendMail({ from: 'shop@example.test', to: 'ann@example.test', subject: 'EML', text: 'x' });
    expect(emu.messages()[0]!.endpoint).toBe('/v1/send/eml');
  });

  it('refuses, naming every part, a group message the JSON form cannot carry, and sends nothing', async () => {
    const err = await transporter
      .sendMail({
        from: 'news@example.test',
        to: 'ann@example.test',
        cc: 'cc@example.test',
        bcc: 'bcc@example.test',
        subject: 'Too much',
        html: '<p>x</p>',
        headers: { 'X-Campaign': 'autumn' },
        attachments: [
          { filename: 'invoice.pdf', content: Buffer.from('%PDF-1.4') },
          { filename: 'notes.txt', content: 'inline text', cid: 'notes' },
        ],
        group: 'newsletter',
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'EMESSAGE', permanent: true });
    const message = (err as Error).message;
    for (const part of [
      'to (the recipients',
      'cc',
      'bcc',
      'custom headers (X-Campaign)',
      'attachment "invoice.pdf"',
      'inline attachment "notes.txt"',
    ]) {
      expect(message).toContain(part);
    }
    expect(emu.messages()).toHaveLength(0);
  });

  it('refuses list headers, calendar invites and priority on a tracked send', async () => {
    const err = await transporter
      .sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        subject: 'x',
        html: 'x',
        list: { unsubscribe: 'https://example.test/u' },
        icalEvent: { method: 'REQUEST', content: 'BEGIN:VCALENDAR\r\nEND:VCALENDAR' },
        priority: 'high',
        tracking: true,
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EMESSAGE' });
    expect((err as Error).message).toMatch(/list \(List-\* headers\).*icalEvent.*priority/);
    expect(emu.messages()).toHaveLength(0);
  });

  it('refuses a tracked send without a recipient and a group send to an unknown group', async () => {
    await expect(
      transporter.sendMail({ from: 'shop@example.test', subject: 'x', html: 'x', tracking: true }),
    ).rejects.toMatchObject({ code: 'EMESSAGE', message: expect.stringContaining('no "to" recipient') });
    await expect(
      transporter.sendMail({ from: 'shop@example.test', subject: 'x', html: 'x', group: 'unknown' }),
    ).rejects.toMatchObject({ code: 'EAPI', responseCode: 404, apiCode: 'group_not_found' });
  });

  it('refuses a group option that is not a non-empty string', async () => {
    await expect(
      transporter.sendMail({ from: 'shop@example.test', subject: 'x', html: 'x', group: '' }),
    ).rejects.toMatchObject({ code: 'EMESSAGE' });
  });
});
