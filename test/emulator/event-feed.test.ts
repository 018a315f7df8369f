import { connect, type Socket } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient } from '../../src/index.js';
import { eventually } from '../helpers/async.js';

/**
 * The inbox's live feed (/inbox/events) costs the emulator a bounded amount
 * of memory whatever its clients do: streams are capped, a replay is capped,
 * and a client that stops reading is written to only as fast as it reads.
 */

let emu: Emulator;
let client: EmlApiClient;

beforeAll(async () => {
  emu = await startEmulator({ groups: ['crowd'] });
  client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
});
afterAll(async () => {
  await client.close();
  await emu.close();
});

/** Sends one group email to `members` new members: that many deliveries in one request. */
async function deliver(members: number, subject: string): Promise<void> {
  emu.reset();
  const entries = Array.from({ length: members }, (_, i) => `m${i}@crowd.example`);
  await client.addToGroup('crowd', entries, { batchSize: 1000 });
  await client.sendToGroup('crowd', { from: 'n@example.test', subject, textContent: { text: 'x' } });
}

/** A raw HTTP/1.1 GET of the event stream on a socket the test reads (or not) itself. */
function openStream(since: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(emu.port, '127.0.0.1', () => {
      socket.write(`GET /inbox/events?since=${since} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

describe('the inbox event feed', () => {
  it('refuses more than 50 open streams with 503, and takes new ones once others close', async () => {
    const controllers = Array.from({ length: 50 }, () => new AbortController());
    const open = await Promise.all(controllers.map((c) => request(`${emu.url}/inbox/events`, { signal: c.signal })));
    for (const res of open) expect(res.statusCode).toBe(200);
    const refused = await request(`${emu.url}/inbox/events`);
    expect(refused.statusCode).toBe(503);
    expect(await refused.body.text()).toContain('open event streams');
    for (const [i, c] of controllers.entries()) {
      c.abort();
      open[i]!.body.on('error', () => undefined);
    }
    // The emulator sees them close as their sockets end: a new stream is taken once it has.
    const again = new AbortController();
    await eventually(async () => {
      const res = await request(`${emu.url}/inbox/events`, { signal: again.signal });
      if (res.statusCode === 200) {
        res.body.on('error', () => undefined);
        return true;
      }
      expect(res.statusCode).toBe(503);
      await res.body.text();
      return false;
    });
    again.abort();
  });

  it('replays at most the newest 500 deliveries, after a reset', async () => {
    await deliver(620, 'Replay');
    const socket = await openStream(0);
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
    await eventually(() => (text.match(/^event: delivery$/gm) ?? []).length >= 500);
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.destroy();
    expect(text.match(/^event: reset$/gm)).toHaveLength(1);
    expect(text.match(/^event: delivery$/gm)).toHaveLength(500);
  });

  it('writes to a client that stops reading only as fast as it reads, then catches it up', async () => {
    emu.reset();
    const socket = await openStream(999_999_999);
    let received = 0;
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
      text += chunk.toString();
    });
    await eventually(() => text.includes('retry:'));
    socket.pause();
    // About 2,000 events of some 10 KB each: far more than the socket buffers hold.
    await deliver(2000, `Large ${'x'.repeat(5000)}`);
    socket.resume();
    await eventually(() => (text.match(/^event: reset$/gm) ?? []).length >= 1, { timeout: 20_000 });
    // The newest 500 follow the reset; nothing arrives after them (the deliveries are over).
    const afterReset = () => text.slice(text.lastIndexOf('event: reset')).match(/^event: delivery$/gm)?.length ?? 0;
    await eventually(() => afterReset() >= 500, { timeout: 20_000 });
    socket.destroy();
    // Some deliveries arrived before the client lagged; then one reset (besides the ones emu.reset()
    // sent) and the newest 500: never all 2,000.
    const afterLag = text.slice(text.lastIndexOf('event: reset'));
    expect(text.indexOf('event: delivery')).toBeLessThan(text.lastIndexOf('event: reset'));
    expect(afterLag.match(/^event: delivery$/gm)).toHaveLength(500);
    expect((text.match(/^event: delivery$/gm) ?? []).length).toBeLessThan(2000);
    expect(received).toBeLessThan(2000 * 10_000);
  });
});
