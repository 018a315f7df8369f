import { Readable } from 'node:stream';
import { MailpitClient } from 'mailpit-api';
import { Client, request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/run-cli.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/**
 * The inbox and its inspection API against a hostile client or hostile mail:
 * odd IDs and queries, oversized requests, Host tricks, login bypasses and
 * markup in messages.
 */

let emu: Emulator;
let mailpit: MailpitClient;

beforeAll(async () => {
  emu = await startEmulator();
  mailpit = new MailpitClient(emu.url);
});
afterAll(() => emu.close());
beforeEach(() => emu.reset());

async function sendEml(target: Emulator, lines: string[]): Promise<void> {
  const res = await request(`${target.url}/v1/send/eml`, {
    method: 'POST',
    headers: { 'x-api-key': target.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ mail: Buffer.from(lines.join('\r\n')).toString('base64') }),
  });
  expect(res.statusCode, await res.body.text()).toBe(202);
}

async function raw(
  path: string,
  options: {
    method?: 'GET' | 'PUT' | 'DELETE' | 'POST' | 'HEAD' | 'OPTIONS';
    headers?: Record<string, string>;
    body?: string;
    target?: Emulator;
  } = {},
) {
  const res = await request(`${(options.target ?? emu).url}${path}`, {
    method: options.method ?? 'GET',
    headers: options.headers,
    body: options.body,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

describe('odd IDs, queries and bodies', () => {
  it('answers 4xx, never 5xx, to odd IDs, parameters and bodies', async () => {
    await sendEml(emu, ['From: a@example.test', 'To: b@example.test', 'Subject: x', '', 'x']);
    for (const path of [
      '/api/v1/message/%',
      '/api/v1/message/..%2F..%2Fetc%2Fpasswd',
      '/api/v1/message/latest/part/%00',
      '/api/v1/message/__proto__',
      '/api/v1/message/constructor/raw',
      `/api/v1/message/${'x'.repeat(1500)}`,
      '/api/v1/messages?start=-5&limit=abc',
      '/api/v1/messages?start=1e400&limit=99999999999999999999',
      '/api/v1/messages?before=not-a-date',
      `/api/v1/search?query=${encodeURIComponent('"'.repeat(3000))}`,
      `/api/v1/search?query=${encodeURIComponent('after:2025-13-45 before:x larger:huge smaller:-1 tag: from: is:nothing')}`,
      '/api/v1/search?query=x&tz=Not/AZone',
      '/view/%E0%A4%A.html',
      '/api/v1/nothing',
    ]) {
      const answer = await raw(path);
      expect(answer.status, `${path}: ${answer.text.slice(0, 100)}`).toBeLessThan(500);
    }
    for (const [method, path, body] of [
      ['PUT', '/api/v1/messages', '{"Read": "yes"}'],
      ['PUT', '/api/v1/messages', '{"IDs": "all", "Read": true}'],
      ['PUT', '/api/v1/messages', '[1,2]'],
      ['DELETE', '/api/v1/messages', '{"IDs": [1]}'],
      ['DELETE', '/api/v1/messages', 'not json'],
      ['PUT', '/api/v1/tags', '{"IDs": ["x"], "Tags": "a"}'],
      ['PUT', '/api/v1/tags/a', '{"Name": "!!!"}'],
    ] as const) {
      const answer = await raw(path, { method, body, headers: { 'content-type': 'application/json' } });
      expect(answer.status, `${method} ${path} ${body}: ${answer.text}`).toBe(400);
    }
    // Nothing was deleted by the bad bodies.
    expect((await mailpit.listMessages()).total).toBe(1);
  });

  it('refuses more than 100 tags on a message, from the API or an X-Tags header', async () => {
    await sendEml(emu, [
      'From: a@example.test',
      'To: b@example.test',
      `X-Tags: ${Array.from({ length: 500 }, (_, i) => `t${i}`).join(',')}`,
      'Subject: many tags',
      '',
      'x',
    ]);
    const [message] = (await mailpit.listMessages()).messages;
    expect(message!.Tags).toHaveLength(100);
    const tags = Array.from({ length: 101 }, (_, i) => `tag${i}`);
    await expect(mailpit.setTags({ IDs: [message!.ID], Tags: tags })).rejects.toThrow(/400.*at most 100 tags/);
  });

  it('rewrites thousands of cid: images of a large HTML body, each to its part', async () => {
    const parts = 900;
    const lines = [
      'From: a@example.test',
      'To: b@example.test',
      'Subject: many images',
      'MIME-Version: 1.0',
      'Content-Type: multipart/related; boundary="r"',
      '',
      '--r',
      'Content-Type: text/html',
      '',
      `${Array.from({ length: parts }, (_, i) => `<img src="cid:img${i}@x">`).join('')}${'<p>filler</p>'.repeat(20_000)}`,
    ];
    for (let i = 0; i < parts; i++) {
      lines.push(
        '--r',
        'Content-Type: image/gif',
        `Content-ID: <img${i}@x>`,
        'Content-Disposition: inline',
        '',
        'R0lGOD',
      );
    }
    lines.push('--r--', '');
    await sendEml(emu, lines);
    const html = await mailpit.renderMessageHTML();
    const id = (await mailpit.listMessages()).messages[0]!.ID;
    expect(html).not.toContain('cid:');
    expect(html).toContain(`<img src="/api/v1/message/${id}/part/${parts + 1}">`);
  });

  it('reads a file name of hundreds of KB split in RFC 2231 pieces, without failing the send', async () => {
    const words = Array.from({ length: 300 }, (_, i) => `${i}${'n'.repeat(900)}`);
    // The first piece one quoted string folded over 200 lines (unfolded, a space at each fold), the rest percent-encoded.
    const name = `${words.slice(0, 200).join(' ')}${words.slice(200).join('')}.pdf`;
    await sendEml(emu, [
      'From: a@example.test',
      'To: b@example.test',
      'Subject: long name',
      'Content-Type: multipart/mixed; boundary="m"',
      '',
      '--m',
      'Content-Type: text/plain',
      '',
      'see attached',
      '--m',
      `Content-Type: application/pdf; name*0="${words.slice(0, 200).join('\r\n ')}";`,
      ...[...words.slice(200), '.pdf'].map((w, i) => ` name*${i + 1}*=${w.replace(/n/g, '%6E')};`),
      'Content-Disposition: attachment',
      '',
      'x',
      '--m--',
      '',
    ]);
    const message = await mailpit.getMessageSummary();
    expect(message.Attachments.map((a) => a.FileName === name)).toEqual([true]);
  });
});

describe('parts of a message served by the API', () => {
  it('serve an HTML or SVG attachment inert: sandboxed, no script, never sniffed', async () => {
    await sendEml(emu, [
      'From: a@example.test',
      'To: b@example.test',
      'Subject: parts',
      'Content-Type: multipart/mixed; boundary="m"',
      '',
      '--m',
      'Content-Type: text/plain',
      '',
      'see attached',
      '--m',
      'Content-Type: text/html',
      'Content-Disposition: attachment; filename="page.html"',
      '',
      '<script>fetch("/api/v1/messages",{method:"DELETE"})</script>',
      '--m',
      'Content-Type: image/svg+xml',
      'Content-Disposition: attachment; filename="a\r\nSet-Cookie: x=1.svg"',
      '',
      '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
      '--m--',
      '',
    ]);
    const message = await mailpit.getMessageSummary();
    expect(message.Attachments.map((a) => a.ContentType)).toEqual(['text/html', 'image/svg+xml']);
    for (const part of message.Attachments) {
      const answer = await raw(`/api/v1/message/${message.ID}/part/${part.PartID}`);
      expect(answer.status).toBe(200);
      expect(answer.headers['content-security-policy']).toBe("sandbox; default-src 'none'");
      expect(answer.headers['x-content-type-options']).toBe('nosniff');
      expect(answer.headers['set-cookie']).toBeUndefined();
    }
  });
});

describe('Host tricks', () => {
  it('answers the inspection API and the inbox only for loopback or allowed hosts', async () => {
    for (const host of [
      'evil.example',
      '127.0.0.1.evil.example',
      '[::1]evil.example',
      '[::1].evil.example:80',
      'localhost:80@evil.example',
      '',
    ]) {
      for (const path of ['/api/v1/messages', '/view/latest.html', '/inbox/list', '/']) {
        const answer = await raw(path, { headers: { host } });
        expect(answer.status, `${host} ${path}`).toBe(403);
      }
    }
  });
});

describe('requests from other origins', () => {
  it('refuses to delete, mark or tag for a page of another origin, whatever the content type', async () => {
    await sendEml(emu, ['From: a@example.test', 'To: b@example.test', 'Subject: keep me', '', 'x']);
    const [message] = (await mailpit.listMessages()).messages;
    const changes = [
      ['DELETE', '/api/v1/messages', ''],
      ['DELETE', '/api/v1/messages', `{"IDs":["${message!.ID}"]}`],
      ['DELETE', '/api/v1/search?query=keep', ''],
      ['PUT', '/api/v1/messages', '{"Read":true}'],
      ['PUT', '/api/v1/tags', `{"IDs":["${message!.ID}"],"Tags":["x"]}`],
      ['POST', '/api/v1/send', '{}'],
    ] as const;
    for (const origin of [
      'http://evil.example',
      'null',
      `http://127.0.0.1:${emu.port === 1 ? 2 : 1}`,
      'http://localhost',
    ]) {
      for (const [method, path, body] of changes) {
        for (const type of ['application/json', 'text/plain', 'application/x-www-form-urlencoded']) {
          const answer = await raw(path, { method, body, headers: { origin, 'content-type': type } });
          expect(answer.status, `${origin} ${method} ${path} ${type}`).toBe(403);
        }
      }
      for (const path of ['/api/v1/messages', '/inbox/list', '/inbox/events']) {
        expect((await raw(path, { headers: { origin } })).status, `${origin} GET ${path}`).toBe(403);
      }
    }
    const after = (await mailpit.listMessages()).messages;
    expect(after.map((m) => [m.Subject, m.Read, m.Tags])).toEqual([['keep me', false, []]]);
    // The inbox's own page sends its origin: it may.
    const own = await raw('/api/v1/messages', {
      method: 'PUT',
      body: '{"Read":true}',
      headers: { origin: emu.url, 'content-type': 'application/json' },
    });
    expect(own.status).toBe(200);
  });
});

describe('the inbox login', () => {
  let locked: Emulator;
  const auth = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  beforeAll(async () => {
    locked = await startEmulator({ inboxLogin: { username: 'team', password: 'correct horse' }, groups: ['g'] });
  });
  afterAll(() => locked.close());

  it('cannot be bypassed: every reading path, method and spelling asks for it', async () => {
    await sendEml(locked, ['From: a@example.test', 'To: b@example.test', 'Subject: secret 123456', '', 'x']);
    const paths = [
      '/',
      '/?query=secret',
      '/inbox/list',
      '/inbox/groups',
      '/inbox/events',
      '/inbox/messages/latest',
      `/inbox/messages/${locked.mailbox('b@example.test')[0]!.id}`,
      `/inbox/messages/${locked.mailbox('b@example.test')[0]!.id}/raw`,
      '/api/v1',
      '/api/v1/',
      '/api/v1/info',
      '/api/v1/messages',
      '/api/v1/message/latest',
      '/view/latest.html',
      '/view/latest.txt',
      '/view/latest',
    ];
    const headers: Record<string, string>[] = [
      {},
      { authorization: auth('team', 'wrong') },
      { authorization: auth('team', '') },
      { authorization: auth('', 'correct horse') },
      { authorization: 'Basic' },
      { authorization: 'Bearer correct horse' },
      { authorization: `basic ${Buffer.from('team:correct horsex').toString('base64')}` },
    ];
    for (const path of paths) {
      for (const method of ['GET', 'HEAD'] as const) {
        for (const h of headers) {
          const answer = await raw(path, { method, headers: h, target: locked });
          expect(answer.status, `${method} ${path} ${JSON.stringify(h)}`).toBe(401);
          expect(answer.text).not.toContain('secret');
        }
      }
    }
    for (const method of ['PUT', 'DELETE', 'POST', 'OPTIONS'] as const) {
      const answer = await raw('/api/v1/messages', { method, body: '{}', target: locked });
      expect(answer.status, method).toBe(401);
    }
    expect(locked.mailbox('b@example.test')).toHaveLength(1);
    // Paths the login does not guard hold no mail: the API has its keys, the rest is 404.
    for (const path of [
      '//api/v1/messages',
      '/API/V1/messages',
      '/inbox',
      '/%61pi/v1/messages',
      '/api/v1/../api/v1/messages',
    ]) {
      const answer = await raw(path, { target: locked });
      expect(answer.status, path).toBe(404);
      expect(answer.text).not.toContain('secret');
    }
    // Dot segments sent as they are (no URL parsing on the way): still asked for the login.
    const client = new Client(locked.url);
    try {
      for (const path of ['/api/v1/../api/v1/messages', '/inbox/../api/v1/messages', '/view/../api/v1/messages']) {
        const res = await client.request({ method: 'GET', path });
        const text = await res.body.text();
        expect(res.statusCode, path).toBe(401);
        expect(text).not.toContain('secret');
      }
    } finally {
      await client.close();
    }
    const ok = await raw('/api/v1/messages', {
      headers: { authorization: auth('team', 'correct horse') },
      target: locked,
    });
    expect(ok.status).toBe(200);
    expect(ok.text).toContain('secret 123456');
  });

  it('keeps the Host rule with the login: a right password for a foreign Host is still refused', async () => {
    const answer = await raw('/api/v1/messages', {
      headers: { host: 'evil.example', authorization: auth('team', 'correct horse') },
      target: locked,
    });
    expect(answer.status).toBe(403);
  });
});

describe('markup in mail, shown in the inbox', () => {
  it('stays text in rows, the feed, the message page and the CLI', async () => {
    const evil = '<img src=x onerror=alert(1)>';
    await sendEml(emu, [
      `From: "${evil}" <a@example.test>`,
      `To: "</td><script>alert(2)</script>" <b@example.test>`,
      `Subject: =?UTF-8?B?${Buffer.from('<svg onload=alert(3)>\u001b]0;pwned\u0007').toString('base64')}?=`,
      'Content-Type: multipart/mixed; boundary="m"',
      '',
      '--m',
      'Content-Type: text/plain',
      '',
      `see https://x.test/"onmouseover="alert(4) and ${evil}`,
      '--m',
      'Content-Type: text/calendar',
      '',
      'BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:<script>alert(5)</script>\r\nLOCATION:"><img src=x>\r\nEND:VEVENT\r\nEND:VCALENDAR',
      '--m--',
      '',
    ]);
    const id = emu.mailbox('b@example.test')[0]!.id;
    for (const path of ['/', `/inbox/messages/${id}`, '/inbox/list']) {
      const page = await raw(path);
      expect(page.text, path).not.toMatch(/<img src=x|<script>alert|<svg onload|" ?onmouseover="/);
    }
    const page = await raw(`/inbox/messages/${id}`);
    expect(page.text).toContain('&lt;svg onload=alert(3)&gt;');
    expect(page.text).toContain(
      '<a href="https://x.test/" target="_blank" rel="noopener noreferrer">https://x.test/</a>',
    );
    let stdout = '';
    await runCli(['inbox', 'list'], {
      stdout: { write: (s: string) => ((stdout += s), true) },
      stderr: { write: () => true },
      stdin: Readable.from([]),
      env: { EML_API_URL: emu.url },
    });
    // eslint-disable-next-line no-control-regex -- looks for control characters
    expect(stdout).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
    expect(stdout).toContain('<svg onload=alert(3)>');
  });
});
