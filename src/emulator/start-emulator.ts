import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { API_SCOPES } from '../api-types.js';
import { resolveEmulatorOptions, type EmulatorOptions } from './emulator-options.js';
import type { DeliveredMessage, EmulatorMessage } from './emulator-records.js';
import { EmulatorState } from './emulator-state.js';
import { handleRequest } from './handle-request.js';

/**
 * A running emulator of the email service.
 *
 * @example
 * const emu = await startEmulator();
 * // ... send through new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url })
 * expect(emu.mailbox('ann@example.test')).toHaveLength(1);
 * await emu.close();
 */
export interface Emulator {
  /** Base URL to give clients, e.g. `http://127.0.0.1:39123`. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** A ready API key holding every scope, on the `plus` plan. */
  readonly apiKey: string;
  /** Accepted messages, oldest first. */
  messages(): EmulatorMessage[];
  /** Copies delivered to one address (case-insensitive), oldest first; Bcc removed. */
  mailbox(address: string): DeliveredMessage[];
  /** Stops the server and drops its connections. */
  close(): Promise<void>;
}

/**
 * Starts an emulator of the email service on a real HTTP server.
 *
 * @param options port (default 0: a free one), host (default 127.0.0.1), extra API keys, groups, body limit, clock
 * @returns the running emulator, with a ready all-scopes key in `apiKey`
 * @example
 * import { startEmulator } from 'nodemailer-eml-api/emulator';
 *
 * const emu = await startEmulator({ apiKeys: [{ key: 'k-send', scopes: ['sender'] }] });
 * console.log(emu.url, emu.apiKey);
 */
export async function startEmulator(options: EmulatorOptions = {}): Promise<Emulator> {
  const resolved = resolveEmulatorOptions(options);
  const state = new EmulatorState(resolved);
  const apiKey = `emu_${randomBytes(18).toString('base64url')}`;
  state.keys.add(apiKey, API_SCOPES, 'plus');
  for (const key of resolved.apiKeys) state.keys.add(key.key, key.scopes, key.plan);

  const server = createServer({ maxHeaderSize: 16 * 1024, requestTimeout: 120_000 }, (req, res) => {
    handleRequest(state, req, res).catch((err: unknown) => {
      resolved.onInternalError(err);
      res.destroy();
    });
  });
  // A client that sends garbage instead of HTTP gets a 400 from Node; never crash.
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    else socket.destroy();
  });
  await listen(server, resolved.port, resolved.host);
  const address = server.address() as AddressInfo;
  const hostForUrl = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  let closing: Promise<void> | undefined;

  return {
    url: `http://${hostForUrl}:${address.port}`,
    host: address.address,
    port: address.port,
    apiKey,
    messages: () => state.mail.messages(),
    mailbox: (addr: string) => state.mail.mailbox(addr),
    close: () =>
      (closing ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      })),
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}
