import nodemailer from 'nodemailer';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/**
 * What the web inbox shows of a message over HTTP: decoded header values,
 * calendar parts named and summarised, clickable URLs in the text, links of
 * the HTML view opening new tabs, `/inbox/messages/latest`, the list's
 * search and paging, and everything from the message escaped.
 */

let emu: Emulator;
let transport: ReturnType<typeof makeTransport>;
const makeTransport = (url: string, key: string) =>
  nodemailer.createTransport(new EmlApiTransport({ apiKey: key, baseUrl: url }));

beforeAll(async () => {
  emu = await startEmulator();
  transport = makeTransport(emu.url, emu.apiKey);
});
afterAll(async () => {
  transport.close();
  await emu.close();
});
beforeEach(() => emu.reset());

async function get(path: string): Promise<{ status: number; text: string; headers: Record<string, unknown> }> {
  const res = await request(`${emu.url}${path}`);
  return { status: res.statusCode, text: await res.body.text(), headers: res.headers };
}

async function sendEml(lines: string[]): Promise<string> {
  const res = await request(`${emu.url}/v1/send/eml`, {
    method: 'POST',
    headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ mail: Buffer.from(lines.join('\r\n')).toString('base64') }),
  });
  const text = await res.body.text();
  expect(res.statusCode, text).toBe(202);
  return emu.mailbox(/^To: .*?([^\s<>]+@[^\s<>]+)/m.exec(lines.join('\n'))![1]!).at(-1)!.id;
}

describe('the message view', () => {
  it('shows header values decoded (RFC 2047) in the Headers tab', async () => {
    const id = await sendEml([
      'From: =?UTF-8?Q?Ren=C3=A9e?= <renee@example.test>',
      'To: ann@example.test',
      'Subject: =?UTF-8?B?w4l0w6kgw6AgUGFyaXM=?=',
      'X-Note: =?ISO-8859-1?Q?caf=E9?= and =?UTF-8?Q?th=C3=A9?=',
      '',
      'hi',
    ]);
    const page = await get(`/inbox/messages/${id}`);
    expect(page.text).toContain('<td>Subject</td><td>Été à Paris</td>');
    expect(page.text).toContain('<td>X-Note</td><td>café and thé</td>');
    expect(page.text).toContain('<td>From</td><td>Renée &lt;renee@example.test&gt;</td>');
  });

  it('names calendar parts .ics and shows the event once', async () => {
    await transport.sendMail({
      from: 'cal@example.test',
      to: 'ann@example.test',
      subject: 'Invitation',
      text: 'see you',
      icalEvent: {
        method: 'request',
        content:
          'BEGIN:VCALENDAR\r\nMETHOD:REQUEST\r\nBEGIN:VEVENT\r\nSUMMARY:Quarterly review\\, Q1\r\nDTSTART:20300301T093000Z\r\nDTEND:20300301T103000Z\r\nLOCATION:Room <4>\r\nEND:VEVENT\r\nEND:VCALENDAR',
      },
    });
    const [copy] = emu.mailbox('ann@example.test');
    const page = await get(`/inbox/messages/${copy!.id}`);
    expect(page.text).not.toContain('attachment-1');
    expect(page.text).toContain('download>calendar.ics</a>');
    expect(page.text).toContain('download>invite.ics</a>');
    const events = page.text.slice(
      page.text.indexOf('id="events"'),
      page.text.indexOf('</div>', page.text.indexOf('id="events"')),
    );
    expect(events.match(/event-summary/g)).toHaveLength(1);
    expect(events).toContain('Quarterly review, Q1');
    expect(events).toContain('2030-03-01 09:30 UTC \u2013 2030-03-01 10:30 UTC');
    expect(events).toContain('Room &lt;4&gt;');
    const ics = await request(`${emu.url}/inbox/messages/${copy!.id}/attachments/0`);
    expect(ics.headers['content-disposition']).toContain('filename="calendar.ics"');
    expect(await ics.body.text()).toContain('SUMMARY:Quarterly review');
  });

  it('makes the http(s) URLs of the text clickable, escaped, opening new tabs', async () => {
    const id = await sendEml([
      'From: a@example.test',
      'To: ann@example.test',
      'Subject: links',
      '',
      'Reset: https://app.example.test/reset?t=1&u=2. Not a link: javascript:alert(1) "https://x.test/"><script>',
    ]);
    const page = await get(`/inbox/messages/${id}`);
    expect(page.text).toContain(
      '<a href="https://app.example.test/reset?t=1&amp;u=2" target="_blank" rel="noopener noreferrer">https://app.example.test/reset?t=1&amp;u=2</a>. Not a link: javascript:alert(1) &quot;<a href="https://x.test/" target="_blank" rel="noopener noreferrer">https://x.test/</a>&quot;&gt;&lt;script&gt;',
    );
  });

  it('serves the HTML body with links opening new tabs and forms allowed, still without scripts', async () => {
    const id = await sendEml([
      'From: a@example.test',
      'To: ann@example.test',
      'Subject: html',
      'Content-Type: text/html',
      '',
      '<a href="https://shop.example.test/">shop</a><form action="https://shop.example.test/f" method="post"><button>go</button></form>',
    ]);
    const html = await get(`/inbox/messages/${id}/html`);
    expect(html.text.startsWith('<base target="_blank">')).toBe(true);
    const csp = String(html.headers['content-security-policy']);
    expect(csp).toMatch(/^sandbox allow-popups allow-popups-to-escape-sandbox allow-forms;/);
    expect(csp).not.toMatch(/allow-scripts|allow-same-origin|allow-top-navigation/);
    expect(csp).toContain("default-src 'none'");
  });

  it('marks the message read, and /inbox/messages/latest goes to the newest (of a search)', async () => {
    const older = await sendEml(['From: a@example.test', 'To: ann@example.test', 'Subject: older', '', 'x']);
    const newer = await sendEml(['From: a@example.test', 'To: ann@example.test', 'Subject: newer', '', 'x']);
    const latest = await request(`${emu.url}/inbox/messages/latest`);
    expect(latest.statusCode).toBe(302);
    expect(latest.headers.location).toBe(`/inbox/messages/${newer}`);
    await latest.body.text();
    const search = await request(`${emu.url}/inbox/messages/latest?query=subject:older`);
    expect(search.headers.location).toBe(`/inbox/messages/${older}`);
    await search.body.text();
    expect((await get('/')).text).toMatch(new RegExp(`<tr id="${older}" class="unread">`));
    await get(`/inbox/messages/${older}`);
    expect((await get('/')).text).toMatch(new RegExp(`<tr id="${older}">`));
    emu.reset();
    const empty = await request(`${emu.url}/inbox/messages/latest`);
    expect(empty.headers.location).toBe('/');
    await empty.body.text();
  });
});

describe('the message list', () => {
  it('pages by ?start= and searches by ?query= without script, with exact counts', async () => {
    for (let i = 0; i < 60; i++) {
      await sendEml([
        'From: a@example.test',
        'To: ann@example.test',
        `Subject: ${i % 3 === 0 ? 'fizz' : 'plain'} ${i}`,
        '',
        'x',
      ]);
    }
    const first = await get('/');
    expect(first.text.match(/<tr id="dlv_/g)).toHaveLength(50);
    expect(first.text).toContain('<span id="range">1\u201350 of 60</span>');
    expect(first.text).toContain('href="/?start=50"');
    const second = await get('/?start=50');
    expect(second.text.match(/<tr id="dlv_/g)).toHaveLength(10);
    expect(second.text).toContain('href="/"');
    const fizz = await get('/?query=subject%3Afizz');
    expect(fizz.text).toContain('<p id="matching" class="muted" aria-live="polite">20 results</p>');
    expect(fizz.text).toContain('value="subject:fizz"');
    expect(fizz.text.match(/<tr id="dlv_/g)).toHaveLength(20);
    const list = JSON.parse((await get('/inbox/list?query=fizz&start=10')).text) as Record<string, unknown>;
    expect(list).toMatchObject({ total: 60, matching: 20, start: 10, query: 'fizz' });
  });

  it('escapes the search box value, snippets and tags', async () => {
    await sendEml([
      'From: a@example.test',
      'To: ann@example.test',
      'Subject: tags',
      'X-Tags: <img src=x onerror=alert(1)>',
      '',
      '<script>alert(2)</script> body',
    ]);
    const page = await get(`/?query=${encodeURIComponent('"><script>alert(3)</script>')}`);
    expect(page.text).not.toMatch(/<script>alert/);
    expect(page.text).toContain('value="&quot;&gt;&lt;script&gt;alert(3)&lt;/script&gt;"');
    const all = await get('/');
    expect(all.text).not.toMatch(/<img src=x|<script>alert/);
    expect(all.text).toContain('<span class="snippet">&lt;script&gt;alert(2)&lt;/script&gt; body</span>');
  });
});
