/**
 * One memory case of the outbox, in a fresh process so its peak RSS is its
 * own: a message with a 25 MB attachment through the producer (built, checked,
 * stored in Redis) or through a worker (read from Redis, posted to the sink).
 * Usage:
 *   queue-memory-case.ts producer <redisUrl> <queueName>
 *   queue-memory-case.ts worker <redisUrl> <queueName> <sinkUrl>   (IPC: sends 'baseline', then waits for the job)
 * Prints { baselineRss, peakRss, extraMb, messageBytes } as JSON; the peak is RSS sampled every millisecond.
 */
import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { EmlApiQueueTransport, startOutboxWorker } from '../src/queue/index.js';
import { startPeakRss } from './peak-rss.js';

const [mode, redisUrl, queueName, sinkUrl] = process.argv.slice(2) as [string, string, string, string | undefined];
const SIZE = 25 * 1024 * 1024;
const base = { from: 'a@example.test', to: 'b@example.test', subject: 'memory', text: 'see attachment' };

if (mode === 'producer') {
  const transport = new EmlApiQueueTransport({ connection: redisUrl, queueName });
  const transporter = nodemailer.createTransport(transport);
  // Warm up: load every module and open the paths once (a spooled message included), so the baseline has them.
  await transporter.sendMail({
    ...base,
    attachments: [{ filename: 'warm.bin', content: randomBytes(3 * 1024 * 1024) }],
  });
  const measure = await startPeakRss();
  // Allocated after the baseline: a Buffer attachment counts against the budget.
  const info = await transporter.sendMail({
    ...base,
    attachments: [{ filename: 'big.bin', content: randomBytes(SIZE) }],
  });
  const figures = measure.stop();
  const job = await transport.queue.getJob(info.queueId);
  await transport.close();
  console.log(JSON.stringify({ ...figures, messageBytes: job?.data.size }));
} else {
  const outbox = await startOutboxWorker({
    connection: redisUrl,
    queueName,
    apiKey: 'k',
    baseUrl: sinkUrl!,
    concurrency: 1,
    cleanupInterval: 0,
  });
  // The parent queued a 3 MB warm-up message (streamed from Redis in chunks, as the big one will be).
  await new Promise((resolve) => outbox.once('sent', resolve));
  const measure = await startPeakRss();
  const sent = new Promise((resolve) => outbox.once('sent', resolve));
  process.send!('baseline');
  await sent;
  const figures = measure.stop();
  await outbox.close();
  console.log(JSON.stringify(figures));
  process.disconnect();
}
