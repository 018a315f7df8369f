import type { Readable } from 'node:stream';
import { encryptedSize, RECORD_OVERHEAD } from './content-cipher.js';

/**
 * How a message lies in its Redis string: plain, in the chunks it was
 * written in; encrypted, in records of exactly one chunk of content each (the
 * last shorter), so that a reader finds record `i` at `i × (chunk + 28)`.
 */

/**
 * Bytes per Redis command when content is written or read: what a producer
 * or a worker holds of a large message at a time.
 * @example
 * const commands = Math.ceil(size / CONTENT_CHUNK); // 25 for a 25 MiB message
 */
export const CONTENT_CHUNK = 1024 * 1024;

/**
 * Content stored up to this size (its stored bytes, with encryption's
 * overhead) goes in the job itself (`inline`, Base64) instead of under a key
 * of its own: the producer writes it with the job's add, in one round trip,
 * and a worker has it as it takes the job, with no read of its own. Larger
 * content stays beside the job, written and read in chunks (see
 * content-store.ts, and docs/outbox.md, "How messages are stored", on why: BullMQ parses a job's whole data
 * whenever it reads the job).
 * @example
 * const inline = storedLength({ size, encryption }) <= INLINE_MAX_BYTES;
 */
export const INLINE_MAX_BYTES = 64 * 1024;

/**
 * Bytes under the key of a job's content: with encryption, each record's nonce and tag added.
 * @example
 * storedLength({ size: 100, encryption: { keyId: 'k1' } }); // 128
 */
export function storedLength(ref: { size: number; encryption?: unknown }): number {
  return ref.encryption === undefined ? ref.size : encryptedSize(ref.size, CONTENT_CHUNK);
}

/**
 * Where each chunk of plain content lies.
 * @example
 * plainSpans(3 * CONTENT_CHUNK).length; // 3
 */
export function plainSpans(size: number): { index: number; start: number; end: number }[] {
  const spans = [];
  for (let at = 0, index = 0; at < size; at += CONTENT_CHUNK, index++) {
    spans.push({ index, start: at, end: Math.min(size, at + CONTENT_CHUNK) });
  }
  return spans;
}

/**
 * Where each record of encrypted content lies in the stored bytes (one record at least).
 * @example
 * records(10); // [{ index: 0, start: 0, end: 38 }]
 */
export function records(size: number): { index: number; start: number; end: number }[] {
  const spans = [];
  const count = Math.max(1, Math.ceil(size / CONTENT_CHUNK));
  for (let index = 0; index < count; index++) {
    const start = index * (CONTENT_CHUNK + RECORD_OVERHEAD);
    const plain = Math.min(CONTENT_CHUNK, size - index * CONTENT_CHUNK);
    spans.push({ index, start, end: start + plain + RECORD_OVERHEAD });
  }
  return spans;
}

/**
 * A source's pieces as Buffers.
 * @example
 * for await (const piece of pieces(spooled.open())) hash.update(piece);
 */
export async function* pieces(source: Readable | Buffer): AsyncGenerator<Buffer> {
  const parts = Buffer.isBuffer(source) ? [source] : source;
  for await (const part of parts as AsyncIterable<Buffer | string>) {
    yield typeof part === 'string' ? Buffer.from(part) : part;
  }
}

/**
 * A source cut into chunks of exactly CONTENT_CHUNK bytes, the last shorter; one (empty) chunk at least.
 * @example
 * for await (const chunk of exactChunks(spooled.open())) records.push(keyring.seal(chunk, aad));
 */
export async function* exactChunks(source: Readable | Buffer): AsyncGenerator<Buffer> {
  let held: Buffer[] = [];
  let length = 0;
  let yielded = false;
  for await (const part of pieces(source)) {
    let rest = part;
    while (length + rest.length >= CONTENT_CHUNK) {
      const take = CONTENT_CHUNK - length;
      held.push(rest.subarray(0, take));
      rest = rest.subarray(take);
      yield Buffer.concat(held, CONTENT_CHUNK);
      yielded = true;
      held = [];
      length = 0;
    }
    if (rest.length > 0) {
      held.push(rest);
      length += rest.length;
    }
  }
  if (length > 0 || !yielded) yield Buffer.concat(held, length);
}
