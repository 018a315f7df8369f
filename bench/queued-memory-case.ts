/**
 * Memory of many queued sends, in a fresh process. Usage:
 *   queued-memory-case.ts <sinkUrl> <count> <maxConnections>
 * Sends <count> messages with a 1.4 MB attachment each at once (one Buffer,
 * shared, allocated before the baseline: the app's own data) and prints
 * { baselineRss, peakRss, extraMb }: the peak RSS, sampled every millisecond,
 * above the warmed-up baseline. A transport that built every queued message
 * before it waited for a connection would hold them all.
 */
import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { EmlApiTransport } from '../src/index.js';
import { startPeakRss } from './peak-rss.js';

const [sinkUrl, count, maxConnections] = process.argv.slice(2) as [string, string, string];
const attachment = randomBytes(1.4 * 1024 * 1024);
const transport = new EmlApiTransport({
  apiKey: 'k',
  baseUrl: sinkUrl,
  retry: false,
  maxConnections: Number(maxConnections),
  timeouts: { total: 600_000 },
});
const transporter = nodemailer.createTransport(transport);
const message = (i: number) => ({
  from: 'a@example.test',
  to: `r${i}@example.test`,
  subject: `queued ${i}`,
  text: 'see attachment',
  attachments: [{ filename: 'report.bin', content: attachment }],
});

await transporter.sendMail(message(-1));
const measure = await startPeakRss();
await Promise.all(Array.from({ length: Number(count) }, (_, i) => transporter.sendMail(message(i))));
const figures = measure.stop();
await transport.close();
console.log(JSON.stringify(figures));
