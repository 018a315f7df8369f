import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { WHOLE_BODY_BYTES, type UploadBody } from './upload-body.js';

/** Where a request got to before it failed: decides whether a retry is safe. */
export type FailurePhase =
  /** No connection was made: the service cannot have seen the request. */
  | 'connect'
  /** Connected, but the request was not fully written: the service cannot have processed it. */
  | 'write'
  /** The request was fully written (or that cannot be known): the service may have processed it. */
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
  /** Whether this dispatcher reports `onRequestSent` reliably (undici's own Agent does). */
  tracksWrites: boolean;
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
 * Sends one request through undici's dispatcher API with a handler that
 * records how far the request got, so callers can tell a failure the service
 * cannot have processed from one it may have.
 *
 * @throws {ExchangeFailure} on any failure to get a complete answer
 */
export function exchange(dispatcher: Dispatcher, request: ExchangeRequest): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    let connected = false;
    let sent = false;
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
      // Only what is known counts as safe: with a dispatcher that does not report
      // writes, anything but a connect-phase error may have reached the service.
      let phase: FailurePhase;
      if (typeof code === 'string' && CONNECT_PHASE_CODES.has(code)) phase = 'connect';
      else if (request.tracksWrites && !connected) phase = 'connect';
      else if (request.tracksWrites && !sent) phase = 'write';
      else phase = 'sent';
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
        if (request.signal.aborted) onAbort();
      },
      onRequestSent() {
        sent = true;
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
      const body = request.body;
      dispatcher.dispatch(
        {
          origin: request.origin,
          path: request.path,
          method: request.method,
          headers: body === undefined ? request.headers : { ...request.headers, 'content-length': String(body.length) },
          // Written as a stream with backpressure, `onRequestSent` means the socket took the last
          // chunk; a buffer body is reported sent as soon as it is queued, so a reset during the
          // upload would look like one after it: only small bodies go in one piece.
          body:
            body === undefined
              ? undefined
              : body.bytes !== undefined && body.bytes.length <= WHOLE_BODY_BYTES
                ? body.bytes
                : body.bytes !== undefined
                  ? Readable.from(chunksOf(body.bytes), { objectMode: false })
                  : body.open(),
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
