import { createReadStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { Readable, Transform, type TransformCallback } from 'node:stream';

/**
 * The JSON body of one request, readable once per attempt so retries resend
 * exactly the same bytes. Large EML bodies are streamed, never held whole.
 */
export interface UploadBody {
  /** Byte length of the JSON body (the request's Content-Length). */
  readonly length: number;
  /** The whole body, when it is small enough to keep in memory. */
  readonly bytes: Buffer | undefined;
  /** A fresh stream of the body bytes, for one attempt. */
  open(): Readable;
  /** Releases what the body holds (removes a spool file). Safe to call twice. */
  dispose(): Promise<void>;
}

const PREFIX = Buffer.from('{"mail":"');
const SUFFIX = Buffer.from('"}');
/** Base64 slices are multiples of 3 bytes so each slice encodes on its own. */
const SLICE = 3 * 16 * 1024;

/** In-memory messages above this size are Base64-encoded in slices per attempt instead of at once. */
export const STREAM_ABOVE = 256 * 1024;

/** Length of the `{"mail":"<base64>"}` body for an EML of `size` bytes. */
export function emlBodyLength(size: number): number {
  return PREFIX.length + 4 * Math.ceil(size / 3) + SUFFIX.length;
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

/**
 * The EML request body for a message in memory. Small messages are encoded
 * once; large ones are encoded slice by slice on each attempt, so the Base64
 * text (4/3 of the message) never exists whole.
 */
export function emlBodyFromBuffer(eml: Buffer, streamAbove: number): UploadBody {
  if (eml.length <= streamAbove) {
    // Base64 has no character JSON must escape, so the body is framed by plain byte copies.
    const bytes = Buffer.allocUnsafe(emlBodyLength(eml.length));
    PREFIX.copy(bytes, 0);
    const written = bytes.write(eml.toString('base64'), PREFIX.length, 'latin1');
    SUFFIX.copy(bytes, PREFIX.length + written);
    return bytesBody(bytes);
  }
  return {
    length: emlBodyLength(eml.length),
    bytes: undefined,
    open: () => Readable.from(frame(sliceBase64(eml)), { objectMode: false }),
    dispose: () => Promise.resolve(),
  };
}

/** The EML request body for a message spooled to a file; `dispose` removes `removeOnDispose`. */
export function emlBodyFromFile(path: string, size: number, removeOnDispose: string): UploadBody {
  let disposed: Promise<void> | undefined;
  return {
    length: emlBodyLength(size),
    bytes: undefined,
    open: () => {
      const file = createReadStream(path, { highWaterMark: SLICE });
      const encoder = new Base64Encoder();
      file.once('error', (err) => encoder.destroy(err));
      return Readable.from(frame(file.pipe(encoder)), { objectMode: false });
    },
    dispose: () => (disposed ??= rm(removeOnDispose, { recursive: true, force: true })),
  };
}

async function* frame(base64: AsyncIterable<Buffer> | Iterable<Buffer>): AsyncGenerator<Buffer> {
  yield PREFIX;
  for await (const chunk of base64) yield chunk;
  yield SUFFIX;
}

function* sliceBase64(eml: Buffer): Generator<Buffer> {
  for (let at = 0; at < eml.length; at += SLICE) {
    yield Buffer.from(eml.subarray(at, at + SLICE).toString('base64'), 'latin1');
  }
}

/** Streaming Base64: carries the 0-2 bytes that do not fill a 3-byte group to the next chunk. */
export class Base64Encoder extends Transform {
  #rest: Buffer = Buffer.alloc(0);

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const data = this.#rest.length > 0 ? Buffer.concat([this.#rest, chunk]) : chunk;
    const whole = data.length - (data.length % 3);
    this.#rest = Buffer.from(data.subarray(whole));
    if (whole > 0) this.push(Buffer.from(data.subarray(0, whole).toString('base64'), 'latin1'));
    callback();
  }

  override _flush(callback: TransformCallback): void {
    if (this.#rest.length > 0) this.push(Buffer.from(this.#rest.toString('base64'), 'latin1'));
    callback();
  }
}
