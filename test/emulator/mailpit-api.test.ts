import { createHash } from 'node:crypto';
import nodemailer, { type SendMailOptions } from 'nodemailer';
import { MailpitClient } from 'mailpit-api';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/**
 * Mailpit's REST API v1 at the emulator's address, driven by Mailpit's own
 * npm client (`mailpit-api`), unchanged: what a Playwright or Cypress suite
 * written against Mailpit calls.
 */

let emu: Emulator;
let mailpit: MailpitClient;
let client: EmlApiClient;
let transport: ReturnType<typeof makeTransport>;
const makeTransport = (url: string, key: string) =>
  nodemailer.createTransport(new EmlApiTransport({ apiKey: key, baseUrl: url }));
let clock = new Date('2030-05-01T10:00:00.000Z');

beforeAll(async () => {
  emu = await startEmulator({ groups: ['news'], now: () => clock });
  mailpit = new MailpitClient(emu.url);
  client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
  transport = makeTransport(emu.url, emu.apiKey);
});

afterAll(async () => {
  transport?.close();
  await client?.close();
  await emu?.close();
});

beforeEach(async () => {
  await mailpit.deleteMessages();
});

const PIXEL = Buffer.from('R0lGODlhAQABAPAAAP8AAP///yH5BAAAAAAALAAAAAABAAEAAAICRAEAOw==', 'base64');

/** An order confirmation: To, Cc, Bcc, Reply-To, text, HTML with a cid image, a PDF. */
async function sendOrder(subject = 'Order #1042 confirmed', extra: SendMailOptions = {}) {
  return transport.sendMail({
    from: '"Shop Team" <shop@example.test>',
    to: 'Ann Example <ann@example.test>',
    cc: 'bob@example.test',
    bcc: 'audit@example.test',
    replyTo: 'help@example.test',
    subject,
    text: 'Thanks, Ann! Your order #1042 ships today. Track it at https://shop.example.test/t/1042',
    html: '<p>Thanks, <b>Ann</b>!</p><p><a href="https://shop.example.test/t/1042">Track it</a></p><img src="cid:logo@shop">',
    attachments: [
      { filename: 'invoice-1042.pdf', content: Buffer.from('%PDF-1.4 invoice'), contentType: 'application/pdf' },
      { filename: 'logo.gif', content: PIXEL, contentType: 'image/gif', cid: 'logo@shop' },
    ],
    ...extra,
  });
}

async function sendPlain(options: {
  from?: string;
  to?: string;
  subject: string;
  text?: string;
  headers?: Record<string, string>;
}) {
  return transport.sendMail({
    from: options.from ?? 'app@example.test',
    to: options.to ?? 'dev@example.test',
    subject: options.subject,
    text: options.text ?? 'plain body',
    headers: options.headers,
  });
}

describe('listing', () => {
  it('lists messages newest first with Mailpit summary fields and totals', async () => {
    await sendPlain({ subject: 'First' });
    clock = new Date('2030-05-01T10:01:00.000Z');
    await sendOrder();
    const list = await mailpit.listMessages();
    expect(list).toMatchObject({ total: 2, unread: 2, messages_count: 2, messages_unread: 2, start: 0, tags: [] });
    expect((list as unknown as { count: number }).count).toBe(2);
    const [order, first] = list.messages;
    expect(first!.Subject).toBe('First');
    expect(order).toEqual({
      ID: expect.stringMatching(/^dlv_/),
      MessageID: expect.stringMatching(/^[^<>]+@[^<>]+$/),
      Read: false,
      From: { Name: 'Shop Team', Address: 'shop@example.test' },
      To: [{ Name: 'Ann Example', Address: 'ann@example.test' }],
      Cc: [{ Name: '', Address: 'bob@example.test' }],
      Bcc: [{ Name: '', Address: 'audit@example.test' }],
      ReplyTo: [{ Name: '', Address: 'help@example.test' }],
      Subject: 'Order #1042 confirmed',
      Created: '2030-05-01T10:01:00Z',
      Username: '',
      Tags: [],
      Size: expect.any(Number),
      Attachments: 1,
      Snippet: 'Thanks, Ann! Track it',
    });
    expect(order!.Size).toBe(Buffer.byteLength(await mailpit.getMessageSource(order!.ID)));
  });

  it('pages with start and limit', async () => {
    for (let i = 0; i < 7; i++) await sendPlain({ subject: `Page ${i}` });
    const page = await mailpit.listMessages(2, 3);
    expect(page.start).toBe(2);
    expect(page.messages_count).toBe(7);
    expect(page.messages.map((m) => m.Subject)).toEqual(['Page 4', 'Page 3', 'Page 2']);
    expect((await mailpit.listMessages(6, 50)).messages.map((m) => m.Subject)).toEqual(['Page 0']);
    expect((await mailpit.listMessages(7, 50)).messages).toEqual([]);
  });

  it('counts one message per accepted send: a JSON send to three is one, a group send one per member', async () => {
    await client.sendEmail({
      from: { email: 'app@example.test' },
      to: [{ email: 'a@example.test' }, { email: 'b@example.test' }, { email: 'c@example.test' }],
      subject: 'To three',
      textContent: { text: 'hi' },
    });
    await client.addToGroup('news', [
      { email: 'ann@example.test', substitutions: { first: 'Ann' } },
      { email: 'bob@example.test', substitutions: { first: 'Bob' } },
    ]);
    await client.sendToGroup('news', {
      from: 'news@example.test',
      subject: 'News for {{first}}',
      textContent: { text: 'Hi {{first}}' },
    });
    const list = await mailpit.listMessages();
    expect(list.messages.map((m) => m.Subject).sort()).toEqual(['News for Ann', 'News for Bob', 'To three']);
    const three = list.messages.find((m) => m.Subject === 'To three')!;
    expect(three.To.map((a) => a.Address)).toEqual(['a@example.test', 'b@example.test', 'c@example.test']);
    expect(emu.mailbox('b@example.test')).toHaveLength(1);
    const bob = list.messages.find((m) => m.Subject === 'News for Bob')!;
    expect(bob.To).toEqual([{ Name: '', Address: 'bob@example.test' }]);
  });
});

describe('a message', () => {
  it('has a summary with text, HTML, attachments, inline parts and List-Unsubscribe; reading it marks it read', async () => {
    await sendOrder();
    const [listed] = (await mailpit.listMessages()).messages;
    const message = await mailpit.getMessageSummary(listed!.ID);
    expect(message).toMatchObject({
      ID: listed!.ID,
      MessageID: listed!.MessageID,
      From: { Name: 'Shop Team', Address: 'shop@example.test' },
      Bcc: [{ Name: '', Address: 'audit@example.test' }],
      ReturnPath: 'shop@example.test',
      Subject: 'Order #1042 confirmed',
      ListUnsubscribe: { Header: '', Links: [], Errors: '', HeaderPost: '' },
      Tags: [],
      Username: '',
      Text: 'Thanks, Ann! Your order #1042 ships today. Track it at https://shop.example.test/t/1042',
    });
    expect(message.HTML).toContain('<img src="cid:logo@shop">');
    expect(message.Attachments).toEqual([
      {
        PartID: expect.stringMatching(/^\d+(\.\d+)*$/),
        FileName: 'invoice-1042.pdf',
        ContentType: 'application/pdf',
        ContentID: '',
        Size: 16,
        Checksums: {
          MD5: createHash('md5').update('%PDF-1.4 invoice').digest('hex'),
          SHA1: createHash('sha1').update('%PDF-1.4 invoice').digest('hex'),
          SHA256: createHash('sha256').update('%PDF-1.4 invoice').digest('hex'),
        },
      },
    ]);
    expect(message.Inline).toMatchObject([{ FileName: 'logo.gif', ContentType: 'image/gif', ContentID: 'logo@shop' }]);
    const pdf = await mailpit.getMessageAttachment(message.ID, message.Attachments[0]!.PartID);
    expect(pdf.type).toBe('application/pdf');
    expect(Buffer.from(await pdf.arrayBuffer()).toString()).toBe('%PDF-1.4 invoice');
    const logo = await mailpit.getMessageAttachment(message.ID, message.Inline[0]!.PartID);
    expect(Buffer.from(await logo.arrayBuffer()).equals(PIXEL)).toBe(true);
    expect((await mailpit.listMessages()).messages[0]!.Read).toBe(true);
    expect(await mailpit.getInfo()).toMatchObject({ Messages: 1, Unread: 0 });
  });

  it('serves the source with its Bcc, the headers as Go maps them, and `latest`', async () => {
    await sendOrder('Older');
    await sendOrder('Newest <order>');
    const source = await mailpit.getMessageSource();
    expect(source).toMatch(/^Subject: Newest <order>$/m);
    expect(source).toMatch(/^Bcc: audit@example.test$/m);
    const headers = await mailpit.getMessageHeaders();
    expect(headers.Subject).toEqual(['Newest <order>']);
    expect(headers['Message-Id']).toHaveLength(1);
    expect(headers['Mime-Version']).toEqual(['1.0']);
    expect(Object.keys(headers)).toEqual([...Object.keys(headers)].sort());
    expect((await mailpit.getMessageSummary()).Subject).toBe('Newest <order>');
  });

  it('renders the HTML part with cid images pointing at the API, and the text part', async () => {
    await sendOrder();
    const message = await mailpit.getMessageSummary();
    const html = await mailpit.renderMessageHTML(message.ID);
    expect(html).toContain(`<img src="/api/v1/message/${message.ID}/part/${message.Inline[0]!.PartID}">`);
    expect(html).toContain('<a href="https://shop.example.test/t/1042">');
    const embedded = await mailpit.renderMessageHTML(message.ID, 1);
    expect(embedded).toContain('<a href="https://shop.example.test/t/1042" target="_blank" rel="noreferrer noopener">');
    expect(await mailpit.renderMessageText()).toBe(message.Text);
    const res = await request(`${emu.url}/view/${message.ID}.html`);
    expect(res.headers['content-security-policy']).toMatch(/^sandbox /);
    expect(res.headers['content-security-policy']).not.toContain('allow-scripts');
    await res.body.text();
  });

  it('answers an unknown ID with 404, and `latest` of an empty inbox with 404', async () => {
    await expect(mailpit.getMessageSummary('nope')).rejects.toThrow(/404/);
    await expect(mailpit.getMessageSummary('latest')).rejects.toThrow(/404.*Message not found/);
    await expect(mailpit.renderMessageHTML('latest')).rejects.toThrow(/404/);
    await expect(mailpit.renderMessageHTML('nope')).rejects.toThrow(/404.*Message not found/);
    await expect(mailpit.renderMessageText('nope')).rejects.toThrow(/404.*Message not found/);
  });

  it('reads List-Unsubscribe of a group email', async () => {
    await client.addToGroup('news', ['ann@example.test']);
    await client.sendToGroup('news', {
      from: 'news@example.test',
      subject: 'Letter',
      textContent: { html: '<a href="{{unsubscribe}}">u</a>' },
    });
    const message = await mailpit.getMessageSummary();
    expect(message.ListUnsubscribe.Links).toHaveLength(2);
    expect(message.ListUnsubscribe.Links[0]).toMatch(new RegExp(`^${emu.url}/unsubscribe/`));
    expect(message.ListUnsubscribe.Links[1]).toMatch(/^mailto:/);
    expect(message.ListUnsubscribe).toMatchObject({ Errors: '', HeaderPost: 'List-Unsubscribe=One-Click' });
  });
});

describe('searching', () => {
  beforeEach(async () => {
    clock = new Date('2030-05-01T09:00:00.000Z');
    await sendPlain({
      from: 'Alerts <alerts@monitor.test>',
      to: 'ops@example.test',
      subject: 'Disk full on db-1',
      text: 'Volume /var is at 98%',
    });
    clock = new Date('2030-05-02T09:00:00.000Z');
    await sendOrder('Order #1042 confirmed');
    clock = new Date('2030-05-03T09:00:00.000Z');
    await sendPlain({
      to: 'Carla <carla@example.test>',
      subject: 'Password reset',
      text: 'Your reset code is 771203',
      headers: { 'X-Tags': 'auth, Reset' },
    });
  });

  const subjects = async (query: string, tz?: string) =>
    (await mailpit.searchMessages({ query, ...(tz ? { tz } : {}) })).messages.map((m) => m.Subject);

  it('finds by each operator', async () => {
    expect(await subjects('from:monitor.test')).toEqual(['Disk full on db-1']);
    expect(await subjects('from:"Shop Team"')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('to:carla')).toEqual(['Password reset']);
    expect(await subjects('cc:bob@example.test')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('bcc:audit')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('reply-to:help@')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('addressed:ops@example.test')).toEqual(['Disk full on db-1']);
    expect(await subjects('subject:reset')).toEqual(['Password reset']);
    const { MessageID } = (await mailpit.searchMessages({ query: 'subject:Disk' })).messages[0]!;
    expect(await subjects(`message-id:${MessageID}`)).toEqual(['Disk full on db-1']);
    expect(await subjects('has:attachment')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('tag:auth')).toEqual(['Password reset']);
    expect(await subjects('is:tagged')).toEqual(['Password reset']);
    expect(await subjects('larger:1k')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('smaller:1kb')).toEqual(['Password reset', 'Disk full on db-1']);
  });

  it('finds free text in subject, body and addresses; quoted phrases; - and ! exclude', async () => {
    expect(await subjects('771203')).toEqual(['Password reset']);
    expect(await subjects('ships today')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('"ships today"')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('"today ships"')).toEqual([]);
    expect(await subjects('alerts@monitor.test')).toEqual(['Disk full on db-1']);
    expect(await subjects('invoice-1042.pdf')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('-has:attachment')).toEqual(['Password reset', 'Disk full on db-1']);
    expect(await subjects('!from:monitor -subject:order')).toEqual(['Password reset']);
  });

  it('finds by read status, and before: and after: dates in a time zone', async () => {
    await mailpit.setReadStatus({ Search: 'subject:order', Read: true });
    expect(await subjects('is:read')).toEqual(['Order #1042 confirmed']);
    expect(await subjects('is:unread')).toEqual(['Password reset', 'Disk full on db-1']);
    expect(await subjects('after:2030-05-02', 'UTC')).toEqual(['Password reset', 'Order #1042 confirmed']);
    expect(await subjects('before:2030-05-02', 'UTC')).toEqual(['Disk full on db-1']);
    // 09:00 UTC on May 2nd is still May 1st in Honolulu (UTC-10) after 23:00.
    expect(await subjects('after:2030-05-01T23:00 before:2030-05-01T23:59', 'Pacific/Honolulu')).toEqual([
      'Order #1042 confirmed',
    ]);
    expect(await subjects('after:"2030-05-01 23:00" before:"2030-05-01 23:59:59"', 'Pacific/Honolulu')).toEqual([
      'Order #1042 confirmed',
    ]);
    const result = await mailpit.searchMessages({ query: 'is:unread' });
    expect(result).toMatchObject({ total: 3, unread: 2, messages_count: 2, messages_unread: 2 });
  });

  it('refuses an empty query with 400, as Mailpit', async () => {
    await expect(mailpit.searchMessages({ query: '  ' })).rejects.toThrow(/400.*no search query/);
  });

  it('waits for a message that arrives later (waitForMessage)', async () => {
    const waiting = mailpit.waitForMessage({ query: 'subject:"Welcome Dana"' }, { timeout: 10_000, interval: 20 });
    await sendPlain({ to: 'dana@example.test', subject: 'Welcome Dana' });
    expect((await waiting).To).toEqual([{ Name: '', Address: 'dana@example.test' }]);
  });
});

describe('changing the inbox', () => {
  it('sets read status by IDs, by search and for all', async () => {
    await sendPlain({ subject: 'a' });
    await sendPlain({ subject: 'b' });
    await sendPlain({ subject: 'c' });
    const ids = (await mailpit.listMessages()).messages.map((m) => m.ID);
    expect(await mailpit.setReadStatus({ IDs: [ids[0]!], Read: true })).toBe('ok');
    expect((await mailpit.getInfo()).Unread).toBe(2);
    await mailpit.setReadStatus({ Search: 'subject:b', Read: true });
    expect((await mailpit.listMessages()).unread).toBe(1);
    await mailpit.setReadStatus({ Read: true });
    expect((await mailpit.listMessages()).unread).toBe(0);
    await mailpit.setReadStatus();
    expect((await mailpit.listMessages()).unread).toBe(3);
    await expect(mailpit.setReadStatus({ IDs: [ids[0]!], Search: 'a', Read: true })).rejects.toThrow(/not both/);
  });

  it('deletes by IDs, by search and all, and counts the deleted in /api/v1/info', async () => {
    for (const subject of ['keep 1', 'drop 1', 'drop 2', 'keep 2']) await sendPlain({ subject });
    const before = (await mailpit.getInfo()).RuntimeStats.MessagesDeleted;
    const list = await mailpit.listMessages();
    const drop1 = list.messages.find((m) => m.Subject === 'drop 1')!;
    expect(await mailpit.deleteMessages({ IDs: [drop1.ID] })).toBe('ok');
    expect(await mailpit.deleteMessagesBySearch({ query: 'subject:drop' })).toBe('ok');
    expect((await mailpit.listMessages()).messages.map((m) => m.Subject)).toEqual(['keep 2', 'keep 1']);
    expect(emu.mailbox('dev@example.test').map((c) => c.subject)).toEqual(['keep 1', 'keep 2']);
    await mailpit.deleteMessages();
    expect((await mailpit.listMessages()).total).toBe(0);
    expect(emu.mailbox('dev@example.test')).toEqual([]);
    expect((await mailpit.getInfo()).RuntimeStats.MessagesDeleted).toBe(before + 4);
  });

  it('tags messages from X-Tags and plus addresses, and sets, renames and deletes tags', async () => {
    await sendPlain({ to: 'ann+signup@example.test', subject: 'Tagged', headers: { 'X-Tags': 'Welcome, flow-1' } });
    const [message] = (await mailpit.listMessages()).messages;
    expect(message!.Tags).toEqual(['flow-1', 'signup', 'Welcome']);
    expect(await mailpit.getTags()).toEqual(['flow-1', 'signup', 'Welcome']);
    await mailpit.setTags({ IDs: [message!.ID], Tags: ['one', 'two'] });
    await mailpit.renameTag('one', 'uno');
    await mailpit.deleteTag('two');
    expect((await mailpit.getMessageSummary(message!.ID)).Tags).toEqual(['uno']);
    expect((await mailpit.getInfo()).Tags).toEqual({ uno: 1 });
  });
});

describe('tags as Mailpit keeps them', () => {
  it("takes a tag from each + part of the sender's and recipients' addresses, and sorts tags as Mailpit", async () => {
    await sendPlain({
      from: 'shop+promo@example.test',
      to: 'ann+a+b@example.test',
      subject: 'Plus',
      headers: { 'X-Tags': 'Zed, _under, 1one' },
    });
    const sorted = ['1one', '_under', 'a', 'b', 'promo', 'Zed'];
    expect((await mailpit.listMessages()).messages[0]!.Tags).toEqual(sorted);
    expect((await mailpit.getMessageSummary()).Tags).toEqual(sorted);
    expect(await mailpit.getTags()).toEqual(sorted);
    // Go writes a map's keys in byte order.
    expect(Object.keys((await mailpit.getInfo()).Tags)).toEqual(['1one', 'Zed', '_under', 'a', 'b', 'promo']);
  });

  it('refuses to rename or delete a tag no message has, and to rename a tag onto another one', async () => {
    await sendPlain({ subject: 'Tagged', headers: { 'X-Tags': 'one, two' } });
    await expect(mailpit.renameTag('nope', 'x')).rejects.toThrow(/400.*tag not found: nope/);
    await expect(mailpit.deleteTag('nope')).rejects.toThrow(/400.*tag not found: nope/);
    await expect(mailpit.renameTag('one', 'TWO')).rejects.toThrow(/400.*tag already exists: TWO/);
    expect(await mailpit.renameTag('ONE', 'One')).toBe('ok');
    expect(await mailpit.getTags()).toEqual(['One', 'two']);
  });
});

describe("JSON as Mailpit's Go code writes it", () => {
  const getJson = async (path: string) => {
    const res = await request(`${emu.url}${path}`);
    expect(res.statusCode, path).toBe(200);
    return (await res.body.json()) as Record<string, unknown> & { messages: Record<string, unknown>[] };
  };

  it("orders every object's fields as Mailpit's structs", async () => {
    await sendOrder();
    const list = await getJson('/api/v1/messages');
    expect(Object.keys(list)).toEqual([
      'total',
      'unread',
      'count',
      'messages_count',
      'messages_unread',
      'start',
      'tags',
      'messages',
    ]);
    expect(Object.keys(list.messages[0]!)).toEqual([
      'ID',
      'MessageID',
      'Read',
      'From',
      'To',
      'Cc',
      'Bcc',
      'ReplyTo',
      'Subject',
      'Created',
      'Username',
      'Tags',
      'Size',
      'Attachments',
      'Snippet',
    ]);
    const message = await getJson(`/api/v1/message/${String(list.messages[0]!.ID)}`);
    expect(Object.keys(message)).toEqual([
      'ID',
      'MessageID',
      'From',
      'To',
      'Cc',
      'Bcc',
      'ReplyTo',
      'ReturnPath',
      'Subject',
      'ListUnsubscribe',
      'Date',
      'Tags',
      'Username',
      'Text',
      'HTML',
      'Size',
      'Inline',
      'Attachments',
    ]);
    expect(Object.keys((message.Attachments as object[])[0]!)).toEqual([
      'PartID',
      'FileName',
      'ContentType',
      'ContentID',
      'Size',
      'Checksums',
    ]);
    const info = await getJson('/api/v1/info');
    expect(Object.keys(info)).toEqual([
      'Version',
      'LatestVersion',
      'Database',
      'DatabaseSize',
      'Messages',
      'Unread',
      'Tags',
      'RuntimeStats',
    ]);
    // The emulator's own counters come after Mailpit's.
    expect(Object.keys(info.RuntimeStats as object)).toEqual([
      'Uptime',
      'Memory',
      'MessagesDeleted',
      'SMTPAccepted',
      'SMTPAcceptedSize',
      'SMTPRejected',
      'SMTPIgnored',
      'MessagesDropped',
      'MaxMessages',
    ]);
  });

  it("writes times as Go's RFC 3339: no zero fraction, and a message's Date in its header's own offset", async () => {
    clock = new Date('2030-05-01T10:01:00.120Z');
    await client.sendEml(
      [
        'From: a@example.test',
        'To: b@example.test',
        'Subject: Zoned',
        'Date: Wed, 01 May 2030 12:00:00 +0200',
        'Message-ID: <zoned@example.test>',
        '',
        'body',
      ].join('\r\n'),
    );
    clock = new Date('2030-05-01T10:02:00.000Z');
    await sendPlain({ subject: 'Plain' });
    const [plain, zoned] = (await getJson('/api/v1/messages')).messages;
    expect(plain!.Created).toBe('2030-05-01T10:02:00Z');
    expect(zoned!.Created).toBe('2030-05-01T10:01:00.12Z');
    expect((await getJson(`/api/v1/message/${String(zoned!.ID)}`)).Date).toBe('2030-05-01T12:00:00+02:00');
    // Nodemailer writes the Date header in UTC, on the machine's clock.
    expect((await getJson(`/api/v1/message/${String(plain!.ID)}`)).Date).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  });

  it("gives an HTML-only message a Text made from its HTML, links as 'text ( url )', as Mailpit's enmime does", async () => {
    await client.sendEml(
      [
        'From: app@example.test',
        'To: ann@example.test',
        'Subject: HTML only',
        'Content-Type: text/html; charset=utf-8',
        '',
        '<p>Your code is 123456.</p><p><a href="https://app.example.test/v?t=1&amp;u=2">Verify</a></p>',
        '<p><a href="https://app.example.test/help">https://app.example.test/help</a></p>',
      ].join('\r\n'),
    );
    const message = await mailpit.getMessageSummary();
    expect(message.Text).toContain('Your code is 123456.');
    expect(message.Text).toContain('Verify ( https://app.example.test/v?t=1&u=2 )');
    expect(message.Text).toContain('https://app.example.test/help');
    expect(message.Text).not.toContain('help )');
    expect(message.Text).not.toMatch(/<|&amp;/);
    expect(await mailpit.renderMessageText(message.ID)).toBe(message.Text);
  });

  it("names a part's file in Content-Disposition escaped as Go's url.PathEscape", async () => {
    const { ID } = await mailpit.sendMessage({
      From: { Email: 'app@example.test' },
      To: [{ Email: 'ann@example.test' }],
      Attachments: [{ Content: Buffer.from('%PDF').toString('base64'), Filename: 'report (1) & co.pdf' }],
    });
    const { Attachments } = await mailpit.getMessageSummary(ID);
    const res = await request(`${emu.url}/api/v1/message/${ID}/part/${Attachments[0]!.PartID}`);
    expect(res.headers['content-disposition']).toBe('inline; filename="report%20%281%29%20&%20co.pdf"');
    await res.body.text();
  });
});

describe('what makes no sense in the emulator', () => {
  it('answers 501 naming the feature', async () => {
    await sendPlain({ subject: 'x' });
    for (const [call, feature] of [
      [() => mailpit.releaseMessage('latest', { To: ['a@example.test'] }), 'releasing a message'],
      [() => mailpit.spamAssassinCheck(), 'SpamAssassin'],
      [() => mailpit.htmlCheck(), 'HTML check'],
      [() => mailpit.linkCheck(), 'link check'],
      [() => mailpit.getChaosTriggers(), 'Chaos'],
    ] as const) {
      await expect(call()).rejects.toThrow(new RegExp(`501.*${feature}`));
    }
    expect(await mailpit.getConfiguration()).toMatchObject({ SpamAssassin: false, MessageRelay: { Enabled: false } });
  });
});

describe("Mailpit's health probes", () => {
  it('answers /livez and /readyz with 200, for any Host (they show no mail)', async () => {
    for (const path of ['/livez', '/readyz']) {
      for (const host of [undefined, '10.1.2.3:8025']) {
        const res = await request(`${emu.url}${path}`, host ? { headers: { host } } : {});
        expect(res.statusCode, `${path} ${host}`).toBe(200);
        expect(await res.body.text()).toBe('');
      }
    }
  });
});

describe("Mailpit's send API", () => {
  it('puts a message into the inbox, as cypress-mailpit and mailpit-api seed it', async () => {
    const { ID } = await mailpit.sendMessage({
      From: { Email: 'from@example.test', Name: 'From' },
      To: [{ Email: 'jane@example.test', Name: 'Jane' }],
      Cc: [{ Email: 'cc@example.test', Name: 'CC' }],
      Bcc: ['bcc@example.test'],
      ReplyTo: [{ Email: 'replyto@example.test', Name: 'ReplyTo' }],
      Subject: 'Hello Mailpit',
      Text: 'hello from mailpit',
      HTML: '<p>hello from mailpit</p><img src="cid:logo">',
      Attachments: [
        { Content: PIXEL.toString('base64'), Filename: 'logo.gif', ContentID: 'logo' },
        { Content: `data:application/pdf;base64,${Buffer.from('%PDF').toString('base64')}`, Filename: 'a.pdf' },
      ],
      Tags: ['seeded'],
      Headers: { 'X-Test': '1' },
    });
    const message = await mailpit.getMessageSummary(ID);
    expect(message).toMatchObject({
      Subject: 'Hello Mailpit',
      From: { Name: 'From', Address: 'from@example.test' },
      To: [{ Name: 'Jane', Address: 'jane@example.test' }],
      Cc: [{ Name: 'CC', Address: 'cc@example.test' }],
      Bcc: [{ Name: '', Address: 'bcc@example.test' }],
      ReplyTo: [{ Name: 'ReplyTo', Address: 'replyto@example.test' }],
      Tags: ['seeded'],
      Text: 'hello from mailpit',
    });
    expect(message.Attachments.map((a) => [a.FileName, a.ContentType, a.Size])).toEqual([
      ['a.pdf', 'application/pdf', 4],
    ]);
    expect(message.Inline.map((a) => [a.FileName, a.ContentID])).toEqual([['logo.gif', 'logo']]);
    expect((await mailpit.getMessageHeaders(ID))['X-Test']).toEqual(['1']);
    expect(await mailpit.renderMessageHTML(ID)).toContain(`/api/v1/message/${ID}/part/`);
    expect(emu.mailbox('bcc@example.test').map((c) => c.subject)).toEqual(['Hello Mailpit']);

    // cypress-mailpit's mailpitSendMail() with its defaults sends this body.
    const res = await request(`${emu.url}/api/v1/send`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        Attachments: [],
        Bcc: ['bcc@example.com'],
        Cc: [{ Email: 'cc@example.com', Name: 'CC' }],
        From: { Email: 'from@example.com', Name: 'From' },
        HTML: '<p>hello from mailpit</p>',
        Headers: {},
        ReplyTo: [{ Email: 'replyto@example.com', Name: 'ReplyTo' }],
        Subject: 'Hello Mailpit',
        Tags: [],
        Text: 'hello from mailpit',
        To: [{ Email: 'jane@example.com', Name: 'Jane' }],
      }),
    });
    expect(res.statusCode).toBe(200);
    const { ID: seeded } = (await res.body.json()) as { ID: string };
    expect((await mailpit.searchMessages({ query: 'to:jane@example.com' })).messages.map((m) => m.ID)).toEqual([
      seeded,
    ]);
  });

  it('takes an X-Tags header when the request has no Tags, as Mailpit', async () => {
    const from = { Email: 'app@example.test' };
    const to = [{ Email: 'ann@example.test' }];
    const { ID } = await mailpit.sendMessage({ From: from, To: to, Headers: { 'X-Tags': 'from-header' } });
    expect((await mailpit.getMessageSummary(ID)).Tags).toEqual(['from-header']);
    await expect(
      mailpit.sendMessage({ From: from, To: to, Tags: ['t'], Headers: { 'x-tags': 'from-header' } }),
    ).rejects.toThrow(/400.*cannot overwrite header: \\"x-tags\\"/);
  });

  it('refuses what Mailpit refuses, with its JSON error, and stores nothing', async () => {
    const from = { Email: 'app@example.test' };
    const to = [{ Email: 'ann@example.test' }];
    for (const [body, error] of [
      [{ To: to, Subject: 's' }, /from not set/],
      [{ From: from, Subject: 's' }, /no recipients/],
      [{ From: from, To: [{ Email: 'not an address' }] }, /invalid To address: not an address/],
      [{ From: from, To: to, Bcc: ['x'] }, /invalid Bcc address: x/],
      [{ From: from, To: to, Headers: { subject: 'x' } }, /cannot overwrite header: "subject"/],
      [{ From: from, To: to, Attachments: [{ Content: '!!', Filename: 'x.bin' }] }, /base64 attachment "x.bin"/],
      [{ From: from, To: 'ann@example.test' }, /To/],
      ['not json', /JSON/],
    ] as const) {
      const res = await request(`${emu.url}/api/v1/send`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect((JSON.parse(await res.body.text()) as { Error: string }).Error).toMatch(error);
    }
    expect((await mailpit.listMessages()).total).toBe(0);
  });
});

describe('a large inbox', () => {
  it('pages over 5,000 messages with exact totals, newest first, no message twice', async () => {
    const members = Array.from({ length: 5000 }, (_, i) => ({
      email: `m${i}@crowd.test`,
      substitutions: { n: String(i) },
    }));
    emu.createGroup('crowd');
    await client.addToGroup('crowd', members, { batchSize: 1000 });
    await client.sendToGroup('crowd', {
      from: 'news@example.test',
      subject: 'Issue for {{n}}',
      textContent: { text: 'n={{n}}' },
    });
    const seen: string[] = [];
    for (let start = 0; ; start += 700) {
      const page = await mailpit.listMessages(start, 700);
      expect(page.messages_count).toBe(5000);
      if (page.messages.length === 0) break;
      seen.push(...page.messages.map((m) => m.Subject));
    }
    expect(seen).toHaveLength(5000);
    expect(new Set(seen).size).toBe(5000);
    expect(seen[0]).toBe('Issue for 4999');
    expect(seen[4999]).toBe('Issue for 0');
    const search = await mailpit.searchMessages({ query: 'subject:"for 49"', start: 10, limit: 5 });
    expect(search.messages_count).toBe(111);
    expect(search.messages).toHaveLength(5);
  }, 120_000);
});
