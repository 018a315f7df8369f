import { Readable } from 'node:stream';
import { type Socket, isIP } from 'node:net';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOptions } from 'node:dns';
import { type Dispatcher, buildConnector } from 'undici';

/** How far a request got before it failed, which decides whether a retry is safe. */
export type FailurePhase =
  /** Not started on a connection: the service cannot have seen it. */
  | 'connect'
  /** Started, but the body's last byte had not left: the service cannot have processed it. */
  | 'write'
  /** The whole request may have gone out: the service may have processed it. */
  | 'sent';

export class ExchangeFailure extends Error {
  override readonly name = 'ExchangeFailure';
  constructor(
    readonly phase: FailurePhase,
    override readonly cause: unknown,
  ) {
    super('request failed', { cause });
  }
}

/** Header names are lower-case. */
export interface RawResponse {
  statusCode: number;
  headers: Record<string, string>;
  text: string;
}

export interface ExchangeRequest {
  origin: string;
  path: string;
  method: 'GET' | 'POST' | 'DELETE';
  headers: Record<string, string>;
  body: UploadBody | undefined;
  signal: AbortSignal;
  /** Until the response headers arrive, in ms. */
  headersTimeout: number;
}

const CHUNK_BYTES = 64 * 1024;

function* chunksOf(body: Buffer): Generator<Buffer> {
  for (let at = 0; at < body.length; at += CHUNK_BYTES) yield body.subarray(at, at + CHUNK_BYTES);
}

/** Answers are cut here: error pages can be large, and only the start is useful. */
const MAX_ANSWER_BYTES = 1024 * 1024;

const CONNECT_PHASE_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EHOSTDOWN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * Sends one request through any undici dispatcher and records how far it got, from what every dispatcher must do:
 * `onConnect` comes before the first byte goes out, and a streamed body is watched at its source. `onRequestSent` is
 * not used: undici's handler wrapping (`compose()`, interceptors, `RetryAgent`) drops it.
 * @throws {ExchangeFailure} on any failure to get a complete answer
 */
export function exchange(dispatcher: Dispatcher, request: ExchangeRequest): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const body = request.body;
    // A body written in one piece counts as sent once it goes (a reset during its upload looks like one after it),
    // so only small bodies go whole; larger ones stream and count as sent once their last byte has left.
    const whole = body === undefined || (body.bytes !== undefined && body.bytes.length <= WHOLE_BODY_BYTES);
    const streamed = !whole && body.length > 0;
    let connected = false;
    let lastByteOut = false;
    let settled = false;
    let abortRequest: ((reason?: Error) => void) | undefined;
    let statusCode = 0;
    const headers: Record<string, string> = {};
    const chunks: Buffer[] = [];
    let size = 0;

    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      request.signal.removeEventListener('abort', onAbort);
      const code = (err as { code?: unknown } | null)?.code;
      // Once the last byte has left, the service may have the whole request, whatever the dispatcher says.
      let phase: FailurePhase;
      if (typeof code === 'string' && CONNECT_PHASE_CODES.has(code)) phase = 'connect';
      else if (lastByteOut) phase = 'sent';
      else if (connected) phase = 'write';
      else phase = 'connect';
      reject(new ExchangeFailure(phase, err));
    };
    const onAbort = () => {
      const reason = request.signal.reason instanceof Error ? request.signal.reason : new Error('aborted');
      if (abortRequest) abortRequest(reason);
      else fail(reason);
    };
    if (request.signal.aborted) return fail(request.signal.reason);
    request.signal.addEventListener('abort', onAbort, { once: true });

    const handler: Dispatcher.DispatchHandler & Record<string, unknown> = {
      onConnect(abort: (err?: Error) => void) {
        abortRequest = abort;
        connected = true;
        // Without a streamed body, undici writes the whole request as soon as it has the socket.
        if (!streamed) lastByteOut = true;
        if (request.signal.aborted) onAbort();
      },
      onHeaders(status: number, rawHeaders: Buffer[]) {
        statusCode = status;
        for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
          headers[rawHeaders[i]!.toString('latin1').toLowerCase()] = rawHeaders[i + 1]!.toString('latin1');
        }
        return true;
      },
      onData(chunk: Buffer) {
        if (size < MAX_ANSWER_BYTES) {
          chunks.push(chunk);
          size += chunk.length;
        }
        return true;
      },
      onComplete() {
        if (settled) return;
        settled = true;
        request.signal.removeEventListener('abort', onAbort);
        resolve({ statusCode, headers, text: Buffer.concat(chunks).toString('utf8') });
      },
      onError(err: Error) {
        fail(err);
      },
    };
    try {
      dispatcher.dispatch(
        {
          origin: request.origin,
          path: request.path,
          method: request.method,
          headers: request.headers,
          body:
            body === undefined
              ? undefined
              : whole
                ? body.bytes
                : onLastByte(
                    body.bytes !== undefined ? Readable.from(chunksOf(body.bytes), { objectMode: false }) : body.open(),
                    body.length,
                    () => (lastByteOut = true),
                  ),
          headersTimeout: request.headersTimeout,
          bodyTimeout: request.headersTimeout,
        },
        handler as Dispatcher.DispatchHandler,
      );
    } catch (err) {
      fail(err);
    }
  });
}

/**
 * Calls `callback` when `stream`'s source pushes the chunk that completes `length` bytes, before any consumer reads it:
 * until then the last byte cannot have left. Watching `push` adds no stream layer to every upload.
 */
function onLastByte(stream: Readable, length: number, callback: () => void): Readable {
  let produced = 0;
  const push = stream.push.bind(stream);
  stream.push = (chunk: unknown, encoding?: BufferEncoding) => {
    if (chunk !== null && chunk !== undefined) {
      produced += typeof chunk === 'string' ? Buffer.byteLength(chunk, encoding) : (chunk as Uint8Array).length;
      if (produced >= length) callback();
    }
    return push(chunk, encoding);
  };
  return stream;
}

/**
 * How long a socket whose write failed keeps reading for the service's answer, in ms: a server that refuses an upload
 * answers then closes, so the answer is usually there already; this bounds the wait for a peer that does neither.
 */
export const EARLY_ANSWER_WAIT = 2_000;

/**
 * An undici connector whose sockets still read the answer of a server that refused a request before reading it all. A
 * server over its body limit answers `413` and closes; the client's next write fails, and Node destroys the socket with
 * the answer unread, so the send would fail as a retryable connection error instead of a permanent `413`.
 * @param wait how long to keep reading after a failed write, in ms @default EARLY_ANSWER_WAIT
 */
export function earlyAnswerConnector(
  options: buildConnector.BuildOptions,
  wait = EARLY_ANSWER_WAIT,
): buildConnector.connector {
  const connect = buildConnector(options);
  return (opts, callback) =>
    connect(opts, (...args: Parameters<buildConnector.Callback>) => {
      if (args[0] === null) keepReadingAfterFailedWrite(args[1], wait);
      callback(...args);
    });
}

/**
 * Holds back, once, the callback of a write the peer refused: a failed write also fails the socket's read side, so the
 * error cannot just pass. undici sees an unfinished write, the socket goes on reading, and the answer completes the
 * request; without one, the peer's reset ends it, or the write fails after `wait`.
 */
function keepReadingAfterFailedWrite(socket: Socket, wait: number): void {
  let held = false;
  const hold = (callback: (error?: Error | null) => void) => (err?: Error | null) => {
    if (held || !isFailedWrite(err) || socket.destroyed) return callback(err);
    held = true;
    const timer = setTimeout(() => callback(err), wait);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  };
  const write = socket._write.bind(socket);
  socket._write = (chunk, encoding, callback) => write(chunk, encoding, hold(callback));
  const writev = socket._writev?.bind(socket);
  if (writev) socket._writev = (chunks, callback) => writev(chunks, hold(callback));
}

/** A write the peer refused (reset or closed); a failed read is not one. */
function isFailedWrite(err: unknown): err is Error {
  const { code, syscall } = (err ?? {}) as { code?: unknown; syscall?: unknown };
  return (code === 'EPIPE' || code === 'ECONNRESET') && syscall !== 'read';
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
type Lookup = (hostname: string, options: LookupOptions, callback: LookupCallback) => void;

/**
 * A `lookup` under which `localhost` may only resolve to loopback addresses: plain `http://` is allowed to localhost
 * because it is this machine, so a resolver or hosts file that says otherwise must not get the API key in clear text.
 */
export function localhostOnlyLoopback(resolve: typeof dnsLookup = dnsLookup): Lookup {
  return (hostname, options, callback) => {
    if (hostname.toLowerCase() !== 'localhost') {
      resolve(hostname, options as LookupAllOptions, callback as never);
      return;
    }
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '');
      const loopback = addresses.filter((a) => isLoopbackAddress(a.address));
      if (loopback.length === 0) {
        const refused: NodeJS.ErrnoException = new Error(
          `localhost resolved to ${addresses.map((a) => a.address).join(', ') || 'nothing'}, not to a loopback address; refusing to connect`,
        );
        refused.code = 'ENOTFOUND';
        return callback(refused, '');
      }
      if (options.all) return callback(null, loopback);
      callback(null, loopback[0]!.address, loopback[0]!.family);
    });
  };
}

/** 127.0.0.0/8, ::1, and IPv4-mapped 127.0.0.0/8. */
export function isLoopbackAddress(address: string): boolean {
  if (isIP(address) === 4) return address.startsWith('127.');
  const lower = address.toLowerCase();
  return lower === '::1' || lower.startsWith('::ffff:127.');
}

/** A request body, readable once per attempt so retries resend the same bytes; large bodies are streamed, never held. */
export interface UploadBody {
  /** The request's Content-Length. */
  readonly length: number;
  /** The whole body, when small enough to keep in memory. */
  readonly bytes: Buffer | undefined;
  /** A fresh stream of the body, for one attempt. */
  open(): Readable;
  /** Releases what the body holds (a spool file); safe to call twice. */
  dispose(): Promise<void>;
}

/**
 * Bodies up to this size are written in one piece, which costs less CPU than a stream of slices; larger ones stream
 * with backpressure. A one-piece body counts as sent once handed over, so a reset during its upload is not retried
 * without `retryAmbiguous`: a small price at this size.
 */
export const WHOLE_BODY_BYTES = 128 * 1024;

export function bytesBody(bytes: Buffer): UploadBody {
  return {
    length: bytes.length,
    bytes,
    open: () => Readable.from([bytes], { objectMode: false }),
    dispose: () => Promise.resolve(),
  };
}
