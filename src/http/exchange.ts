import { Readable } from 'node:stream';
import { type Socket, isIP } from 'node:net';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOptions } from 'node:dns';
import { type Dispatcher, buildConnector } from 'undici';

/** Where a request got to before it failed: decides whether a retry is safe. */
export type FailurePhase =
  /** The dispatcher had not started the request on a connection: the service cannot have seen it. */
  | 'connect'
  /** Started, but the body's last byte had not left: the service cannot have processed it. */
  | 'write'
  /** The whole request may have gone out: the service may have processed it. */
  | 'sent';

/** A failure to exchange a request, with the phase it failed in. */
export class ExchangeFailure extends Error {
  override readonly name = 'ExchangeFailure';
  constructor(
    readonly phase: FailurePhase,
    override readonly cause: unknown,
  ) {
    super('request failed', { cause });
  }
}

/** A raw response: status, headers (lower-case names) and body text. */
export interface RawResponse {
  statusCode: number;
  headers: Record<string, string>;
  text: string;
}

/** What one HTTP exchange needs. */
export interface ExchangeRequest {
  origin: string;
  path: string;
  method: 'GET' | 'POST' | 'DELETE';
  /** With the body's `content-length` when there is a body. */
  headers: Record<string, string>;
  body: UploadBody | undefined;
  signal: AbortSignal;
  /** Time allowed until the response headers arrive, in ms. */
  headersTimeout: number;
}

/** Bodies larger than {@link WHOLE_BODY_BYTES} are written in chunks of this size. */
const CHUNK_BYTES = 64 * 1024;

function* chunksOf(body: Buffer): Generator<Buffer> {
  for (let at = 0; at < body.length; at += CHUNK_BYTES) yield body.subarray(at, at + CHUNK_BYTES);
}

/** Answers longer than this are cut: error pages can be large, and only the start is useful. */
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
 * Sends one request through undici's dispatcher API and records how far the
 * request got, so callers can tell a failure the service cannot have
 * processed from one it may have, whoever made the dispatcher.
 *
 * How far it got is known from what every dispatcher must do, not from what
 * undici's own `Agent` happens to report: `onConnect` comes before the
 * request's first byte goes out (undici's handler contract, which its
 * interceptors keep), and a streamed body is watched at its source, where its
 * last byte leaves. `onRequestSent` is not used: undici's handler wrapping
 * (`dispatcher.compose()`, interceptors, `RetryAgent`) drops it, so a request
 * through a caller's interceptor would look unsent after it was sent.
 *
 * @throws {ExchangeFailure} on any failure to get a complete answer
 */
export function exchange(dispatcher: Dispatcher, request: ExchangeRequest): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const body = request.body;
    // A body written in one piece counts as sent as soon as it goes (a reset during its upload
    // looks like one after it), so only small bodies go whole; a larger one is streamed with
    // backpressure, and counts as sent only once its last byte has left.
    const whole = body === undefined || (body.bytes !== undefined && body.bytes.length <= WHOLE_BODY_BYTES);
    const streamed = !whole && body.length > 0;
    let connected = false;
    /** The body's last byte has left for the dispatcher: from then on the service may have it all. */
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
      // Only what is known counts as safe: once the last byte has left, the service may have
      // the whole request, whatever the dispatcher says (a connect-phase code aside).
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
        // Without a streamed body, the whole request goes out at once from here: undici writes a
        // body in one piece as soon as it has the socket, and no dispatcher can be watched doing it.
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
 * Calls `callback` when `stream` hands out the chunk that completes `length`
 * bytes, before its consumer can read it: until then the request's last byte
 * cannot have left, through any dispatcher. Seen where the stream's source
 * `push`es (every Readable's source does), so no stream is added in between
 * (a layer per chunk costs CPU on every upload).
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
 * How long a socket whose write failed keeps reading for the answer the
 * service may have sent before it closed, in ms. The answer of a server that
 * refused an upload is already in the socket when the write fails (it answers,
 * then closes), and a reset makes the read end at once: this only bounds the
 * wait for a peer that does neither.
 */
export const EARLY_ANSWER_WAIT = 2_000;

/**
 * An undici connector (its Agent's `connect` option) whose sockets still read
 * the answer of a server that refused a request before reading all of it.
 *
 * A server over its body limit answers `413` as soon as it knows and closes
 * the connection without reading the rest; the client, still uploading, then
 * fails to write (EPIPE, ECONNRESET). Node destroys a socket on a failed
 * write, and the answer, already received, is lost with it unless undici
 * happened to read it first: the send failed as a connection error (retried,
 * by the outbox for a day) instead of `413` (permanent). These sockets keep
 * their read side open after a failed write until the answer is read, the
 * connection ends, or {@link EARLY_ANSWER_WAIT} passes; undici then completes
 * the request with the answer, or fails it with the write's own error.
 *
 * @param options undici's connector options (timeout, lookup...)
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
 * Holds back, once, the error of a write the peer refused, so that the read
 * side delivers what the peer sent before it closed. The error cannot be let
 * through and the destruction merely delayed: a failed write marks the read
 * side of the socket failed too, and it reads no more. So the write's
 * callback is held: undici sees a write that has not finished (and writes no
 * more), the socket goes on reading, and the answer completes the request
 * (undici then closes the socket). Without an answer, the read ends with the
 * peer's reset, or the write fails after `wait`, as it would have at once.
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

/** A write the peer refused: it reset or closed the connection. A failed read is not one. */
function isFailedWrite(err: unknown): err is Error {
  const { code, syscall } = (err ?? {}) as { code?: unknown; syscall?: unknown };
  return (code === 'EPIPE' || code === 'ECONNRESET') && syscall !== 'read';
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
type Lookup = (hostname: string, options: LookupOptions, callback: LookupCallback) => void;

/**
 * A `lookup` for the connections the client opens: names resolve as usual,
 * except `localhost`, which may only resolve to loopback addresses. Plain
 * `http://` is allowed to `localhost` because it is this machine; a resolver
 * (or a hosts file) that says otherwise must not get the API key in clear text.
 *
 * @param resolve the resolver to ask (`dns.lookup`; a test passes its own)
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

/**
 * The body of one request, readable once per attempt so retries resend
 * exactly the same bytes. Large bodies are streamed, never held whole.
 */
export interface UploadBody {
  /** Byte length of the body (the request's Content-Length). */
  readonly length: number;
  /** The whole body, when it is small enough to keep in memory. */
  readonly bytes: Buffer | undefined;
  /** A fresh stream of the body bytes, for one attempt. */
  open(): Readable;
  /** Releases what the body holds (removes a spool file). Safe to call twice. */
  dispose(): Promise<void>;
}

/**
 * Bodies up to this size are written in one piece; larger ones in chunks,
 * with backpressure. One piece costs 15-30% less CPU per request than a
 * stream of slices for messages up to 96 KiB, and stops paying off at
 * messages of 112-128 KiB, bodies of 150-170 KiB
 * (bench/lean-crossover-case.ts, `npm run bench -- --only lean`).
 * A body written in one piece counts as sent once it is handed to the
 * connection (its upload cannot be watched, through any dispatcher), so a
 * reset during its upload counts as after it (not retried without
 * `retryAmbiguous`): a small price for bodies this small.
 */
export const WHOLE_BODY_BYTES = 128 * 1024;

/** A body held in memory. */
export function bytesBody(bytes: Buffer): UploadBody {
  return {
    length: bytes.length,
    bytes,
    open: () => Readable.from([bytes], { objectMode: false }),
    dispose: () => Promise.resolve(),
  };
}
