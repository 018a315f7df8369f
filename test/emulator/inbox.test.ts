import { randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { EmlApiClient } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/**
 * The emulator's web inbox over real HTTP: the message list at `/`, the
 * message view and its raw, HTML and attachment files, the groups page and
 * the live event stream at /inbox/events.
 */

interface Page {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  text: string;
}

async function get(url: string, options: { method?: 'GET' | 'HEAD' | 'POST'; body?: string } = {}): Promise<Page> {
  const res = await request(url, { method: options.method ?? 'GET', body: options.body });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, body, text: body.toString('utf8') };
}

/** A multipart message with text, HTML, an inline cid image and one binary attachment. */
function richEml(options: {
  subject: string;
  messageId: string;
  attachment: Buffer;
  filename?: string;
  to?: string;
  extra?: string[];
}): string {
  const b64 = (data: Buffer) => data.toString('base64').replace(/.{76}/g, '$&\r\n');
  const filename = options.filename ?? 'data.bin';
  return [
    'From: "Shop Team" <shop@example.test>',
    `To: ${options.to ?? 'Ann Example <ann@example.test>'}`,
    ...(options.extra ?? []),
    `Subject: ${options.subject}`,
    `Message-ID: ${options.messageId}`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="mixed"',
    '',
    '--mixed',
    'Content-Type: multipart/alternative; boundary="alt"',
    '',
    '--alt',
    'Content-Type: text/plain; charset=utf-8',
    '',
    'Plain body of the order confirmation',
    '--alt',
    'Content-Type: multipart/related; boundary="rel"',
    '',
    '--rel',
    'Content-Type: text/html; charset=utf-8',
    '',
    '<h1 id="greeting">Thanks for your order</h1><img id="logo" src="cid:logo@shop"><script>document.title = "pwned"</script>',
    '--rel',
    'Content-Type: image/png',
    'Content-ID: <logo@shop>',
    'Content-Disposition: inline; filename="logo.png"',
    'Content-Transfer-Encoding: base64',
    '',
    b64(Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex')),
    '--rel--',
    '--alt--',
    '--mixed',
    'Content-Type: application/octet-stream',
    `Content-Disposition: attachment; filename="${filename}"`,
    'Content-Transfer-Encoding: base64',
    '',
    b64(options.attachment),
    '--mixed--',
    '',
  ].join('\r\n');
}

let emu: Emulator;
let client: EmlApiClient;
/** The emulator's clock; each test moves it forward. */
let clock = new Date('2030-04-05T06:07:08.000Z');

async function sendEml(eml: string, target: Emulator = emu): Promise<string> {
  const res = await request(`${target.url}/v1/send/eml`, {
    method: 'POST',
    headers: { 'x-api-key': target.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ mail: Buffer.from(eml).toString('base64') }),
  });
  const text = await res.body.text();
  expect(res.statusCode, text).toBe(202);
  return (JSON.parse(text) as { id: string }).id;
}

/** The copy of accepted message `ref` delivered to `address`. */
function copyOf(ref: string, address = 'ann@example.test', target: Emulator = emu) {
  const copy = target.mailbox(address).find((c) => c.messageRef === ref);
  expect(copy, `a copy of ${ref} for ${address}`).toBeDefined();
  return copy!;
}

function expectHtml(page: Page, status = 200): void {
  expect(page.status, page.text.slice(0, 300)).toBe(status);
  expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
  expect(page.text).toMatch(/^<!doctype html>/);
}

interface SseEvent {
  id: string | undefined;
  event: string;
  data: string;
}

/**
 * Reads Server-Sent Events from a streaming body. Each call of the returned
 * function reads until `done` says the events since the previous call are
 * enough (or the stream ends), and returns them; it fails after 5 s.
 */
function eventReader(body: Readable): (done: (events: SseEvent[]) => boolean) => Promise<SseEvent[]> {
  const chunks = body[Symbol.asyncIterator]();
  let pending: SseEvent[] = [];
  let buffer = '';
  const parse = (block: string) => {
    const event: SseEvent = { id: undefined, event: 'message', data: '' };
    let hasData = false;
    for (const line of block.split('\n')) {
      const colon = line.indexOf(':');
      if (colon === 0) continue; // a comment
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'id') event.id = value;
      else if (field === 'event') event.event = value;
      else if (field === 'data') {
        event.data += (hasData ? '\n' : '') + value;
        hasData = true;
      }
    }
    if (hasData) pending.push(event);
  };
  return async (done) => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('no matching event within 5 s')), 5000);
    });
    try {
      while (!done(pending)) {
        const next = await Promise.race([chunks.next(), timeout]);
        if (next.done) break;
        buffer += (next.value as Buffer).toString('utf8');
        let end: number;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          parse(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
      const events = pending;
      pending = [];
      return events;
    } finally {
      clearTimeout(timer);
    }
  };
}

/** Reads Server-Sent Events once: see {@link eventReader}. */
function readEvents(body: Readable, done: (events: SseEvent[]) => boolean): Promise<SseEvent[]> {
  return eventReader(body)(done);
}

beforeAll(async () => {
  emu = await startEmulator({ groups: ['newsletter', '<b>bold</b>'], now: () => clock });
  client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
});

afterAll(async () => {
  await client?.close();
  await emu?.close();
});

describe('the message list at /', () => {
  it('lists delivered copies newest first with recipient, sender, subject and time', async () => {
    clock = new Date('2030-04-05T06:07:08.000Z');
    const older = await sendEml(
      richEml({ subject: 'Older order', messageId: '<older@shop>', attachment: Buffer.from('a') }),
    );
    clock = new Date('2030-04-05T07:00:00.000Z');
    const newer = await sendEml(
      richEml({ subject: 'Newer order', messageId: '<newer@shop>', attachment: Buffer.from('b') }),
    );
    const page = await get(`${emu.url}/`);
    expectHtml(page);
    expect(page.text).toContain('<meta name="viewport" content="width=device-width, initial-scale=1">');
    const newerRow = page.text.indexOf(`id="${copyOf(newer).id}"`);
    const olderRow = page.text.indexOf(`id="${copyOf(older).id}"`);
    expect(newerRow).toBeGreaterThan(0);
    expect(olderRow).toBeGreaterThan(newerRow);
    const row = page.text.slice(newerRow, page.text.indexOf('</tr>', newerRow));
    expect(row).toContain('ann@example.test');
    expect(row).toContain('shop@example.test');
    expect(row).toContain('>Newer order</a>');
    expect(row).toContain('<time datetime="2030-04-05T07:00:00.000Z">2030-04-05 07:00:00 UTC</time>');
    expect(row).toContain('1 attachment');
    expect(row).toContain(`href="/inbox/messages/${copyOf(newer).id}"`);
  });

  it('loads nothing from the network: no external URL, only inline styles and a nonce script', async () => {
    const page = await get(`${emu.url}/`);
    expect(page.text).not.toMatch(/(?:src|href)="(?:https?:)?\/\//i);
    expect(page.text).not.toMatch(/<link[^>]+stylesheet/i);
    const csp = String(page.headers['content-security-policy']);
    expect(csp).toContain("default-src 'none'");
    const nonce = /script-src 'nonce-([^']+)'/.exec(csp)?.[1];
    expect(nonce).toBeDefined();
    const scripts = page.text.match(/<script\b[^>]*>/g) ?? [];
    expect(scripts.length).toBeGreaterThan(0);
    for (const tag of scripts) expect(tag).toBe(`<script nonce="${nonce}">`);
    expect(page.headers['cache-control']).toBe('no-store');
  });

  it('answers HEAD with the headers and no body', async () => {
    const page = await get(`${emu.url}/`, { method: 'HEAD' });
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(Number(page.headers['content-length'])).toBeGreaterThan(0);
    expect(page.body.length).toBe(0);
  });

  it('marks copies of a group send with the group', async () => {
    await client.addToGroup('newsletter', [{ email: 'cy@example.test', name: 'Cy', substitutions: { first: 'Cy' } }]);
    const sent = await client.sendToGroup('newsletter', {
      from: 'news@example.test',
      subject: 'News for {{first}}',
      textContent: { text: 'Hi {{first}}' },
    });
    const copy = copyOf(sent.id!, 'cy@example.test');
    const page = await get(`${emu.url}/`);
    const start = page.text.indexOf(`id="${copy.id}"`);
    const row = page.text.slice(start, page.text.indexOf('</tr>', start));
    expect(row).toContain('>News for Cy</a>');
    expect(row).toContain('group: newsletter');
  });
});

describe('the message view', () => {
  const attachment = randomBytes(3000);
  let ref: string;
  let id: string;

  beforeAll(async () => {
    clock = new Date('2030-04-06T10:00:00.000Z');
    ref = await sendEml(
      richEml({
        subject: 'Your receipt',
        messageId: '<receipt@shop>',
        attachment,
        filename: 'receipt 2030.bin',
        extra: ['Bcc: auditor@example.test'],
      }),
    );
    id = copyOf(ref).id;
  });

  it('shows the headers, text, HTML frame and attachment links of one copy', async () => {
    const page = await get(`${emu.url}/inbox/messages/${id}`);
    expectHtml(page);
    expect(page.text).toContain('<h1 id="subject">Your receipt</h1>');
    expect(page.text).toContain('&quot;Shop Team&quot; &lt;shop@example.test&gt;');
    expect(page.text).toContain('Ann Example &lt;ann@example.test&gt;');
    expect(page.text).toContain('2030-04-06 10:00:00 UTC');
    expect(page.text).toContain('<td>Message-ID</td><td>&lt;receipt@shop&gt;</td>');
    expect(page.text).toContain('<pre id="text-body">Plain body of the order confirmation</pre>');
    expect(page.text).toMatch(
      new RegExp(
        `<iframe id="html-body"[^>]* sandbox="allow-popups allow-popups-to-escape-sandbox allow-forms"[^>]* src="/inbox/messages/${id}/html">`,
      ),
    );
    expect(page.text).not.toMatch(/<iframe[^>]*allow-scripts/);
    expect(page.text).toContain(`href="/inbox/messages/${id}/attachments/1" download>receipt 2030.bin</a>`);
    expect(page.text).toContain(`href="/inbox/messages/${id}/attachments/0" download>logo.png</a>`);
    expect(page.text).toContain('application/octet-stream \u00b7 2.9 KB');
    expect(page.text).toContain(`href="/inbox/messages/${id}/raw"`);
    // The delivered copy has no Bcc, so neither has the view.
    expect(page.text).not.toContain('auditor@example.test');
  });

  it('serves the raw source exactly as delivered, without Bcc', async () => {
    const page = await get(`${emu.url}/inbox/messages/${id}/raw`);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(page.headers['x-content-type-options']).toBe('nosniff');
    expect(page.body.equals(copyOf(ref).raw)).toBe(true);
    expect(page.text).toContain('Subject: Your receipt');
    expect(page.text).not.toMatch(/^bcc:/im);
    // The accepted message still has it: only the delivery dropped it.
    expect(
      emu
        .messages()
        .find((m) => m.id === ref)!
        .raw.toString(),
    ).toMatch(/^Bcc: auditor@example.test/m);
  });

  it('downloads an attachment with its exact bytes, content type and file name', async () => {
    const page = await get(`${emu.url}/inbox/messages/${id}/attachments/1`);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('application/octet-stream');
    expect(page.body.equals(attachment)).toBe(true);
    expect(page.headers['content-disposition']).toBe(
      `attachment; filename="receipt 2030.bin"; filename*=UTF-8''receipt%202030.bin`,
    );
    const logo = await get(`${emu.url}/inbox/messages/${id}/attachments/0`);
    expect(logo.headers['content-type']).toBe('image/png');
    expect(logo.body.toString('hex')).toBe('89504e470d0a1a0a0000000d49484452');
    const head = await get(`${emu.url}/inbox/messages/${id}/attachments/1`, { method: 'HEAD' });
    expect(head.headers['content-length']).toBe(String(attachment.length));
    expect(head.body.length).toBe(0);
  });

  it('names a non-ASCII attachment in filename* and keeps an ASCII fallback', async () => {
    const other = await sendEml(
      richEml({
        subject: 'Accents',
        messageId: '<accents@shop>',
        attachment: Buffer.from('x'),
        filename: '=?UTF-8?Q?r=C3=A9sum=C3=A9=2Epdf?=',
      }),
    );
    const page = await get(`${emu.url}/inbox/messages/${copyOf(other).id}/attachments/1`);
    expect(page.headers['content-disposition']).toBe(
      `attachment; filename="r_sum_.pdf"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf`,
    );
  });

  it('serves the HTML body for the frame under a sandbox CSP, cid images inlined', async () => {
    const page = await get(`${emu.url}/inbox/messages/${id}/html`);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    const csp = String(page.headers['content-security-policy']);
    expect(csp).toMatch(/^sandbox\b/);
    expect(csp).not.toContain('allow-scripts');
    expect(csp).not.toContain('allow-same-origin');
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain(`img-src data: ${emu.url}/images/`);
    expect(page.text).toContain('<h1 id="greeting">Thanks for your order</h1>');
    expect(page.text).toContain('<img id="logo" src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==">');
  });

  it('answers an unknown delivery, part or attachment number with an HTML 404', async () => {
    for (const path of [
      '/inbox/messages/dlv_00000000-0000-0000-0000-000000000000',
      '/inbox/messages/dlv_00000000-0000-0000-0000-000000000000/raw',
      `/inbox/messages/${id}/attachments/2`,
      `/inbox/messages/${id}/attachments/01`,
      `/inbox/messages/${id}/source`,
      `/inbox/messages/${id}/`,
      '/inbox/messages/msg_1',
      '/inbox/messages/dlv_x%2F..%2Fraw',
      '/inbox/nothing',
    ]) {
      const page = await get(`${emu.url}${path}`);
      expectHtml(page, 404);
      expect(page.text, path).toContain('not found</h1>');
    }
    const textOnly = await sendEml(
      [
        'From: a@example.test',
        'To: ann@example.test',
        'Subject: Text only',
        'Message-ID: <text@x>',
        '',
        'Just text',
      ].join('\r\n'),
    );
    const textId = copyOf(textOnly).id;
    expectHtml(await get(`${emu.url}/inbox/messages/${textId}/html`), 404);
    const view = await get(`${emu.url}/inbox/messages/${textId}`);
    expect(view.text).not.toContain('<iframe');
    expect(view.text).toContain('<pre id="text-body">Just text</pre>');
  });
});

describe('escaping', () => {
  it('renders a hostile subject, addresses, file name and group as text', async () => {
    const hostile = '<script>alert(1)</script>';
    const ref = await sendEml(
      richEml({
        subject: hostile,
        messageId: '<hostile@shop>',
        attachment: Buffer.from('x'),
        filename: '<img src=x onerror=alert(2)>.txt',
        to: '"<img src=x onerror=alert(3)>" <ann@example.test>',
      }),
    );
    const id = copyOf(ref).id;
    for (const path of ['/', `/inbox/messages/${id}`]) {
      const page = await get(`${emu.url}${path}`);
      expect(page.text, path).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
      expect(page.text, path).not.toContain(hostile);
      expect(page.text, path).not.toMatch(/<img src=x/);
    }
    const view = await get(`${emu.url}/inbox/messages/${id}`);
    expect(view.text).toContain('<title>&lt;script&gt;alert(1)&lt;/script&gt;</title>');
    expect(view.text).toContain('download>&lt;img src=x onerror=alert(2)&gt;.txt</a>');
    expect(view.text).toContain('&lt;img src=x onerror=alert(3)&gt;');

    const groups = await get(`${emu.url}/inbox/groups`);
    expect(groups.text).toContain('<h2>&lt;b&gt;bold&lt;/b&gt;</h2>');
    expect(groups.text).not.toContain('<b>bold</b>');
  });
});

describe('the groups page', () => {
  it('lists each group with its members, names and substitutions', async () => {
    await client.addToGroup('newsletter', [
      { email: 'ann@example.test', name: 'Ann <A.>', substitutions: { first_name: 'Ann', city: 'Köln & Bonn' } },
      { email: 'bob@example.test' },
    ]);
    const page = await get(`${emu.url}/inbox/groups`);
    expectHtml(page);
    const start = page.text.indexOf('data-group="newsletter"');
    expect(start).toBeGreaterThan(0);
    const card = page.text.slice(start, page.text.indexOf('</section>', start));
    expect(card).toContain('<h2>newsletter</h2><span class="muted">3 members</span>');
    expect(card).toContain('<td class="email">ann@example.test</td><td>Ann &lt;A.&gt;</td>');
    expect(card).toContain('<code>{{first_name}} = Ann</code><code>{{city}} = Köln &amp; Bonn</code>');
    expect(card).toContain('<td class="email">bob@example.test</td>');
    expect(card.indexOf('cy@example.test')).toBeLessThan(card.indexOf('ann@example.test'));
    expect(page.text).toContain('No members.');
  });
});

describe('routing next to the API', () => {
  it('keeps API answers: POST / and unknown /v1 paths are JSON 404, GET /v1/send/eml is 405', async () => {
    for (const [method, path, status] of [
      ['POST', '/', 404],
      ['POST', '/inbox/groups', 404],
      ['GET', '/v1/nothing', 404],
      ['GET', '/v1/send/eml', 405],
      ['GET', '/favicon.ico', 404],
    ] as const) {
      const page = await get(`${emu.url}${path}`, { method, body: method === 'POST' ? '{}' : undefined });
      expect(page.status, `${method} ${path}`).toBe(status);
      expect(page.headers['content-type'], `${method} ${path}`).toMatch(/^application\/json/);
    }
  });
});

describe('live updates over /inbox/events', () => {
  it('streams each new delivery after the cursor the page was rendered with', async () => {
    const page = await get(`${emu.url}/`);
    const cursor = /data-cursor="(\d+)"/.exec(page.text)?.[1];
    expect(cursor).toBeDefined();
    const ac = new AbortController();
    const res = await request(`${emu.url}/inbox/events?since=${cursor}`, { signal: ac.signal });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    clock = new Date('2030-04-07T08:09:10.000Z');
    const ref = await sendEml(
      richEml({ subject: 'Live <one>', messageId: '<live@shop>', attachment: Buffer.from('x') }),
    );
    const events = await readEvents(res.body, (list) => list.some((e) => e.event === 'delivery'));
    ac.abort();
    // Nothing from before the cursor is repeated.
    expect(events.map((e) => e.event)).toEqual(['delivery']);
    const summary = JSON.parse(events[0]!.data) as Record<string, unknown>;
    const copy = copyOf(ref);
    expect(summary).toMatchObject({
      id: copy.id,
      to: 'ann@example.test',
      from: 'shop@example.test',
      subject: 'Live <one>',
      deliveredAt: '2030-04-07T08:09:10.000Z',
      group: null,
      attachments: 1,
      url: `/inbox/messages/${copy.id}`,
    });
    expect(events[0]!.id).toBe(String(summary.seq));
    expect(summary.row).toContain('>Live &lt;one&gt;</a>');
    expect(Number(summary.seq)).toBe(Number(cursor) + 1);
  });

  it('sends what a reconnecting client missed after its Last-Event-ID', async () => {
    const cursor = Number(/data-cursor="(\d+)"/.exec((await get(`${emu.url}/`)).text)?.[1]);
    const first = await sendEml(richEml({ subject: 'Missed 1', messageId: '<m1@shop>', attachment: Buffer.from('1') }));
    const second = await sendEml(
      richEml({ subject: 'Missed 2', messageId: '<m2@shop>', attachment: Buffer.from('2') }),
    );
    const ac = new AbortController();
    const res = await request(`${emu.url}/inbox/events?since=0`, {
      signal: ac.signal,
      headers: { 'last-event-id': String(cursor) },
    });
    const events = await readEvents(res.body, (list) => list.length >= 2);
    ac.abort();
    expect(events.map((e) => (JSON.parse(e.data) as { id: string }).id)).toEqual([copyOf(first).id, copyOf(second).id]);
  });

  it('announces emu.reset() and replays from scratch for a cursor from before it', async () => {
    const own = await startEmulator();
    try {
      await sendEml(richEml({ subject: 'Before', messageId: '<b@x>', attachment: Buffer.from('x') }), own);
      const cursor = Number(/data-cursor="(\d+)"/.exec((await get(`${own.url}/`)).text)?.[1]);
      const ac = new AbortController();
      const res = await request(`${own.url}/inbox/events?since=${cursor}`, { signal: ac.signal });
      own.reset();
      const after = await sendEml(richEml({ subject: 'After', messageId: '<a@x>', attachment: Buffer.from('y') }), own);
      const events = await readEvents(res.body, (list) => list.length >= 2);
      ac.abort();
      expect(events.map((e) => e.event)).toEqual(['reset', 'delivery']);
      expect((JSON.parse(events[1]!.data) as { id: string }).id).toBe(copyOf(after, 'ann@example.test', own).id);

      // A client that missed the reset gets it, then the current list.
      const late = await request(`${own.url}/inbox/events?since=${cursor}`, { signal: AbortSignal.timeout(5000) });
      const replay = await readEvents(late.body, (list) => list.length >= 2);
      late.body.destroy();
      expect(replay.map((e) => e.event)).toEqual(['reset', 'delivery']);
      expect((await get(`${own.url}/`)).text).not.toContain('Before');
    } finally {
      await own.close();
    }
  });

  it('forgets a client that went away and keeps streaming to the others', async () => {
    const gone = new AbortController();
    const stays = new AbortController();
    const left = await request(`${emu.url}/inbox/events?since=999999999`, { signal: gone.signal });
    const right = await request(`${emu.url}/inbox/events?since=999999999`, { signal: stays.signal });
    // A cursor from another run (larger than any here) first gets a reset, then the current list.
    const total = Number(/data-total="(\d+)"/.exec((await get(`${emu.url}/`)).text)?.[1]);
    expect(total).toBeGreaterThan(5);
    const readRight = eventReader(right.body);
    const replay = await readRight((list) => list.length >= 1 + total);
    expect(replay[0]!.event).toBe('reset');
    expect(replay.slice(1).every((e) => e.event === 'delivery')).toBe(true);
    expect(replay).toHaveLength(1 + total);
    gone.abort();
    left.body.on('error', () => undefined);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const ref = await sendEml(
      richEml({ subject: 'After one left', messageId: '<left@x>', attachment: Buffer.from('z') }),
    );
    const events = await readRight((list) => list.length >= 1);
    stays.abort();
    expect((JSON.parse(events[0]!.data) as { id: string }).id).toBe(copyOf(ref).id);
  });

  it('lets emu.close() resolve promptly with event streams open, ending them', async () => {
    const own = await startEmulator();
    const streams = await Promise.all([1, 2, 3].map(() => request(`${own.url}/inbox/events`)));
    const ended = streams.map((s) => readEvents(s.body, () => false));
    expect(own.url).toBeTruthy();
    const started = Date.now();
    await own.close();
    expect(Date.now() - started).toBeLessThan(1000);
    // Each stream was ended properly (a clean end of the chunked body), not cut off.
    for (const events of await Promise.all(ended)) expect(events).toEqual([]);
    // New requests are refused: the server is gone.
    await expect(request(`${own.url}/`)).rejects.toThrow();
  });
});

describe('a message opened in the inbox', () => {
  it('is parsed once for its HTML frame and every attachment download', async () => {
    const parser = await import('../../src/emulator/operations/send-operations.js');
    const ref = await sendEml(
      richEml({ subject: 'Parsed once', messageId: '<parsed-once@x>', attachment: Buffer.from('file body') }),
    );
    const copy = copyOf(ref);
    const spy = vi.spyOn(parser, 'parseMime');
    try {
      for (let i = 0; i < 3; i++) {
        expect((await get(`${emu.url}/inbox/messages/${copy.id}/html`)).status).toBe(200);
        expect((await get(`${emu.url}/inbox/messages/${copy.id}/attachments/0`)).status).toBe(200);
      }
      expect(spy.mock.calls.filter(([raw]) => raw === copy.raw)).toHaveLength(1);
    } finally {
      spy.mockRestore();
    }
  });
});
