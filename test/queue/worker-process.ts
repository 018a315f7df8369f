/**
 * An outbox worker in a process of its own, for the tests that kill or
 * multiply workers. Configured by one JSON argument (EmlApiWorkerOptions,
 * the API key included: it never goes through Redis); reports 'ready' and
 * each send over IPC; closes gracefully on SIGTERM, then exits 0.
 *
 *   node --import tsx test/queue/worker-process.ts '{"connection":"redis://...","apiKey":"...","baseUrl":"..."}'
 */
import { startEmlApiWorker, type EmlApiWorkerOptions } from '../../src/queue/index.js';

const options = JSON.parse(process.argv[2]!) as EmlApiWorkerOptions;
const outbox = await startEmlApiWorker(options);
outbox.on('sent', (job) => process.send?.({ event: 'sent', jobId: job.id }));
outbox.on('failed', (job, err) =>
  process.send?.({ event: 'failed', jobId: job.id, code: (err as { code?: string }).code }),
);
process.once('SIGTERM', () => {
  void outbox.close().then(() => process.exit(0));
});
process.send?.({ event: 'ready', pid: process.pid });
