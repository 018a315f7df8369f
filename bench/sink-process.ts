/**
 * Benchmark sinks, run in their own process so the sender's figures are its
 * own: an HTTP sink that answers 202 (optionally after a delay; 400 to an empty send) and counts TCP
 * connections, and an SMTP sink (smtp-server) that accepts and discards.
 * Controlled over IPC: { cmd: 'start', httpDelayMs } → { httpPort, smtpPort };
 * { cmd: 'stats' } → { connections, requests }; { cmd: 'reset' }.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

let delayMs = 0;
let connections = 0;
let requests = 0;
const ACCEPTED = JSON.stringify({ id: 'bench', messageId: '<bench@example.test>', recipients: 1 });

const REFUSED = JSON.stringify({ error: { code: 'invalid_request', message: 'mail is empty' } });

const http = createServer((req, res) => {
  let bytes = 0;
  req.on('data', (chunk: Buffer) => (bytes += chunk.length));
  req.on('end', () => {
    // The service's answer to an empty send, which a worker makes to check its key before it starts.
    if (bytes < 64) {
      res.writeHead(400, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(REFUSED) });
      res.end(REFUSED);
      return;
    }
    requests++;
    const answer = () => {
      res.writeHead(202, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(ACCEPTED) });
      res.end(ACCEPTED);
    };
    if (delayMs > 0) setTimeout(answer, delayMs);
    else answer();
  });
});
http.keepAliveTimeout = 60_000;
http.on('connection', () => connections++);

const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  maxClients: 1000,
  onData(stream, _session, callback) {
    stream.resume();
    stream.on('end', () => callback());
  },
});

const listen = (server: { listen: (port: number, host: string, cb: () => void) => unknown }) =>
  new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

// An interrupted benchmark leaves no sink behind.
process.on('disconnect', () => process.exit(0));
process.on('message', async (message: { cmd: string; httpDelayMs?: number }) => {
  if (message.cmd === 'start') {
    delayMs = message.httpDelayMs ?? 0;
    await listen(http);
    await listen(smtp);
    process.send!({
      httpPort: (http.address() as AddressInfo).port,
      smtpPort: (smtp.server.address() as AddressInfo).port,
    });
  } else if (message.cmd === 'delay') {
    delayMs = message.httpDelayMs ?? 0;
    process.send!({ ok: true });
  } else if (message.cmd === 'stats') {
    process.send!({ connections, requests });
  } else if (message.cmd === 'reset') {
    connections = 0;
    requests = 0;
    http.closeIdleConnections();
    process.send!({ ok: true });
  } else if (message.cmd === 'stop') {
    http.closeAllConnections();
    http.close();
    smtp.close(() => process.exit(0));
  }
});
