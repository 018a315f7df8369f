import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient } from '../../src/index.js';

/**
 * The contract's "web pages": the inbox, its event feed and the groups page
 * show every captured message (password-reset tokens included) to whoever
 * can reach them, so they answer only loopback Host names or ones allowed
 * explicitly: a page on another site that rebinds its own name to 127.0.0.1
 * (DNS rebinding) gets nothing. Unsubscribe pages and hosted images stay public.
 */

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ groups: ['news'], allowedHosts: ['inbox.team.test'] });
});
afterAll(() => emu.close());

async function get(path: string, host: string) {
  const res = await request(`${emu.url}${path}`, { headers: { host } });
  return { status: res.statusCode, text: await res.body.text() };
}

const INBOX_PATHS = ['/', '/inbox/groups', '/inbox/events?since=0', '/inbox/messages/dlv_0000'];

describe('the web inbox', () => {
  it.each(['evil.example', 'evil.example:8025', '127.0.0.1.evil.example', 'localhost.evil.example'])(
    'refuses Host %s with 403 on every inbox path',
    async (host) => {
      for (const path of INBOX_PATHS) {
        const answer = await get(path, host);
        expect(answer.status, path).toBe(403);
        expect(answer.text).toContain('allowedHosts');
      }
    },
  );

  it.each(['192.168.1.20', '10.0.0.5:8025', '0.0.0.0', '169.254.169.254'])(
    'refuses Host %s, an IPv4 address outside 127.0.0.0/8 (the emulator reached from the network by its address), with 403',
    async (host) => {
      for (const path of INBOX_PATHS) {
        const answer = await get(path, host);
        expect(answer.status, path).toBe(403);
        expect(answer.text).toContain('allowedHosts');
      }
    },
  );

  it('answers loopback names and addresses, with or without a port, and hosts allowed explicitly', async () => {
    for (const host of [
      'localhost',
      `localhost:${emu.port}`,
      `127.0.0.1:${emu.port}`,
      '127.0.0.2',
      `[::1]:${emu.port}`,
      'app.localhost',
      'inbox.team.test',
      `INBOX.team.test:${emu.port}`,
    ]) {
      expect((await get('/', host)).status, host).toBe(200);
    }
  });

  it('leaves unsubscribe pages and hosted images public, and the API to its keys', async () => {
    expect((await get('/unsubscribe/not-a-token', 'evil.example')).status).toBe(404);
    expect((await get(`/images/${'0'.repeat(64)}`, 'evil.example')).status).toBe(404);
    const api = await request(`${emu.url}/v1/group/news/check/a%40b.test`, {
      headers: { host: 'evil.example', 'x-api-key': emu.apiKey },
    });
    expect(api.statusCode).toBe(200);
    await api.body.text();
  });
});

describe('an emulator listening on every interface', () => {
  it('gives a URL that works (127.0.0.1, not 0.0.0.0) and puts the public URL in links', async () => {
    const wide = await startEmulator({ host: '0.0.0.0', groups: ['news'], publicUrl: 'http://emulator.lan:9000/' });
    try {
      expect(wide.url).toBe(`http://127.0.0.1:${wide.port}`);
      const client = new EmlApiClient({ apiKey: wide.apiKey, baseUrl: wide.url });
      await client.addToGroup('news', ['ann@example.test']);
      await client.sendToGroup('news', {
        from: 'n@example.test',
        subject: 's',
        textContent: { html: '<a href="{{unsubscribe}}">u</a>' },
      });
      await client.close();
      const [copy] = wide.mailbox('ann@example.test');
      expect(copy!.html).toContain('href="http://emulator.lan:9000/unsubscribe/');
      expect(copy!.raw.toString()).toContain('<http://emulator.lan:9000/unsubscribe/');
      // The public URL's host may open the inbox.
      const res = await request(`${wide.url}/`, { headers: { host: 'emulator.lan:9000' } });
      expect(res.statusCode).toBe(200);
      await res.body.text();
    } finally {
      await wide.close();
    }
  });
});
