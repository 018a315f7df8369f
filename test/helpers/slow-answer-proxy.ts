import { createServer, request, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A proxy in front of the service that passes each request on at once and
 * holds the answer back for `delayMs`: the request is processed (the mail
 * delivered) before the client hears of it. A client that dies in that window
 * has had its mail delivered without knowing it, the case idempotency keys
 * exist for. With `requestDelayMs`, it also holds each request back before
 * passing it on (`[min, max]`: for a time drawn in that range): a client that
 * dies then has had nothing delivered.
 * @example
 * const proxy = await startSlowAnswerProxy(emu.url, 50);
 * // ... baseUrl: proxy.url
 * await proxy.close();
 */
export interface SlowAnswerProxy {
  readonly url: string;
  /** Answers the service gave that the client never received (it went away first). */
  readonly lostAnswers: number;
  /** Answers the service gave that are being held back right now. */
  readonly heldAnswers: number;
  /** Requests being held back right now, before the service has seen them. */
  readonly heldRequests: number;
  /**
   * From now on passes nothing on, either way: what it holds is dropped (the
   * requests never reach the service, the answers never reach the client).
   * Call it just before killing the client, so that the client dies with
   * exactly what is held at this instant: a killed process's sockets close
   * only some time after the signal, long enough for held answers to get out.
   */
  cutOff(): void;
  /** From now on holds each answer `ms` instead (0: passes answers on at once, the glitch is over). */
  setAnswerDelay(ms: number): void;
  /** Passes on at once the answers held right now (their clients hear them at an exact point of a test). */
  releaseAnswers(): void;
  close(): Promise<void>;
}

export async function startSlowAnswerProxy(
  target: string,
  delayMs: number,
  { requestDelayMs = 0 }: { requestDelayMs?: number | [min: number, max: number] } = {},
): Promise<SlowAnswerProxy> {
  const upstream = new URL(target);
  let lostAnswers = 0;
  let heldAnswers = 0;
  let heldRequests = 0;
  let answerDelay = delayMs;
  const sockets = new Set<Socket>();
  /** The answers held, each passed on when called. */
  const pending = new Set<() => void>();
  let cut = false;
  const clientGone = (socket: Socket): boolean => cut || socket.destroyed;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (cut) return void res.destroy();
      heldRequests++;
      // A range spreads the requests of one client out, so that some are held while others' answers are.
      const hold =
        typeof requestDelayMs === 'number'
          ? requestDelayMs
          : requestDelayMs[0] + Math.random() * (requestDelayMs[1] - requestDelayMs[0]);
      setTimeout(() => {
        heldRequests--;
        if (!clientGone(req.socket)) pass(Buffer.concat(chunks));
      }, hold);
    });
    const pass = (body: Buffer): void => {
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
            heldAnswers++;
            const release = () => {
              clearTimeout(timer);
              if (!pending.delete(release)) return;
              heldAnswers--;
              if (res.destroyed || clientGone(req.socket)) {
                lostAnswers++;
                return;
              }
              const headers: IncomingHttpHeaders = { ...answer.headers };
              delete headers.connection;
              delete headers['keep-alive'];
              res.writeHead(answer.statusCode ?? 502, headers);
              res.end(Buffer.concat(parts));
            };
            pending.add(release);
            const timer = setTimeout(release, answerDelay);
          });
        },
      );
      forward.on('error', () => res.destroy());
      forward.end(body);
    };
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
    get heldAnswers() {
      return heldAnswers;
    },
    get heldRequests() {
      return heldRequests;
    },
    cutOff() {
      cut = true;
    },
    setAnswerDelay(ms) {
      answerDelay = ms;
    },
    releaseAnswers() {
      for (const release of [...pending]) release();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
