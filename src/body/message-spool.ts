import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import type { UploadBody } from '../http/upload-body.js';
import { headerSectionEnd } from '../protocol/header-fields.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { emlBodyFromBuffer, emlBodyFromFile, STREAM_ABOVE } from './eml-upload-body.js';
import { SpoolFile } from './spool-file.js';
import type { SpoolSettings } from './spool-options.js';

/** A built message: its header section, and the upload body of the whole message. */
export interface SpooledMessage {
  /** The header section (up to and including the blank line), for reading recipients. */
  head: Buffer;
  /** Bytes of the whole message. */
  size: number;
  /** The `{"mail":"<base64>"}` request body. */
  body: UploadBody;
  /**
   * A fresh stream of the message bytes themselves (from memory, or from the
   * spool file in chunks), e.g. to store them elsewhere. Valid until `body.dispose()`.
   */
  open(): Readable;
}

/** Chunks in which a spooled message is read back by `open()`. */
const FILE_CHUNK = 1024 * 1024;

/** Header sections longer than this are cut: no real message needs more to name its recipients. */
const MAX_HEAD = 1024 * 1024;

/**
 * Reads a message stream (Nodemailer's built message, or a user's stream).
 * Up to `threshold` bytes it stays in memory; past that, everything goes to a
 * temporary file, written with backpressure, so memory stays flat whatever
 * the size. The file is removed by `body.dispose()`, and here on any failure.
 *
 * @throws {EmlApiError} `EMESSAGE` when the stream fails; the signal's reason when it aborts
 *   (the call that owns the signal maps it to `EABORT` or `ETIMEDOUT`)
 */
export async function spoolMessage(
  stream: Readable,
  settings: SpoolSettings,
  signal?: AbortSignal,
): Promise<SpooledMessage> {
  const collector = new Collector(settings);
  try {
    await collector.read(stream, signal);
    return await collector.finish();
  } catch (err) {
    await collector.discard();
    if (err instanceof EmlApiError) throw err;
    if (signal?.aborted) throw signal.reason;
    throw new EmlApiError('EMESSAGE', `Could not build the message: ${(err as Error).message}`, {
      cause: err,
      permanent: true,
    });
  }
}

/**
 * A message held in memory as a {@link SpooledMessage}, without reading it
 * through a stream: for a message already whole in memory (the relay adding
 * a field to one it spooled).
 *
 * @param head its header section (up to and including the blank line), or the whole message when it has no body
 * @example
 * const spooled = spooledInMemory(Buffer.from('From: a@x.test\r\n\r\nHi\r\n'), Buffer.from('From: a@x.test\r\n\r\n'));
 */
export function spooledInMemory(eml: Buffer, head: Buffer): SpooledMessage {
  return {
    head,
    size: eml.length,
    body: emlBodyFromBuffer(eml, STREAM_ABOVE),
    open: () => Readable.from([eml], { objectMode: false }),
  };
}

/**
 * Finds the header section of a message arriving in chunks: looks only at new
 * bytes (plus the last 3 of the previous chunk), so the cost stays linear.
 */
class HeadScanner {
  readonly #parts: Buffer[] = [];
  #size = 0;
  #tail = Buffer.alloc(0);
  /** The header section once found (or the first MAX_HEAD bytes when it never ends). */
  head: Buffer | undefined;

  scan(chunk: Buffer): void {
    if (this.head) return;
    this.#parts.push(chunk);
    const window = this.#tail.length ? Buffer.concat([this.#tail, chunk]) : chunk;
    const offset = this.#size - this.#tail.length;
    this.#size += chunk.length;
    const end = headerSectionEnd(window);
    if (end !== undefined || this.#size > MAX_HEAD) {
      const all = Buffer.concat(this.#parts, this.#size);
      this.head = Buffer.from(all.subarray(0, end !== undefined ? offset + end : MAX_HEAD));
      this.#parts.length = 0;
      return;
    }
    this.#tail = Buffer.from(window.subarray(Math.max(0, window.length - 3)));
  }

  /** The head at the end of the message: a message without a blank line is all header. */
  finish(): Buffer {
    return this.head ?? Buffer.concat(this.#parts, this.#size);
  }
}

/** Collects chunks in memory, then in a spool file once past the threshold. */
class Collector {
  readonly #settings: SpoolSettings;
  readonly #chunks: Buffer[] = [];
  readonly #head = new HeadScanner();
  #size = 0;
  #file: SpoolFile | undefined;
  /** The file being opened, so discard() cannot run before it exists. */
  #opening: Promise<void> | undefined;

  constructor(settings: SpoolSettings) {
    this.#settings = settings;
  }

  /** Reads the whole stream with 'data' events (many small chunks: cheaper than async iteration). */
  read(stream: Readable, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      let failed = false;
      const fail = (err: unknown) => {
        if (failed) return;
        failed = true;
        signal?.removeEventListener('abort', onAbort);
        stream.destroy();
        reject(err);
      };
      const onAbort = () => fail(signal!.reason);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      stream.on('data', (part: Buffer | string) => {
        const pending = this.#add(typeof part === 'string' ? Buffer.from(part) : part, fail);
        if (pending) {
          stream.pause();
          pending.then(() => stream.resume(), fail);
        }
      });
      stream.once('error', fail);
      stream.once('end', () => {
        if (failed) return;
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  /** Takes one chunk. @returns a promise when the caller must wait (opening the file, backpressure) */
  #add(chunk: Buffer, fail: (err: unknown) => void): Promise<void> | undefined {
    this.#size += chunk.length;
    this.#head.scan(chunk);
    if (this.#file) return this.#file.write(chunk);
    this.#chunks.push(chunk);
    if (this.#size <= this.#settings.threshold) return undefined;
    this.#opening = this.#openFile(fail);
    return this.#opening;
  }

  async #openFile(fail: (err: unknown) => void): Promise<void> {
    const file = await SpoolFile.create(this.#settings.directory);
    this.#file = file;
    // A write that fails while the source is flowing ends the read at once.
    file.onError(fail);
    const buffered = Buffer.concat(this.#chunks);
    this.#chunks.length = 0;
    await file.write(buffered);
  }

  async finish(): Promise<SpooledMessage> {
    const head = this.#head.finish();
    if (this.#file) {
      const file = this.#file;
      await file.end();
      const path = file.path;
      return {
        head,
        size: this.#size,
        body: emlBodyFromFile(path, this.#size, () => file.remove()),
        open: () => createReadStream(path, { highWaterMark: FILE_CHUNK }),
      };
    }
    return spooledInMemory(
      this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#size),
      head,
    );
  }

  async discard(): Promise<void> {
    await this.#opening?.catch(() => undefined);
    await this.#file?.remove();
  }
}
