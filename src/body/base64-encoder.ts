import { Transform, type TransformCallback } from 'node:stream';

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
