// Request bodies of `POST /v1/send/eml`: `{"mail":"<base64>"}` framed around a message in memory or in a spool file,
// encoded slice by slice so the Base64 text (4/3 of the message) never exists whole.

import { createReadStream } from 'node:fs';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { bytesBody, WHOLE_BODY_BYTES, type UploadBody } from '../http/exchange.js';

const PREFIX = Buffer.from('{"mail":"');
const SUFFIX = Buffer.from('"}');
/** Multiples of 3 bytes, so each slice encodes on its own. */
const SLICE = 3 * 16 * 1024;

/** In-memory messages above this are Base64-encoded in slices on each attempt. */
export const STREAM_ABOVE = 256 * 1024;

/**
 * The largest message uploaded lean: encoded at once into one body written in one piece ({@link WHOLE_BODY_BYTES});
 * above it, streaming in slices costs no more CPU and holds less memory.
 */
export const LEAN_MESSAGE_BYTES = Math.floor((WHOLE_BODY_BYTES - PREFIX.length - SUFFIX.length) / 4) * 3;

/** Length of the `{"mail":"<base64>"}` body for an EML of `size` bytes. */
export function emlBodyLength(size: number): number {
  return PREFIX.length + 4 * Math.ceil(size / 3) + SUFFIX.length;
}

/** The largest message whose `{"mail":"<base64>"}` upload fits in a request of `limit` bytes. */
export function maxUploadableSize(limit: number): number {
  return 3 * Math.floor((limit - emlBodyLength(0)) / 4);
}

/** The EML request body for a message in memory, encoded at once when small, else in slices on each attempt. */
export function emlBodyFromBuffer(eml: Buffer, streamAbove: number): UploadBody {
  if (eml.length <= streamAbove) return bytesBody(wholeEmlBody(eml));

  return {
    length: emlBodyLength(eml.length),
    bytes: undefined,
    open: () => Readable.from(frame(sliceBase64(eml)), { objectMode: false }),
    dispose: () => Promise.resolve(),
  };
}

/**
 * The whole body of a message, in one Buffer.
 * @param allocate makes the Buffer (`Buffer.allocUnsafeSlow` for one whose memory may be transferred)
 */
export function wholeEmlBody(eml: Buffer, allocate: (size: number) => Buffer = Buffer.allocUnsafe): Buffer {
  // Base64 has no character JSON must escape: plain byte copies frame it.
  const bytes = allocate(emlBodyLength(eml.length));
  PREFIX.copy(bytes, 0);
  const written = bytes.write(eml.toString('base64'), PREFIX.length, 'latin1');
  SUFFIX.copy(bytes, PREFIX.length + written);
  return bytes;
}

/** The EML request body for a spooled message; `remove` is called once on dispose. */
export function emlBodyFromFile(path: string, size: number, remove: () => Promise<void>): UploadBody {
  return emlBodyFromStream(size, () => createReadStream(path, { highWaterMark: SLICE }), remove);
}

/**
 * The EML request body for a message read from a stream that `open` makes anew for each attempt, encoded as it streams;
 * `dispose` runs once, however often it is called.
 */
export function emlBodyFromStream(size: number, open: () => Readable, dispose: () => Promise<void>): UploadBody {
  let disposed: Promise<void> | undefined;
  return {
    length: emlBodyLength(size),
    bytes: undefined,
    open: () => {
      const source = open();
      const encoder = new Base64Encoder();
      source.once('error', (err) => encoder.destroy(err));
      return Readable.from(frame(source.pipe(encoder)), { objectMode: false });
    },
    dispose: () => (disposed ??= dispose()),
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
