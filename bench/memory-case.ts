/**
 * One memory case, in a fresh process so its peak RSS is its own. Usage:
 *   memory-case.ts <sinkUrl> <buffer|path> <transport|transport-no-spool|transport-threads|naive|compile-only> [file]
 * transport-threads builds on one build thread, started by the warm-up (so its own memory is in the baseline).
 * Prints { baselineRss, peakRss, extraMb } as JSON; the peak is RSS sampled every millisecond during the send.
 */
import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { request } from 'undici';
import { EmlApiTransport } from '../src/index.js';
import { startPeakRss } from './peak-rss.js';

const [sinkUrl, source, mode, file] = process.argv.slice(2) as [string, 'buffer' | 'path', string, string | undefined];
const SIZE = 25 * 1024 * 1024;
const base = { from: 'a@example.test', to: 'b@example.test', subject: 'memory', text: 'see attachment' };

async function send(attachments: { filename: string; content?: Buffer; path?: string }[]): Promise<void> {
  if (mode === 'compile-only') {
    // The floor: Nodemailer building the message into a stream that is read and dropped.
    const built = await nodemailer.createTransport({ streamTransport: true }).sendMail({ ...base, attachments });
    for await (const _chunk of built.message as AsyncIterable<Buffer>) void _chunk;
    return;
  }
  if (mode === 'naive') {
    // The straightforward transport: build the whole message, Base64 it, JSON it, post it.
    const built = await nodemailer
      .createTransport({ streamTransport: true, buffer: true })
      .sendMail({ ...base, attachments });
    const body = JSON.stringify({ mail: (built.message as Buffer).toString('base64') });
    const res = await request(`${sinkUrl}/v1/send/eml`, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    });
    await res.body.text();
    return;
  }
  if (mode === 'transport-threads') {
    await threaded.sendMail({ ...base, attachments });
    return;
  }
  const transport = new EmlApiTransport({
    apiKey: 'k',
    baseUrl: sinkUrl,
    retry: false,
    ...(mode === 'transport-no-spool' ? { spool: { threshold: 2 ** 40 } } : {}),
  });
  await nodemailer.createTransport(transport).sendMail({ ...base, attachments });
  await transport.close();
}

const threadedTransport = new EmlApiTransport({ apiKey: 'k', baseUrl: sinkUrl, retry: false, buildThreads: 1 });
const threaded = nodemailer.createTransport(threadedTransport);

// Warm up: load every module and open the paths once, so the baseline includes them.
await send([{ filename: 'small.txt', content: Buffer.from('warm-up') }]);
const measure = await startPeakRss();
// The attachment is allocated after the baseline: a Buffer attachment counts against the budget.
const attachment =
  source === 'buffer' ? { filename: 'big.bin', content: randomBytes(SIZE) } : { filename: 'big.bin', path: file! };
measure.sample();
await send([attachment]);
const result = measure.stop();
await threadedTransport.close();
console.log(JSON.stringify(result));
