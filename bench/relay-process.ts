/**
 * The SMTP relay in its own process, as it runs in production, for the
 * throughput and memory benchmarks. Controlled over IPC:
 * { cmd: 'start', baseUrl, redisUrl?, queueName? } → { port } (with `redisUrl`: store-and-forward, as
 * `eml-api relay --redis` runs it); { cmd: 'mark' } → {} (RSS baseline taken, sampling every ms);
 * { cmd: 'peak' } → { baselineRss, peakRss }; { cmd: 'stop' }.
 * It exits when the benchmark's process goes away, so an interrupted run leaves no relay behind.
 */
import { startEmlApiRelay, type EmlApiRelay } from '../src/relay/index.js';
import { startPeakRss, type PeakRssMeasure } from './peak-rss.js';

let relay: EmlApiRelay | undefined;
let measure: PeakRssMeasure | undefined;

process.on('disconnect', () => process.exit(0));
process.on('message', async (message: { cmd: string; baseUrl?: string; redisUrl?: string; queueName?: string }) => {
  if (message.cmd === 'start') {
    relay = await startEmlApiRelay({
      baseUrl: message.baseUrl!,
      apiKey: 'k',
      port: 0,
      retry: false,
      maxClients: 1000,
      ...(message.redisUrl === undefined
        ? {}
        : { queue: { connection: message.redisUrl, queueName: message.queueName ?? 'eml-api' } }),
    });
    process.send!({ port: relay.port });
  } else if (message.cmd === 'mark') {
    measure = await startPeakRss();
    process.send!({});
  } else if (message.cmd === 'peak') {
    const { baselineRss, peakRss } = measure!.stop();
    process.send!({ baselineRss, peakRss });
  } else if (message.cmd === 'stop') {
    await relay?.close();
    process.exit(0);
  }
});
