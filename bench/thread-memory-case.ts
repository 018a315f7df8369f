/**
 * What a build thread costs in memory, in a fresh process. Usage:
 *   thread-memory-case.ts <sinkUrl> <threads>
 * Sends with a transport without threads first (every module loaded, the
 * baseline settled), then 400 messages through a second transport with
 * `threads` build threads (0: none, the reference), 10 at a time so each
 * thread builds, and takes the RSS once settled again. Against the run with
 * 0 threads, the difference is what the threads hold while idle: their
 * isolates, Nodemailer loaded in each, their heaps after work. Runs the
 * built package (dist/), as an app would: from source a thread also loads
 * tsx. Prints { baselineRss, rss, extraMb } as JSON.
 */
import nodemailer from 'nodemailer';
import type * as Package from '../src/index.js';
import { benchMessage } from './bench-message.js';

// The built package, loaded by path so that type-checking a fresh clone (no dist/ yet) does not
// depend on a build; its types are the source's.
const builtEntry = new URL('../dist/index.js', import.meta.url).href;
const { EmlApiTransport } = (await import(builtEntry)) as typeof Package;

const [sinkUrl, threadsArg] = process.argv.slice(2) as [string, string];
const gc = (globalThis as { gc?: () => void }).gc;

async function sendAll(transport: Package.EmlApiTransport, count: number): Promise<void> {
  const transporter = nodemailer.createTransport(transport);
  let next = 0;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (next < count) await transporter.sendMail(benchMessage(next++));
    }),
  );
}

async function settledRss(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc?.();
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return process.memoryUsage.rss();
}

const plain = new EmlApiTransport({ apiKey: 'k', baseUrl: sinkUrl, retry: false, maxConnections: 10 });
await sendAll(plain, 400);
const baselineRss = await settledRss();
const threaded = new EmlApiTransport({
  apiKey: 'k',
  baseUrl: sinkUrl,
  retry: false,
  maxConnections: 10,
  buildThreads: Number(threadsArg),
});
await sendAll(threaded, 400);
const rss = await settledRss();
await threaded.close();
await plain.close();
console.log(JSON.stringify({ baselineRss, rss, extraMb: (rss - baselineRss) / 2 ** 20 }));
