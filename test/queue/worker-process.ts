/**
 * An outbox worker in a process of its own, for the tests that kill or
 * multiply workers. Configured by one JSON argument (OutboxWorkerOptions,
 * the API key included: it never goes through Redis); reports 'ready', each
 * send, failure and warning over IPC, or why it could not start ('refused',
 * then exits 1); closes gracefully on SIGTERM, then exits 0.
 *
 *   node --import tsx test/queue/worker-process.ts '{"connection":"redis://...","apiKey":"...","baseUrl":"..."}'
 */
import { startOutboxWorker, type OutboxWorker, type OutboxWorkerOptions } from '../../src/queue/index.js';

const options = JSON.parse(process.argv[2]!) as OutboxWorkerOptions;
let outbox: OutboxWorker;
try {
  outbox = await startOutboxWorker(options);
} catch (err) {
  const { code, message } = err as { code?: string; message: string };
  process.send?.({ event: 'refused', code, message }, () => process.exit(1));
  await new Promise(() => undefined);
}
outbox!.on('sent', (job) => process.send?.({ event: 'sent', jobId: job.id }));
outbox!.on('failed', (job, err) =>
  process.send?.({ event: 'failed', jobId: job.id, code: (err as { code?: string }).code }),
);
outbox!.on('warning', (message: string) => process.send?.({ event: 'warning', message }));
process.once('SIGTERM', () => {
  void outbox.close().then(() => process.exit(0));
});
process.send?.({ event: 'ready', pid: process.pid });
