/**
 * The emulator's inbox at size, in a fresh process (run with --expose-gc). Usage:
 *   inbox-case.ts
 * Fills an emulator (default retention, 10,000 messages) through its API,
 * measures list and search latency over HTTP (Mailpit's API v1 and the web
 * inbox page) at 1,000 and 10,000 messages, and RSS after each 10,000 sends
 * up to 50,000. Prints one JSON line.
 */
import { Agent } from 'undici';
import { startEmulator } from '../src/emulator/index.js';

const emu = await startEmulator({ onInternalError: (err) => console.error(err) });
const agent = new Agent({ connections: 8 });
const origin = emu.url;

/** A realistic transactional message: text and HTML, some 2.5 KB. */
function eml(n: number): string {
  const kind = ['Order', 'Password reset', 'Welcome', 'Invoice', 'Shipping update'][n % 5]!;
  const para = `Thanks for shopping with us. Your ${kind.toLowerCase()} number ${n} is below. `.repeat(6);
  return [
    'From: "Shop" <shop@example.test>',
    `To: customer${n % 700}@example.test`,
    `Subject: ${kind} #${n}`,
    `Message-ID: <bench-${n}@example.test>`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/alternative; boundary="b"',
    '',
    '--b',
    'Content-Type: text/plain; charset=utf-8',
    '',
    para,
    '--b',
    'Content-Type: text/html; charset=utf-8',
    '',
    `<html><body><h1>${kind}</h1><p>${para}</p><p><a href="https://shop.example.test/o/${n}">View</a></p></body></html>`,
    '--b--',
    '',
  ].join('\r\n');
}

let sent = 0;
async function send(count: number): Promise<void> {
  const end = sent + count;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (sent < end) {
        const n = sent++;
        const res = await agent.request({
          origin,
          path: '/v1/send/eml',
          method: 'POST',
          headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
          body: JSON.stringify({ mail: Buffer.from(eml(n)).toString('base64') }),
        });
        await res.body.text();
        if (res.statusCode !== 202) throw new Error(`send ${n}: ${res.statusCode}`);
      }
    }),
  );
}

/** Median latency of `path` in ms over `rounds` requests one at a time, after 5 warm-ups. */
async function latency(path: string, rounds = 40): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < rounds + 5; i++) {
    const started = performance.now();
    const res = await agent.request({ origin, path, method: 'GET' });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`${path}: ${res.statusCode}`);
    if (i >= 5) times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1]!;
}

const QUERIES = {
  list: '/api/v1/messages?limit=50',
  listDeep: '/api/v1/messages?start=900&limit=50',
  searchSubject: `/api/v1/search?query=${encodeURIComponent('subject:invoice')}`,
  searchText: `/api/v1/search?query=${encodeURIComponent('"number 777 is"')}`,
  searchAddress: `/api/v1/search?query=${encodeURIComponent('to:customer42@ -is:read')}`,
  inboxPage: '/',
  inboxSearchPage: `/?query=${encodeURIComponent('subject:invoice')}`,
  info: '/api/v1/info',
};

async function measureAll(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [name, path] of Object.entries(QUERIES)) out[name] = await latency(path);
  return out;
}

const gc = (globalThis as { gc?: () => void }).gc ?? (() => undefined);
const rss = async () => {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 100));
  gc();
  return process.memoryUsage.rss() / 2 ** 20;
};

const emptyRss = await rss();
const started = performance.now();
await send(1000);
const at1k = await measureAll();
await send(9000);
const at10k = await measureAll();
const rssAfter: Record<string, number> = { 10000: await rss() };
for (const total of [20_000, 30_000, 40_000, 50_000]) {
  await send(total - sent);
  rssAfter[total] = await rss();
}
const sendSeconds = (performance.now() - started) / 1000;
const kept = emu.messages().length;
await agent.close();
await emu.close();
console.log(JSON.stringify({ emptyRss, at1k, at10k, rssAfter, kept, sent, sendSeconds }));
