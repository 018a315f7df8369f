/**
 * Durable sending: the app queues mail in Redis (sendMail resolves once
 * Redis has it, like a relay's "250"), and workers, on any number of
 * machines, send it through the service, retrying through outages. Here both
 * halves run in one process, against a local emulator and your Redis:
 *
 *   REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/outbox.ts
 *
 * In production the app only creates the EmlApiQueueTransport (it needs no
 * API key), and the workers run `eml-api worker` (or startOutboxWorker) with
 * EML_API_URL, EML_API_KEY and REDIS_URL. See docs/outbox.md.
 */
import nodemailer from 'nodemailer';
import { startEmulator } from 'nodemailer-eml-api/emulator';
import {
  EmlApiQueueTransport,
  purgeOutbox,
  readOutboxStatus,
  startOutboxWorker,
  type OutboxQueuedMessageInfo,
} from 'nodemailer-eml-api/queue';

const connection = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
// A queue of its own, so the example never touches a queue of yours.
const queueName = `outbox-example-${process.pid}`;

// The app's side: a Nodemailer transport that stores instead of sending.
const transport = new EmlApiQueueTransport({ connection, queueName });
const transporter = nodemailer.createTransport(transport);
await transporter.verify(); // Redis answers

const order = {
  from: '"Acme Shop" <shop@acme.example>',
  to: 'ann@customer.example',
  subject: 'Your order #1042',
  text: 'Thanks for your order.',
  // One logical message, one key: a retry of this code path (a request run twice) queues it once.
  idempotencyKey: 'order-1042-confirmation',
};
const info = (await transporter.sendMail(order)) as OutboxQueuedMessageInfo;
console.log(`Queued: ${info.response}`);
const again = (await transporter.sendMail(order)) as OutboxQueuedMessageInfo;
console.log(`Queued again: ${again.duplicate ? 'already queued, stored once' : again.response}`);

// The workers' side: they hold the API key and post each queued message with its idempotency key.
const emu = await startEmulator();
const outbox = await startOutboxWorker({
  connection,
  queueName,
  apiKey: emu.apiKey,
  baseUrl: emu.url,
  concurrency: 5,
  rateLimit: { max: 20, duration: 1000 }, // across every worker of the queue
});
outbox.on('failed', (job, err) => console.error(`Failed for good: ${String(job.id)}: ${err.message}`));
const sent = await new Promise<string>((resolve) => outbox.once('sent', (_job, result) => resolve(result.response)));
console.log(`Sent: ${sent}`);
console.log(`ann@customer.example got: ${emu.mailbox('ann@customer.example')[0]?.subject}`);
const { counts } = await readOutboxStatus(transport.queue);
console.log(`Queue: ${counts.completed} sent, ${counts.failed} failed, ${counts.waiting} waiting`);

await outbox.close(); // lets sends in flight finish
await purgeOutbox(transport.queue); // the example's own queue only: its jobs, messages and keys
await transport.close();
await emu.close();
