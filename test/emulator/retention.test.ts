import { spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { MailpitClient } from 'mailpit-api';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/**
 * How much the emulator keeps: at most `maxMessages` (the oldest go, and are
 * counted), and with `dataDir` everything (messages, marks, groups,
 * members, unsubscribe links, hosted images, the ready key) across restarts.
 */

const PIXEL = Buffer.from('R0lGODlhAQABAPAAAP8AAP///yH5BAAAAAAALAAAAAABAAEAAAICRAEAOw==', 'base64');

async function sendEml(emu: Emulator, subject: string, to = 'ann@example.test'): Promise<void> {
  const eml = `From: app@example.test\r\nTo: ${to}\r\nSubject: ${subject}\r\n\r\nbody of ${subject}\r\n`;
  const res = await request(`${emu.url}/v1/send/eml`, {
    method: 'POST',
    headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ mail: Buffer.from(eml).toString('base64') }),
  });
  expect(res.statusCode, await res.body.text()).toBe(202);
}

describe('maxMessages', () => {
  it('keeps the newest messages, drops the oldest with their mailbox copies, and counts them', async () => {
    const emu = await startEmulator({ maxMessages: 3 });
    try {
      for (let i = 1; i <= 5; i++) await sendEml(emu, `m${i}`, i % 2 === 0 ? 'bob@example.test' : 'ann@example.test');
      const mailpit = new MailpitClient(emu.url);
      const list = await mailpit.listMessages();
      expect(list.messages.map((m) => m.Subject)).toEqual(['m5', 'm4', 'm3']);
      expect(list.total).toBe(3);
      expect(emu.mailbox('ann@example.test').map((c) => c.subject)).toEqual(['m3', 'm5']);
      expect(emu.mailbox('bob@example.test').map((c) => c.subject)).toEqual(['m4']);
      expect(emu.messages().map((m) => m.subject)).toEqual(['m3', 'm4', 'm5']);
      const info = (await mailpit.getInfo()) as unknown as { RuntimeStats: Record<string, number> };
      expect(info.RuntimeStats).toMatchObject({ MessagesDeleted: 2, MessagesDropped: 2, MaxMessages: 3 });
    } finally {
      await emu.close();
    }
  });

  it('refuses a limit below 1', async () => {
    await expect(startEmulator({ maxMessages: 0 })).rejects.toThrow(/maxMessages/);
  });
});

describe('dataDir', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'eml-api-data-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps messages, marks, groups, members, unsubscribe links, images and the key across a restart', async () => {
    const first = await startEmulator({ dataDir: dir, groups: ['news'] });
    const client = new EmlApiClient({ apiKey: first.apiKey, baseUrl: first.url });
    await client.addToGroup('news', [
      { email: 'ann@example.test', name: 'Ann', substitutions: { first: 'Ann' } },
      { email: 'bob@example.test' },
    ]);
    await client.sendToGroup('news', {
      from: 'news@example.test',
      subject: 'Hello {{first}}',
      textContent: {
        html: '<img src="{{logo}}"><a href="{{unsubscribe}}">leave</a>',
        images: [{ name: 'logo', data: PIXEL, mimeType: 'GIF' }],
      },
    });
    await sendEml(first, 'keep me');
    await sendEml(first, 'delete me');
    const mailpit = new MailpitClient(first.url);
    const before = await mailpit.listMessages();
    const keep = before.messages.find((m) => m.Subject === 'keep me')!;
    await mailpit.setReadStatus({ IDs: [keep.ID], Read: true });
    await mailpit.setTags({ IDs: [keep.ID], Tags: ['kept'] });
    await mailpit.deleteMessagesBySearch({ query: 'subject:"delete me"' });
    const annLetter = first.mailbox('ann@example.test').find((c) => c.subject === 'Hello Ann')!;
    const unsubscribe = /href="([^"]+\/unsubscribe\/[^"]+)"/.exec(annLetter.html!)![1]!;
    const image = /src="([^"]+\/images\/[0-9a-f]{64})"/.exec(annLetter.html!)![1]!;
    const key = first.apiKey;
    await client.close();
    await first.close();
    expect((await stat(dir)).mode & 0o777).toBe(0o700);

    const second = await startEmulator({ dataDir: dir });
    try {
      expect(second.apiKey).toBe(key);
      const again = new MailpitClient(second.url);
      const after = await again.listMessages();
      expect(after.messages.map((m) => [m.ID, m.Subject, m.Read, m.Tags])).toEqual(
        before.messages
          .filter((m) => m.Subject !== 'delete me')
          .map((m) => [m.ID, m.Subject, m.ID === keep.ID, m.ID === keep.ID ? ['kept'] : []]),
      );
      expect((await again.getMessageSource(keep.ID)).toString()).toContain('body of keep me');
      expect(second.members('news').map((m) => m.email)).toEqual(['ann@example.test', 'bob@example.test']);
      expect(second.mailbox('ann@example.test').map((c) => c.subject)).toEqual(['Hello Ann', 'keep me']);
      const sameOrigin = (url: string) => url.replace(/^http:\/\/127\.0\.0\.1:\d+/, second.url);
      const img = await request(sameOrigin(image));
      expect(img.statusCode).toBe(200);
      expect(Buffer.from(await img.body.arrayBuffer()).equals(PIXEL)).toBe(true);
      const left = await request(sameOrigin(unsubscribe), { method: 'POST' });
      expect(left.statusCode).toBe(200);
      await left.body.text();
      expect(second.members('news').map((m) => m.email)).toEqual(['bob@example.test']);
    } finally {
      await second.close();
    }

    const third = await startEmulator({ dataDir: dir, maxMessages: 1 });
    try {
      expect((await new MailpitClient(third.url).listMessages()).messages.map((m) => m.Subject)).toEqual(['keep me']);
      expect(third.members('news').map((m) => m.email)).toEqual(['bob@example.test']);
    } finally {
      await third.close();
    }
    expect((await readdir(join(dir, 'messages'))).filter((f) => f.endsWith('.eml'))).toHaveLength(1);
  });

  it('says which file is damaged rather than starting empty', async () => {
    await writeFile(join(dir, 'emulator.json'), '{ not json');
    await expect(startEmulator({ dataDir: dir })).rejects.toThrow(/damaged .*emulator\.json/);
    const first = await startEmulator({ dataDir: dir.concat('-fresh') });
    await first.close();
    const good = JSON.parse(await readFile(join(`${dir}-fresh`, 'emulator.json'), 'utf8')) as Record<string, unknown>;
    await rm(`${dir}-fresh`, { recursive: true });
    for (const [change, field] of [
      [{ apiKey: 'a\r\nb' }, 'apiKey'],
      [{ groups: 'x' }, 'groups'],
      [
        { groups: [{ id: 'g', members: [{ email: 'a@x.test', substitutions: { a: 1 }, addedAt: 'x' }] }] },
        'substitutions',
      ],
      [{ tickets: [['../x', { groupId: 'g', email: 'a@x.test' }]] }, 'tickets'],
      [{ images: [{ sha256: 'x', mimeType: 'PNG', lastUsedAt: '2030-01-01' }] }, 'images'],
    ] as const) {
      await writeFile(join(dir, 'emulator.json'), JSON.stringify({ ...good, ...change }));
      await expect(startEmulator({ dataDir: dir }), field).rejects.toThrow(
        new RegExp(`damaged .*emulator\\.json: \\S*${field}`),
      );
    }
  });

  /** A data directory with one message in it, and the path of that message's .json. */
  async function oneMessage(): Promise<string> {
    const emu = await startEmulator({ dataDir: dir });
    await sendEml(emu, 'saved');
    await emu.close();
    const [json] = (await readdir(join(dir, 'messages'))).filter((f) => f.endsWith('.json'));
    return join(dir, 'messages', json!);
  }

  it('refuses to start on a message record of the wrong shape, naming the file and the field', async () => {
    const file = await oneMessage();
    const saved = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    for (const [change, field] of [
      [{ created: 'garbage' }, /created/],
      [{ tags: 'x' }, /tags/],
      [{ copies: [{ id: 5, to: null }] }, /copies/],
      [{ attachments: 'x' }, /attachments/],
      [{ subject: 7 }, /subject/],
      [{ read: 'yes' }, /read/],
      [{ copies: [{ id: '../../x', to: 'ann@example.test' }] }, /copies/],
    ] as const) {
      await writeFile(file, JSON.stringify({ ...saved, ...change }));
      const started = startEmulator({ dataDir: dir });
      await expect(started, JSON.stringify(change)).rejects.toMatchObject({ code: 'ECONFIG' });
      await expect(started).rejects.toThrow(
        new RegExp(`damaged .*${file.split('/').pop()!.replace('.', '\\.')}.*${field.source}`),
      );
    }
    for (const damaged of ['[1,2]', '{"id":']) {
      await writeFile(file, damaged);
      await expect(startEmulator({ dataDir: dir })).rejects.toThrow(/damaged/);
      // Nothing was deleted on the way.
      expect((await readdir(join(dir, 'messages'))).sort()).toHaveLength(2);
    }
    await writeFile(file, JSON.stringify(saved));
    const emu = await startEmulator({ dataDir: dir });
    try {
      expect((await new MailpitClient(emu.url).listMessages()).messages.map((m) => m.Subject)).toEqual(['saved']);
    } finally {
      await emu.close();
    }
  });

  it('after a crash, drops what was half-written (a lone .eml, temporary files) and a damaged image', async () => {
    const file = await oneMessage();
    const messages = join(dir, 'messages');
    // A crash between the .eml and its .json, and during an atomic write.
    await writeFile(join(messages, '000000000099-dlv_crashed.eml'), 'From: a@example.test\r\nTo: b@exa');
    await writeFile(`${file}.tmp`, '{"id":"dl');
    // A hosted image cut short, as a crash mid-write left it with earlier versions.
    const first = await startEmulator({ dataDir: dir });
    const client = new EmlApiClient({ apiKey: first.apiKey, baseUrl: first.url });
    await client.sendEmail({
      from: 'app@example.test',
      to: 'ann@example.test',
      subject: 'pixel',
      textContent: { html: '<img src="{{logo}}">', images: [{ name: 'logo', data: PIXEL, mimeType: 'GIF' }] },
    });
    await client.close();
    await first.close();
    const [sha] = await readdir(join(dir, 'images'));
    await writeFile(join(dir, 'images', sha!), PIXEL.subarray(0, 10));

    const emu = await startEmulator({ dataDir: dir });
    try {
      expect((await new MailpitClient(emu.url).listMessages()).messages.map((m) => m.Subject)).toEqual([
        'pixel',
        'saved',
      ]);
      const image = await request(`${emu.url}/images/${sha}`);
      await image.body.text();
      expect(image.statusCode).toBe(404);
    } finally {
      await emu.close();
    }
    const left = await readdir(messages);
    expect(left.filter((f) => f.includes('crashed') || f.endsWith('.tmp'))).toEqual([]);
    expect(left).toHaveLength(4);
  });

  it('keeps one unsubscribe link per member, however many emails its group gets', async () => {
    const emu = await startEmulator({ dataDir: dir, groups: ['news'] });
    const client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
    try {
      await client.addToGroup('news', [{ email: 'ann@example.test' }, { email: 'bob@example.test' }]);
      for (let i = 0; i < 30; i++) {
        await client.sendToGroup('news', {
          from: 'news@example.test',
          subject: `issue ${i}`,
          textContent: { text: 'leave: {{unsubscribe}}' },
        });
      }
      const links = (to: string) => new Set(emu.mailbox(to).map((c) => /\/unsubscribe\/\S+/.exec(c.text!)![0]));
      expect(links('ann@example.test').size).toBe(1);
      expect(links('bob@example.test').size).toBe(1);
      const [first] = links('ann@example.test');
      const left = await request(`${emu.url}${first}`, { method: 'POST' });
      await left.body.text();
      expect(emu.members('news').map((m) => m.email)).toEqual(['bob@example.test']);
    } finally {
      await client.close();
      await emu.close();
    }
    const saved = JSON.parse(await readFile(join(dir, 'emulator.json'), 'utf8')) as { tickets: unknown[] };
    expect(saved.tickets).toHaveLength(1);
  });

  it('is used by one emulator at a time: a second one is refused until the first closes', async () => {
    const first = await startEmulator({ dataDir: dir });
    try {
      const second = startEmulator({ dataDir: dir });
      await expect(second).rejects.toMatchObject({ code: 'ECONFIG' });
      await expect(second).rejects.toThrow(/in use/);
      // From another process too.
      const script = `import('${new URL('../../src/emulator/index.ts', import.meta.url).pathname}').then((m) => m.startEmulator({ dataDir: ${JSON.stringify(dir)} })).then((e) => e.close().then(() => console.log('started')), (e) => console.log(e.code, e.message))`;
      const other = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], { encoding: 'utf8' });
      expect(other.stdout).toMatch(/^ECONFIG .*in use by process \d+/);
    } finally {
      await first.close();
    }
    const third = await startEmulator({ dataDir: dir });
    await third.close();
  });

  it('takes over the lock of an emulator that died, and gives it back when it cannot start', async () => {
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    await writeFile(join(dir, 'emulator.lock'), JSON.stringify({ pid: Number(dead.stdout), hostname: hostname() }));
    const taken = await startEmulator({ dataDir: dir });
    await taken.close();
    // A port in use: the start fails after the directory was opened, and leaves it free.
    const busy = createServer().listen(0, '127.0.0.1');
    await new Promise((resolve) => busy.once('listening', resolve));
    try {
      const port = (busy.address() as { port: number }).port;
      await expect(startEmulator({ dataDir: dir, port })).rejects.toThrow(/EADDRINUSE/);
    } finally {
      busy.close();
    }
    const again = await startEmulator({ dataDir: dir });
    await again.close();
  });
});
