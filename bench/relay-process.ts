/**
 * The SMTP relay in its own process, as it runs in production, for the
 * throughput and memory benchmarks. Controlled over IPC:
 * { cmd: 'start', baseUrl, spool? } → { port }; { cmd: 'mark' } → {} (RSS baseline taken, sampling every ms);
 * { cmd: 'peak' } → { baselineRss, peakRss }; { cmd: 'stop' }.
 */
import { startSmtpRelay, type SmtpRelay } from '../src/relay/index.js';
import { startPeakRss, type PeakRssMeasure } from './peak-rss.js';

let relay: SmtpRelay | undefined;
let measure: PeakRssMeasure | undefined;

process.on('message', async (message: { cmd: string; baseUrl?: string }) => {
  if (message.cmd === 'start') {
    relay = await startSmtpRelay({ baseUrl: message.baseUrl!, apiKey: 'k', port: 0, retries: false, maxClients: 1000 });
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
