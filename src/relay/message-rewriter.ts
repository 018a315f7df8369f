import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { headerSectionEnd } from '../protocol/header-fields.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/** Header sections longer than this are refused: no real message needs more. */
export const MAX_HEADER_SECTION = 1024 * 1024;

/**
 * The message as it arrives from DATA, passed through with its header
 * section replaced by what `rewriteHead` makes of it, and hashed (SHA-256)
 * as it leaves. It holds at most the header section in memory; the body
 * streams through with backpressure.
 */
export class MessageRewriter extends Transform {
  readonly #rewriteHead: (head: Buffer) => Buffer;
  readonly #tooLarge: () => Error | undefined;
  readonly #hash: Hash = createHash('sha256');
  readonly #parts: Buffer[] = [];
  #size = 0;
  #tail = Buffer.alloc(0);
  #headDone = false;
  /** The error this stream failed with (a refused envelope, an oversized message or header), if any. */
  failure: Error | undefined;

  /**
   * @param rewriteHead gets the header section (up to and including its blank line) and returns the one to send;
   *   what it throws fails the stream
   * @param tooLarge checked on every chunk: an error to fail with once the message is over the size limit
   */
  constructor(rewriteHead: (head: Buffer) => Buffer, tooLarge: () => Error | undefined) {
    super();
    this.#rewriteHead = rewriteHead;
    this.#tooLarge = tooLarge;
  }

  /** SHA-256 (hex) of the bytes that left, once the stream has ended. */
  digest(): string {
    return this.#hash.copy().digest('hex');
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#step(chunk, (err) => callback(this.#fail(err)));
  }

  override _flush(callback: TransformCallback): void {
    const oversize = this.#tooLarge();
    // A message without a blank line is all header.
    callback(this.#fail(oversize ?? (this.#headDone ? undefined : this.#finishHead(this.#size))));
  }

  #fail(err: Error | null | undefined): Error | undefined {
    if (err) this.failure ??= err;
    return err ?? undefined;
  }

  #step(chunk: Buffer, callback: (err?: Error) => void): void {
    const oversize = this.#tooLarge();
    if (oversize) return callback(oversize);
    if (this.#headDone) {
      this.#emit(chunk);
      return callback();
    }
    this.#parts.push(chunk);
    // Only the new bytes (and the last 3 of the previous chunk) are searched: linear in the header's length.
    const window = this.#tail.length > 0 ? Buffer.concat([this.#tail, chunk]) : chunk;
    const offset = this.#size - this.#tail.length;
    this.#size += chunk.length;
    const end = headerSectionEnd(window);
    if (end !== undefined) return callback(this.#finishHead(offset + end));
    if (this.#size > MAX_HEADER_SECTION) {
      return callback(
        new EmlApiError('EMESSAGE', `The header section is longer than ${MAX_HEADER_SECTION} bytes`, {
          permanent: true,
        }),
      );
    }
    this.#tail = Buffer.from(window.subarray(Math.max(0, window.length - 3)));
    callback();
  }

  /** Rewrites the head (the first `end` bytes held) and lets the rest through. @returns the rewrite's error */
  #finishHead(end: number): Error | undefined {
    const held = Buffer.concat(this.#parts, this.#size);
    this.#parts.length = 0;
    this.#headDone = true;
    try {
      this.#emit(this.#rewriteHead(held.subarray(0, end)));
    } catch (err) {
      return err as Error;
    }
    this.#emit(held.subarray(end));
    return undefined;
  }

  #emit(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.#hash.update(bytes);
    this.push(bytes);
  }
}
