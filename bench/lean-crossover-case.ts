/**
 * Where streaming an upload stops costing more than it saves: for messages
 * of growing size, the upload as one Buffer (the whole `{"mail":"<base64>"}`
 * body encoded at once and handed to undici in one write) against the
 * streamed upload (Base64 in 48 KiB slices through a Readable, as messages
 * above the in-memory limit are sent), in interleaved rounds, in a fresh
 * process. Usage:
 *   lean-crossover-case.ts <sinkUrl>
 * Prints [{ size, leanUs, streamedUs, ratio, leanPeakKb, streamedPeakKb }] as JSON:
 * CPU microseconds per upload (all threads of the process), the median of
 * the per-round ratios, and the largest heap-plus-external growth one upload caused.
 */
import { Agent } from 'undici';
import { emlBodyFromBuffer } from '../src/body/eml-upload-body.js';

const [sinkUrl] = process.argv.slice(2) as [string];
const SIZES = [4, 16, 32, 48, 64, 80, 96, 112, 128, 160, 256, 512].map((kb) => kb * 1024);
const ROUNDS = 7;
const agent = new Agent({ connections: 1 });

function eml(size: number): Buffer {
  const head = 'From: a@example.test\r\nTo: b@example.test\r\nSubject: lean\r\n\r\n';
  const line = `${'x'.repeat(74)}\r\n`;
  return Buffer.from(head + line.repeat(Math.ceil(size / line.length))).subarray(0, size);
}

async function upload(message: Buffer, lean: boolean): Promise<void> {
  // Lean: everything at once, one write. Streamed: sliced Base64 through a Readable.
  const body = emlBodyFromBuffer(message, lean ? Infinity : 0);
  const res = await agent.request({
    origin: sinkUrl,
    path: '/v1/send/eml',
    method: 'POST',
    headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
    body: body.bytes ?? body.open(),
  });
  await res.body.text();
}

/** CPU µs per upload over `count` uploads, and the largest memory growth seen right after one. */
async function measure(message: Buffer, lean: boolean, count: number): Promise<{ us: number; peakKb: number }> {
  const used = () => {
    const m = process.memoryUsage();
    return m.heapUsed + m.external + m.arrayBuffers;
  };
  let peak = 0;
  const cpu = process.cpuUsage();
  for (let i = 0; i < count; i++) {
    const before = used();
    await upload(message, lean);
    peak = Math.max(peak, used() - before);
  }
  const spent = process.cpuUsage(cpu);
  return { us: (spent.user + spent.system) / count, peakKb: peak / 1024 };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;
// Warm up both paths (JIT, connection) before the first size is timed.
for (const lean of [true, false]) await measure(eml(64 * 1024), lean, 200);
const results = [];
for (const size of SIZES) {
  const message = eml(size);
  const count = Math.max(50, Math.round((24 * 1024 * 1024) / size));
  await measure(message, true, count);
  await measure(message, false, count);
  const lean: { us: number; peakKb: number }[] = [];
  const streamed: { us: number; peakKb: number }[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate which goes first, so drift over seconds falls on both.
    if (round % 2 === 0) {
      lean.push(await measure(message, true, count));
      streamed.push(await measure(message, false, count));
    } else {
      streamed.push(await measure(message, false, count));
      lean.push(await measure(message, true, count));
    }
  }
  results.push({
    size,
    leanUs: median(lean.map((r) => r.us)),
    streamedUs: median(streamed.map((r) => r.us)),
    // Lean against streamed round by round: what drifts over seconds cancels out.
    ratio: median(lean.map((r, i) => r.us / streamed[i]!.us)),
    leanPeakKb: median(lean.map((r) => r.peakKb)),
    streamedPeakKb: median(streamed.map((r) => r.peakKb)),
  });
}
await agent.close();
console.log(JSON.stringify(results));
