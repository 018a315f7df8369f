/**
 * An outbox worker process that dies, SIGKILLed as by the OOM killer, when it
 * sends the message whose Idempotency-Key is POISON_KEY: a message that
 * crashes every worker that sends it. Configured like worker-process.ts (one
 * JSON argument, OutboxWorkerOptions); the crash is made by an undici
 * interceptor on the worker's own dispatcher, at the moment the request goes
 * out, while the worker's other sends are in flight.
 *
 *   POISON_KEY=poison node --import tsx test/queue/poison-worker-process.ts '{"connection":"redis://...",...}'
 */
import { Agent, type Dispatcher } from 'undici';
import { startOutboxWorker, type OutboxWorkerOptions } from '../../src/queue/index.js';

const options = JSON.parse(process.argv[2]!) as OutboxWorkerOptions;
const poison = process.env.POISON_KEY ?? 'poison';
const carriesPoison = (headers: Dispatcher.DispatchOptions['headers']): boolean =>
  JSON.stringify(headers ?? {})
    .toLowerCase()
    .includes(`"${poison}"`);
const dispatcher = new Agent().compose((dispatch) => (opts, handler) => {
  if (carriesPoison(opts.headers)) process.kill(process.pid, 'SIGKILL');
  return dispatch(opts, handler);
});
const outbox = await startOutboxWorker({ ...options, dispatcher });
outbox.on('sent', (job) => process.send?.({ event: 'sent', jobId: job.id }));
process.once('SIGTERM', () => {
  void outbox.close().then(() => process.exit(0));
});
process.send?.({ event: 'ready', pid: process.pid });
