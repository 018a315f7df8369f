import { createServer, request, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A proxy in front of the service that passes each request on at once and
 * holds the answer back for `delayMs`: the request is processed (the mail
 * delivered) before the client hears of it. A client that dies in that window
 * has had its mail delivered without knowing it, the case idempotency keys
 * exist for.
 * @example
 * const proxy = await startSlowAnswerProxy(emu.url, 50);
 * // ... baseUrl: proxy.url
 * await proxy.close();
 */
export interface SlowAnswerProxy {
  readonly url: string;
  /** Answers the service gave that the client never received (it went away first). */
  readonly lostAnswers: number;
  close(): Promise<void>;
}

export async function startSlowAnswerProxy(target: string, delayMs: number): Promise<SlowAnswerProxy> {
  const upstream = new URL(target);
  let lostAnswers = 0;
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const forward = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers: { ...req.headers, host: upstream.host, 'content-length': String(body.length) },
        },
        (answer) => {
          const parts: Buffer[] = [];
          answer.on('data', (c: Buffer) => parts.push(c));
          answer.on('end', () => {
            setTimeout(() => {
              if (res.destroyed || req.socket.destroyed) {
                lostAnswers++;
                return;
              }
              const headers: IncomingHttpHeaders = { ...answer.headers };
              delete headers.connection;
              delete headers['keep-alive'];
              res.writeHead(answer.statusCode ?? 502, headers);
              res.end(Buffer.concat(parts));
            }, delayMs);
          });
        },
      );
      forward.on('error', () => res.destroy());
      forward.end(body);
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get lostAnswers() {
      return lostAnswers;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
