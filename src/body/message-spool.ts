import { createReadStream } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import type { UploadBody } from '../http/upload-body.js';
import { HeaderSectionFinder, MAX_HEADER_SECTION } from '../protocol/header-fields.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { emlBodyFromBuffer, emlBodyFromFile, LEAN_MESSAGE_BYTES } from './eml-upload-body.js';
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
    throw failure(err, signal);
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
  return inMemory(eml, head);
}

/**
 * A {@link MessageSink}'s producer: writes the message into `sink` (respecting
 * its backpressure, as `pipe` does) and calls `done` once, when all is written
 * or with the error that stopped it.
 */
export type MessageProducer = (sink: MessageSink, done: (err?: Error | null) => void) => void;

/**
 * Spools what a producer writes, as {@link spoolMessage} spools a stream, with
 * no stream of its own in between: a producer that can write into a Writable
 * (Nodemailer's MimeNode) saves the readable side, its pipeline and a copy
 * pass per chunk.
 *
 * @throws {EmlApiError} `EMESSAGE` when the producer fails; the signal's reason when it aborts
 */
export async function spoolWritten(
  produce: MessageProducer,
  settings: SpoolSettings,
  signal?: AbortSignal,
): Promise<SpooledMessage> {
  const collector = new Collector(settings);
  try {
    await collector.write(produce, signal);
    return await collector.finish();
  } catch (err) {
    await collector.discard();
    throw failure(err, signal);
  }
}

/**
 * A message already in one Buffer (built by a thread), as a spooled message:
 * kept as it is up to `threshold`, written to a spool file past it.
 */
export function spoolBuffer(eml: Buffer, settings: SpoolSettings, signal?: AbortSignal): Promise<SpooledMessage> {
  if (eml.length <= settings.threshold) return Promise.resolve(inMemory(eml));
  return spoolMessage(Readable.from([eml], { objectMode: false }), settings, signal);
}

/**
 * The error of a message that could not be built: `EMESSAGE`, permanent,
 * naming what failed (a missing attachment file...).
 */
export function buildError(cause: Error): EmlApiError {
  return new EmlApiError('EMESSAGE', `Could not build the message: ${cause.message}`, { cause, permanent: true });
}

function failure(err: unknown, signal: AbortSignal | undefined): unknown {
  if (err instanceof EmlApiError) return err;
  if (signal?.aborted) return signal.reason;
  return buildError(err as Error);
}

/** The Writable a {@link MessageProducer} writes into; it knows the last byte written (for a final newline). */
export class MessageSink extends Writable {
  #lastByte = -1;
  readonly #take: (chunk: Buffer) => Promise<void> | undefined;

  constructor(take: (chunk: Buffer) => Promise<void> | undefined) {
    super({ decodeStrings: true });
    this.#take = take;
  }

  /** The last byte written so far (-1 before any): known at write(), before the chunk is taken. */
  get lastByte(): number {
    return this.#lastByte;
  }

  override write(chunk: unknown, ...rest: unknown[]): boolean {
    this.#lastByte = lastByteOf(chunk, this.#lastByte);
    return (super.write as (...args: unknown[]) => boolean)(chunk, ...rest);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    const pending = this.#take(chunk);
    if (pending) pending.then(() => callback(), callback);
    else callback();
  }
}

/**
 * The last byte of a chunk about to be written, or `previous` for an empty
 * one. For a string, what matters is whether it ends with CR or LF: any
 * other last character is reported as 0xff.
 */
export function lastByteOf(chunk: unknown, previous: number): number {
  if (typeof chunk === 'string') {
    if (chunk.length === 0) return previous;
    const code = chunk.charCodeAt(chunk.length - 1);
    return code === 0x0a || code === 0x0d ? code : 0xff;
  }
  if (chunk instanceof Uint8Array) return chunk.length === 0 ? previous : chunk[chunk.length - 1]!;
  return previous;
}

/**
 * A message held in memory: one Buffer, its header section found only if
 * asked for; uploaded lean (one body, one write) up to LEAN_MESSAGE_BYTES.
 */
function inMemory(eml: Buffer, knownHead?: Buffer): SpooledMessage {
  let head: Buffer | undefined = knownHead;
  return {
    get head() {
      if (!head) {
        const scanner = new HeadScanner();
        scanner.scan(eml);
        head = scanner.finish();
      }
      return head;
    },
    size: eml.length,
    body: emlBodyFromBuffer(eml, LEAN_MESSAGE_BYTES),
    open: () => Readable.from([eml], { objectMode: false }),
  };
}

/** The header section of a message arriving in chunks (or its first MAX_HEADER_SECTION bytes when it never ends). */
class HeadScanner {
  readonly #finder = new HeaderSectionFinder();
  /** The header section once found (or the first MAX_HEADER_SECTION bytes when it never ends). */
  head: Buffer | undefined;

  scan(chunk: Buffer): void {
    if (this.head) return;
    const end = this.#finder.push(chunk);
    if (end !== undefined || this.#finder.size > MAX_HEADER_SECTION) {
      this.head = Buffer.from(this.#finder.take().subarray(0, end ?? MAX_HEADER_SECTION));
    }
  }

  /** The head at the end of the message: a message without a blank line is all header. */
  finish(): Buffer {
    return this.head ?? this.#finder.take();
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

  /**
   * Lets `produce` write the whole message into a sink, with backpressure
   * (a chunk's write completes once the spool took it).
   */
  write(produce: MessageProducer, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      let failed = false;
      const sink = new MessageSink((chunk) => this.#add(chunk, fail));
      const fail = (err: unknown) => {
        if (failed) return;
        failed = true;
        signal?.removeEventListener('abort', onAbort);
        sink.destroy();
        reject(err);
      };
      const onAbort = () => fail(signal!.reason);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      sink.on('error', fail);
      produce(sink, (err) => {
        if (err) return fail(err);
        if (failed) return;
        // Resolved once the chunks still waiting in the sink (behind a spool file's backpressure) are taken.
        sink.end(() => {
          if (failed) return;
          signal?.removeEventListener('abort', onAbort);
          resolve();
        });
      });
    });
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
    if (this.#file) {
      // Found while the message streams to the file: the file is not read back for it.
      this.#head.scan(chunk);
      return this.#file.write(chunk);
    }
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
    this.#head.scan(buffered);
    await file.write(buffered);
  }

  async finish(): Promise<SpooledMessage> {
    // A stream may end while the file its last chunk crossed the threshold with is still opening: the
    // message is in that file once the open is done (else the file would be left behind, and the message in memory).
    await this.#opening;
    if (this.#file) {
      const head = this.#head.finish();
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
    return inMemory(this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#size));
  }

  async discard(): Promise<void> {
    await this.#opening?.catch(() => undefined);
    await this.#file?.remove();
  }
}
