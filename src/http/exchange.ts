import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { WHOLE_BODY_BYTES, type UploadBody } from './upload-body.js';

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
          headers: body === undefined ? request.headers : { ...request.headers, 'content-length': String(body.length) },
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
