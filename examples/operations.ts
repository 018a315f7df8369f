/**
 * Running the relay and the outbox's workers in production: each with an
 * HTTP port for health (/healthz, /readyz) and Prometheus metrics (/metrics).
 * Here a store-and-forward relay and a worker run in one process, against a
 * local emulator and your Redis (needs prom-client for the metrics):
 *
 *   REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/operations.ts
 *
 * The same with the CLI, as a service manager or Kubernetes runs it:
 *
 *   eml-api relay --port 2525 --outbox --http-port 9464 --log-format json &   # the outbox in REDIS_URL
 *   eml-api worker --http-port 9465 --log-format json &
 *   curl -s 127.0.0.1:9464/readyz; curl -s 127.0.0.1:9465/metrics | grep ^eml_api_
 *
 * See docs/operations.md.
 */
import nodemailer from 'nodemailer';
import { startEmulator } from 'nodemailer-eml-api/emulator';
import { EmlApiQueueTransport, startOutboxWorker } from 'nodemailer-eml-api/queue';
import { startEmlApiRelay } from 'nodemailer-eml-api/relay';

const connection = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
// A queue of its own, so the example never touches a queue of yours.
const queueName = `operations-example-${process.pid}`;
const emu = await startEmulator();

// Port 0 picks free ports here; in production, fixed ones (and host: '0.0.0.0' for the kubelet's probes).
const relay = await startEmlApiRelay({
  baseUrl: emu.url,
  apiKey: emu.apiKey,
  port: 0,
  queue: { connection, queueName },
  http: { port: 0 },
});
const outbox = await startOutboxWorker({
  connection,
  queueName,
  apiKey: emu.apiKey,
  baseUrl: emu.url,
  cleanupInterval: 0,
  http: { port: 0 },
});
const relayHttp = `http://127.0.0.1:${relay.http!.port}`;
const workerHttp = `http://127.0.0.1:${outbox.http!.port}`;
const get = async (url: string) => {
  const res = await fetch(url);
  return `${res.status} ${(await res.text()).trim()}`;
};
console.log(`relay /readyz:  ${await get(`${relayHttp}/readyz`)}`);
console.log(`worker /readyz: ${await get(`${workerHttp}/readyz`)}`);

// Three messages from an SMTP sender; the worker sends them on.
const allSent = new Promise<void>((resolve) => {
  let sent = 0;
  outbox.on('sent', () => ++sent === 3 && resolve());
});
const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: relay.port, ignoreTLS: true });
for (const n of [1, 2, 3]) {
  await smtp.sendMail({ from: 'cron@host.example', to: 'ops@acme.example', subject: `Report ${n}`, text: 'ok' });
}
smtp.close();
await allSent;
console.log(`ops@acme.example got ${emu.mailbox('ops@acme.example').length} messages`);

// What Prometheus scrapes: the lines of this package's metrics.
const show = async (url: string, names: RegExp) =>
  (await (await fetch(`${url}/metrics`)).text())
    .split('\n')
    .filter((line) => names.test(line))
    .forEach((line) => console.log(`  ${line}`));
console.log('relay /metrics:');
await show(relayHttp, /^eml_api_relay_messages_total/);
console.log('worker /metrics:');
await show(workerHttp, /^eml_api_(sends_total|outbox_jobs\{.*state="(completed|prioritized)")/);

// What SIGTERM does in eml-api relay and worker: not ready at once, the work in flight finished within a grace period.
const { givenUp } = await relay.close({ grace: 25_000 });
await outbox.close();
console.log(`stopped: ${givenUp} message(s) given up, ${outbox.handedBack} job(s) handed back`);
const cleanup = new EmlApiQueueTransport({ connection, queueName });
await cleanup.queue.obliterate({ force: true }); // the example's own queue only
await cleanup.close();
await emu.close();
