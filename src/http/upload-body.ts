import { Readable } from 'node:stream';

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
