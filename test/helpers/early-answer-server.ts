import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * An HTTP server that refuses every upload before reading it: once
 * `afterBytes` bytes of a request have arrived it answers `413
 * payload_too_large` and resets the connection, while the client is still
 * writing, as a server over its body limit that will not read the rest. The
 * client's next write fails (EPIPE or ECONNRESET) with the answer already in
 * its socket. Written on plain TCP (not node:http) to control exactly when the
 * answer and the reset go out.
 * @example
 * const server = await startEarlyAnswerServer(1024 * 1024);
 * // ... baseUrl: server.url
 * await server.close();
 */
export interface EarlyAnswerServer {
  readonly url: string;
  /** Requests answered so far. */
  readonly answered: number;
  close(): Promise<void>;
}

export const EARLY_ANSWER_BODY = JSON.stringify({
  error: { code: 'payload_too_large', message: 'The request body is larger than the limit of this server' },
});

export async function startEarlyAnswerServer(afterBytes: number): Promise<EarlyAnswerServer> {
  let answered = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let received = 0;
    let done = false;
    // Keeps reading (and dropping) what comes, so the client's writes go on until the reset.
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
      if (done || received < afterBytes) return;
      done = true;
      answered++;
      socket.write(
        'HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\n' +
          `content-length: ${Buffer.byteLength(EARLY_ANSWER_BODY)}\r\nconnection: close\r\n\r\n${EARLY_ANSWER_BODY}`,
        () => socket.resetAndDestroy(),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get answered() {
      return answered;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
