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

/** A body held in memory. */
export function bytesBody(bytes: Buffer): UploadBody {
  return {
    length: bytes.length,
    bytes,
    open: () => Readable.from([bytes], { objectMode: false }),
    dispose: () => Promise.resolve(),
  };
}
