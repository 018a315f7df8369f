import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** One request the scripted service received. */
export interface ScriptedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: Buffer;
  /** When it arrived, from performance.now(). */
  at: number;
}

/**
 * What the service does with a request: answer, or fail the connection.
 * - `reset-after-body`: reads the whole request, then destroys the socket (the request was sent)
 * - `reset-on-headers`: destroys the socket as soon as the headers arrive, before the body is read
 * - `hang`: never answers
 */
export type ScriptedAction =
  | { status: number; body?: unknown; headers?: Record<string, string> }
  | 'reset-after-body'
  | 'reset-on-headers'
  | 'hang';

/**
 * A stand-in for the service whose every answer a test scripts, to produce
 * failures (resets at a chosen moment, hangs) the emulator has no reason to
 * produce on its own. Requests are recorded.
 */
export interface ScriptedService {
  url: string;
  requests: ScriptedRequest[];
  /** Requests the service read completely and answered with 2xx ("processed"). */
  processed: number;
  /** Sets the actions for the next requests, in order; after them, `fallback`. */
  script(actions: ScriptedAction[], fallback?: ScriptedAction): void;
  close(): Promise<void>;
}

export async function startScriptedService(): Promise<ScriptedService> {
  let queue: ScriptedAction[] = [];
  let fallback: ScriptedAction = { status: 202, body: { id: 'ok', messageId: '<ok@example.test>', recipients: 1 } };
  const sockets = new Set<Socket>();
  const state = { requests: [] as ScriptedRequest[], processed: 0 };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const action = queue.length > 0 ? queue.shift()! : fallback;
    if (action === 'reset-on-headers') {
      state.requests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.alloc(0),
        at: performance.now(),
      });
      req.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      state.requests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: performance.now(),
      });
      if (action === 'reset-after-body') {
        req.socket.destroy();
        return;
      }
      if (action === 'hang') return;
      if (action.status >= 200 && action.status < 300) state.processed++;
      const body = action.body === undefined ? '' : JSON.stringify(action.body);
      res.writeHead(action.status, { ...(body ? { 'content-type': 'application/json' } : {}), ...action.headers });
      res.end(body);
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
    get requests() {
      return state.requests;
    },
    get processed() {
      return state.processed;
    },
    script(actions, next) {
      queue = [...actions];
      if (next) fallback = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
