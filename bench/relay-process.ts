/**
 * The SMTP relay in its own process, as it runs in production, for the
 * throughput and memory benchmarks. Controlled over IPC:
 * { cmd: 'start', baseUrl, spool? } → { port }; { cmd: 'mark' } → {} (RSS baseline taken, sampling every ms);
 * { cmd: 'peak' } → { baselineRss, peakRss }; { cmd: 'stop' }.
 */
import { startSmtpRelay, type SmtpRelay } from '../src/relay/index.js';

let relay: SmtpRelay | undefined;
let baselineRss = 0;
let peakRss = 0;
let sampler: NodeJS.Timeout | undefined;

process.on('message', async (message: { cmd: string; baseUrl?: string }) => {
  if (message.cmd === 'start') {
    relay = await startSmtpRelay({ baseUrl: message.baseUrl!, apiKey: 'k', port: 0, retries: false, maxClients: 1000 });
    process.send!({ port: relay.port });
  } else if (message.cmd === 'mark') {
    (globalThis as { gc?: () => void }).gc?.();
    await new Promise((resolve) => setTimeout(resolve, 100));
    baselineRss = peakRss = process.memoryUsage.rss();
    sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage.rss())), 1);
    process.send!({});
  } else if (message.cmd === 'peak') {
    if (sampler) clearInterval(sampler);
    peakRss = Math.max(peakRss, process.memoryUsage.rss());
    process.send!({ baselineRss, peakRss });
  } else if (message.cmd === 'stop') {
    await relay?.close();
    process.exit(0);
  }
});
