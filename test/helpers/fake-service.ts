import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** One request the fake service received. */
export interface FakeRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The body decoded as UTF-8. */
  text: string;
  /** When it was read, from performance.now(). */
  at: number;
}

/**
 * An answer. `body` is sent as JSON with `Content-Type: application/json`;
 * `text` is sent as given, with only the `headers` given. `delayMs` holds the
 * answer back that long, unless the client goes away first.
 */
export interface FakeReply {
  status: number;
  body?: unknown;
  text?: string;
  headers?: Record<string, string>;
  delayMs?: number;
}

/**
 * What the service does with a request: answer, or fail the connection.
 * - `reset-after-body`: reads the whole request, then destroys the socket (the request was sent)
 * - `reset-on-headers`: destroys the socket as soon as the headers arrive, before the body is read
 * - `hang`: never answers
 * - `hold`: answers only when the test calls `releaseAll()`, with {@link HELD_REPLY} or the reply it gives
 */
export type FakeAction = FakeReply | 'reset-after-body' | 'reset-on-headers' | 'hang' | 'hold';

/** The answer to every request nothing was scripted for. */
export const DEFAULT_REPLY: FakeReply = {
  status: 202,
  body: { id: 'ok', messageId: '<ok@example.test>', recipients: 1 },
};

/** The answer `releaseAll()` gives to held requests. */
export const HELD_REPLY: FakeReply = {
  status: 202,
  body: { id: 'held', messageId: '<held@example.test>', recipients: 1 },
};

/**
 * A stand-in for the service on 127.0.0.1 whose every answer a test sets:
 * odd statuses and bodies the emulator never gives, failures at a chosen
 * moment (resets, hangs), answers held until the test releases them (so
 * "requests in flight" is a state a test can observe instead of a race).
 * Every request is recorded, and connections and requests in flight counted.
 *
 * Use the emulator instead when the real behaviour of the service matters;
 * it can add latency too (`faults.latencyMs`, `emu.setFaults()`).
 * @example
 * const service = await startFakeService();
 * service.script([{ status: 503 }, 'reset-after-body']); // then DEFAULT_REPLY
 * service.answer({ status: 400, body: { error: { code: 'invalid_eml', message: 'no' } } }); // every request
 * await service.close();
 */
export interface FakeService {
  url: string;
  /** Requests read so far (for `reset-on-headers`, with an empty body). */
  readonly requests: FakeRequest[];
  /** Requests the service read completely and answered with 2xx ("processed"). */
  readonly processed: number;
  /** TCP connections accepted. */
  readonly connections: number;
  /** Requests received and not yet answered, and the most at once. */
  readonly open: number;
  readonly maxOpen: number;
  /** Requests held by a `hold` action and not yet released, and the most at once. */
  readonly held: number;
  readonly maxHeld: number;
  /** Sets the actions for the next requests, in order; after them, `fallback` (kept when not given). */
  script(actions: FakeAction[], fallback?: FakeAction): void;
  /** Answers every request from now on with `action`. */
  answer(action: FakeAction): void;
  /** Answers every held request with `reply`. @default HELD_REPLY */
  releaseAll(reply?: FakeReply): void;
  /** Forgets the recorded requests and counters and goes back to answering {@link DEFAULT_REPLY}. */
  clear(): void;
  close(): Promise<void>;
}

export async function startFakeService(): Promise<FakeService> {
  let queue: FakeAction[] = [];
  let fallback: FakeAction = DEFAULT_REPLY;
  let requests: FakeRequest[] = [];
  let processed = 0;
  let connections = 0;
  let maxOpen = 0;
  let maxHeld = 0;
  const open = new Set<ServerResponse>();
  const held: ServerResponse[] = [];
  const sockets = new Set<Socket>();

  const record = (req: IncomingMessage, body: Buffer) => {
    requests.push({
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      body,
      text: body.toString('utf8'),
      at: performance.now(),
    });
  };

  const reply = (res: ServerResponse, { status, body, text, headers }: FakeReply) => {
    if (status >= 200 && status < 300) processed++;
    if (text !== undefined) {
      res.writeHead(status, headers ?? {});
      res.end(text);
      return;
    }
    const json = body === undefined ? '' : JSON.stringify(body);
    res.writeHead(status, { ...(json ? { 'content-type': 'application/json' } : {}), ...headers });
    res.end(json);
  };

  const server = createServer((req, res) => {
    open.add(res);
    maxOpen = Math.max(maxOpen, open.size);
    const settle = () => open.delete(res);
    res.on('finish', settle);
    res.on('close', settle);

    const action = queue.length > 0 ? queue.shift()! : fallback;
    if (action === 'reset-on-headers') {
      record(req, Buffer.alloc(0));
      req.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      record(req, Buffer.concat(chunks));
      if (action === 'reset-after-body') {
        req.socket.destroy();
        return;
      }
      if (action === 'hang') return;
      if (action === 'hold') {
        held.push(res);
        maxHeld = Math.max(maxHeld, held.length);
        return;
      }
      if (action.delayMs === undefined) {
        reply(res, action);
        return;
      }
      const timer = setTimeout(() => reply(res, action), action.delayMs);
      res.on('close', () => clearTimeout(timer));
    });
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get requests() {
      return requests;
    },
    get processed() {
      return processed;
    },
    get connections() {
      return connections;
    },
    get open() {
      return open.size;
    },
    get maxOpen() {
      return maxOpen;
    },
    get held() {
      return held.length;
    },
    get maxHeld() {
      return maxHeld;
    },
    script(actions, next) {
      queue = [...actions];
      if (next) fallback = next;
    },
    answer(action) {
      queue = [];
      fallback = action;
    },
    releaseAll(answer = HELD_REPLY) {
      for (const res of held.splice(0)) reply(res, answer);
    },
    clear() {
      queue = [];
      fallback = DEFAULT_REPLY;
      requests = [];
      processed = 0;
      open.clear();
      maxOpen = 0;
      maxHeld = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A port on 127.0.0.1 where nothing listens (it was free a moment ago). */
export async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}
