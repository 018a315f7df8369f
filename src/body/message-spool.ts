import { createReadStream, createWriteStream, type WriteStream, rmSync } from 'node:fs';
import { Readable } from 'node:stream';
import { EventEmitter, once } from 'node:events';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { bytesBody, type UploadBody } from '../http/exchange.js';
import { HeaderSectionFinder, MAX_HEADER_SECTION } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { emlBodyFromBuffer, emlBodyFromFile, LEAN_MESSAGE_BYTES } from './eml-upload-body.js';

/** A built message: its header section, and the upload body of the whole message. */
export interface SpooledMessage {
  /** The header section (up to and including the blank line), for reading recipients. */
  head: Buffer;
  size: number;
  body: UploadBody;
  /** A fresh stream of the message bytes (from memory or the spool file), valid until `body.dispose()`. */
  open(): Readable;
  /** The message bytes, when held in memory. */
  bytes?: Buffer;
}

const FILE_CHUNK = 1024 * 1024;

/**
 * Reads a message stream into memory up to `threshold` bytes, past that into a temporary file with backpressure, so
 * memory stays flat. `body.dispose()` removes the file, and so does any failure here.
 * @throws {EmlApiError} `EMESSAGE` when the stream fails; the signal's reason when it aborts
 */
export async function spoolMessage(
  stream: Readable,
  settings: SpoolSettings,
  signal?: AbortSignal,
  limit?: SpoolLimit,
): Promise<SpooledMessage> {
  const collector = new Collector(settings, limit);
  try {
    await collector.read(stream, signal);
    return await collector.finish();
  } catch (err) {
    await collector.discard();
    throw failure(err, signal);
  }
}

/**
 * A message already whole in memory as a {@link SpooledMessage}, e.g. the relay adding a field to one it spooled.
 * @param head its header section, or the whole message when it has no body
 */
export function spooledInMemory(eml: Buffer, head: Buffer): SpooledMessage {
  return inMemory(eml, head);
}

/** Writes the message into `sink`, respecting its backpressure as `pipe` does, and calls `done` once. */
export type MessageProducer = (sink: MessageSink, done: (err?: Error | null) => void) => void;

/**
 * Spools what a producer writes with no stream in between: a producer that writes into a Writable (Nodemailer's
 * MimeNode) saves the readable side, its pipeline and a copy pass per chunk.
 * @throws {EmlApiError} `EMESSAGE` when the producer fails; the signal's reason when it aborts
 */
export async function spoolWritten(
  produce: MessageProducer,
  settings: SpoolSettings,
  signal?: AbortSignal,
  limit?: SpoolLimit,
): Promise<SpooledMessage> {
  const collector = new Collector(settings, limit);
  try {
    await collector.write(produce, signal);
    return await collector.finish();
  } catch (err) {
    await collector.discard();
    throw failure(err, signal);
  }
}

/** A message in one Buffer (built by a thread), kept as it is up to `threshold`, spooled past it. */
export function spoolBuffer(
  eml: Buffer,
  settings: SpoolSettings,
  signal?: AbortSignal,
  limit?: SpoolLimit,
  wholeBody?: Buffer,
): Promise<SpooledMessage> {
  if (limit && eml.length > limit.bytes) return Promise.reject(limit.error());
  if (eml.length <= settings.threshold) return Promise.resolve(inMemory(eml, undefined, wholeBody));
  return spoolMessage(Readable.from([eml], { objectMode: false }), settings, signal);
}

/** Past this many bytes, spooling stops within a chunk with `error()`, and what was spooled is removed. */
export interface SpoolLimit {
  bytes: number;
  error(): Error;
}

/** A message that could not be built (a missing attachment file...): `EMESSAGE`, permanent. */
export function buildError(cause: Error): EmlApiError {
  return new EmlApiError('EMESSAGE', `Could not build the message: ${cause.message}`, { cause, permanent: true });
}

function failure(err: unknown, signal: AbortSignal | undefined): unknown {
  if (err instanceof EmlApiError) return err;
  if (signal?.aborted) return signal.reason;
  return buildError(err as Error);
}

/**
 * A Writable as far as Nodemailer's tree and `pipe` use one, without Node's Writable machinery per chunk. A chunk goes
 * to `take` at once; while a take is pending (a spool file opening or flushing), later chunks wait in order and `write`
 * returns false until `'drain'`.
 */
export class MessageSink extends EventEmitter {
  #lastByte = -1;
  #writes = 0;
  #destroyed = false;
  #ending = false;
  #finished = false;
  #needDrain = false;
  #waiting: { chunk: Buffer; callback: WriteCallback | undefined }[] | undefined;
  readonly #take: (chunk: Buffer) => Promise<void> | undefined;

  constructor(take: (chunk: Buffer) => Promise<void> | undefined) {
    super();
    this.#take = take;
  }

  /** Chunks written so far: how a build shows it is moving. */
  get writes(): number {
    return this.#writes;
  }

  /** The last byte written (-1 before any), known at write(), for a final newline. */
  get lastByte(): number {
    return this.#lastByte;
  }

  get destroyed(): boolean {
    return this.#destroyed;
  }

  get writable(): boolean {
    return !this.#destroyed && !this.#ending;
  }

  get writableNeedDrain(): boolean {
    return this.#needDrain;
  }

  write(chunk: unknown, encoding?: BufferEncoding | WriteCallback, callback?: WriteCallback): boolean {
    const done = typeof encoding === 'function' ? encoding : callback;
    if (this.#destroyed || this.#ending) {
      const err = new Error(this.#destroyed ? 'write after the sink was destroyed' : 'write after end');
      if (done) process.nextTick(done, err);
      return false;
    }
    this.#lastByte = lastByteOf(chunk, this.#lastByte);
    this.#writes++;
    const bytes = toBuffer(chunk, typeof encoding === 'string' ? encoding : undefined);
    if (this.#waiting) {
      this.#waiting.push({ chunk: bytes, callback: done });
      this.#needDrain = true;
      return false;
    }
    const pending = this.#take(bytes);
    if (!pending) {
      if (done) process.nextTick(done);
      return true;
    }
    this.#waiting = [];
    this.#needDrain = true;
    this.#await(pending, done);
    return false;
  }

  end(chunk?: unknown, encoding?: BufferEncoding | (() => void), callback?: () => void): this {
    const done = typeof chunk === 'function' ? chunk : typeof encoding === 'function' ? encoding : callback;
    if (chunk !== undefined && chunk !== null && typeof chunk !== 'function') {
      this.write(chunk, typeof encoding === 'string' ? encoding : undefined);
    }
    if (done) {
      if (this.#finished) process.nextTick(done as () => void);
      else this.once('finish', done as () => void);
    }
    if (!this.#ending) {
      this.#ending = true;
      if (!this.#waiting) process.nextTick(() => this.#finish());
    }
    return this;
  }

  destroy(err?: Error | null): this {
    if (this.#destroyed) return this;
    this.#destroyed = true;
    this.#waiting = undefined;
    process.nextTick(() => {
      if (err) this.emit('error', err);
      this.emit('close');
    });
    return this;
  }

  #await(pending: Promise<void>, callback: WriteCallback | undefined): void {
    pending.then(
      () => {
        if (callback) callback();
        this.#next();
      },
      (err: Error) => {
        if (callback) callback(err);
        this.destroy(err);
      },
    );
  }

  #next(): void {
    const waiting = this.#waiting;
    if (!waiting || this.#destroyed) return;
    while (waiting.length > 0) {
      const { chunk, callback } = waiting.shift()!;
      const pending = this.#take(chunk);
      if (pending) return this.#await(pending, callback);
      if (callback) callback();
    }
    this.#waiting = undefined;
    if (this.#needDrain) {
      this.#needDrain = false;
      this.emit('drain');
    }
    if (this.#ending) this.#finish();
  }

  #finish(): void {
    if (this.#finished || this.#destroyed) return;
    this.#finished = true;
    this.emit('finish');
  }
}

type WriteCallback = (err?: Error | null) => void;

function toBuffer(chunk: unknown, encoding: BufferEncoding | undefined): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding ?? 'utf8');
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError('A message chunk must be a string, a Buffer or a Uint8Array');
}

/** The last byte of a chunk about to be written, or `previous` for an empty one; for a string, CR, LF or 0xff. */
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
 * A message held in memory, uploaded lean (one body, one write) up to LEAN_MESSAGE_BYTES.
 * @param wholeBody its upload body, when a build thread made it already
 */
function inMemory(eml: Buffer, knownHead?: Buffer, wholeBody?: Buffer): SpooledMessage {
  let head: Buffer | undefined = knownHead;
  return {
    get head() {
      head ??= headerSection(eml);
      return head;
    },
    size: eml.length,
    body:
      wholeBody && eml.length <= LEAN_MESSAGE_BYTES ? bytesBody(wholeBody) : emlBodyFromBuffer(eml, LEAN_MESSAGE_BYTES),
    open: () => Readable.from([eml], { objectMode: false }),
    bytes: eml,
  };
}

/** The header section (up to and including the blank line), or the first MAX_HEADER_SECTION bytes when it never ends. */
export function headerSection(eml: Buffer): Buffer {
  const scanner = new HeadScanner();
  scanner.scan(eml);
  return scanner.finish();
}

class HeadScanner {
  readonly #finder = new HeaderSectionFinder();
  head: Buffer | undefined;

  scan(chunk: Buffer): void {
    if (this.head) return;
    const end = this.#finder.push(chunk);
    if (end !== undefined || this.#finder.size > MAX_HEADER_SECTION) {
      this.head = Buffer.from(this.#finder.take().subarray(0, end ?? MAX_HEADER_SECTION));
    }
  }

  /** A message without a blank line is all header. */
  finish(): Buffer {
    return this.head ?? this.#finder.take();
  }
}

class Collector {
  readonly #settings: SpoolSettings;
  readonly #limit: SpoolLimit | undefined;
  readonly #chunks: Buffer[] = [];
  /** Found as the message goes to a file; one kept in memory finds it when asked. */
  #head: HeadScanner | undefined;
  #size = 0;
  #file: SpoolFile | undefined;
  /** The file being opened, so discard() cannot run before it exists. */
  #opening: Promise<void> | undefined;

  constructor(settings: SpoolSettings, limit?: SpoolLimit) {
    this.#settings = settings;
    this.#limit = limit;
  }

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
        // Once the chunks still waiting in the sink behind a spool file's backpressure are taken.
        sink.end(() => {
          if (failed) return;
          signal?.removeEventListener('abort', onAbort);
          resolve();
        });
      });
    });
  }

  /** 'data' events: many small chunks are cheaper than with async iteration. */
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

  #add(chunk: Buffer, fail: (err: unknown) => void): Promise<void> | undefined {
    this.#size += chunk.length;
    if (this.#limit && this.#size > this.#limit.bytes) {
      fail(this.#limit.error());
      return undefined;
    }
    if (this.#file) {
      // Found while the message streams to the file, which is then not read back for it.
      this.#head!.scan(chunk);
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
    file.onError(fail);
    const buffered = Buffer.concat(this.#chunks);
    this.#chunks.length = 0;
    this.#head = new HeadScanner();
    this.#head.scan(buffered);
    await file.write(buffered);
  }

  async finish(): Promise<SpooledMessage> {
    // A stream may end while the file its last chunk crossed the threshold with is still opening: the message is in
    // that file once the open is done.
    await this.#opening;
    if (this.#file) {
      const head = this.#head!.finish();
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

/**
 * One message's spool file, in a folder of its own (mode 0700) with mode 0600, so no other user can read a message on a
 * shared machine. A failed write (disk full, file-size limit) is reported to the send, never as an unhandled 'error'.
 */
export class SpoolFile {
  readonly folder: string;
  readonly path: string;
  readonly #stream: WriteStream;
  #error: EmlApiError | undefined;
  #onError: ((err: EmlApiError) => void) | undefined;

  private constructor(folder: string) {
    this.folder = folder;
    this.path = join(folder, 'message.eml');
    this.#stream = createWriteStream(this.path, { flags: 'wx', mode: 0o600 });
    // Listened to for the file's whole life: an error while nobody waits on 'drain' must not throw.
    this.#stream.on('error', (err) => {
      this.#error ??= new EmlApiError(
        'ESPOOL',
        `Could not write the message's spool file in ${folder}: ${err.message}`,
        {
          cause: err,
          permanent: false,
        },
      );
      this.#onError?.(this.#error);
    });
  }

  /** Creates a spool file in `directory`, first sweeping folders left by dead processes. */
  static async create(directory: string): Promise<SpoolFile> {
    await sweepStaleSpoolFolders(directory);
    const folder = await mkdtemp(spoolFolderPrefix(directory));
    trackSpoolFolder(folder);
    return new SpoolFile(folder);
  }

  onError(listener: (err: EmlApiError) => void): void {
    this.#onError = listener;
    if (this.#error) listener(this.#error);
  }

  write(chunk: Buffer): Promise<void> | undefined {
    if (this.#error) return Promise.reject(this.#error);
    if (this.#stream.write(chunk)) return undefined;
    return this.#drained();
  }

  /** Flushes and closes the file. @throws {EmlApiError} `ESPOOL` when any write failed */
  async end(): Promise<void> {
    if (this.#error) throw this.#error;
    this.#stream.end();
    await once(this.#stream, 'finish').catch(() => undefined);
    if (this.#error) throw this.#error;
  }

  async remove(): Promise<void> {
    this.#stream.destroy();
    await removeSpoolFolder(this.folder);
  }

  #drained(): Promise<void> {
    return new Promise((resolve, reject) => {
      const onDrain = () => {
        this.#stream.off('error', onFail);
        resolve();
      };
      const onFail = () => {
        this.#stream.off('drain', onDrain);
        reject(this.#error);
      };
      this.#stream.once('drain', onDrain);
      this.#stream.once('error', onFail);
    });
  }
}

/**
 * This process's spool folders (`eml-api-<pid>-<random>`), removed when the send ends, at exit, and on a SIGINT or
 * SIGTERM nothing else handles (which would skip 'exit' handlers). Folders of a process that died without cleaning up
 * are swept when this process first spools into the same directory.
 */

const PREFIX = 'eml-api-';
const live = new Set<string>();
const swept = new Set<string>();
const SIGNALS = ['SIGINT', 'SIGTERM'] as const;
let exitHooked = false;
let signalsHooked = false;

export function spoolFolderPrefix(directory: string): string {
  return join(directory, `${PREFIX}${process.pid}-`);
}

export function trackSpoolFolder(folder: string): void {
  live.add(folder);
  if (!exitHooked) {
    exitHooked = true;
    process.on('exit', removeAllNow);
  }
  if (!signalsHooked) hookSignals();
}

export async function removeSpoolFolder(folder: string): Promise<void> {
  try {
    await rm(folder, { recursive: true, force: true });
  } finally {
    live.delete(folder);
    if (live.size === 0 && signalsHooked) unhookSignals();
  }
}

/** Removes, once per directory and process, the spool folders of processes no longer running; best effort. */
export async function sweepStaleSpoolFolders(directory: string): Promise<void> {
  if (swept.has(directory)) return;
  swept.add(directory);
  let names: string[];
  try {
    names = await readdir(directory);
  } catch {
    return;
  }
  for (const name of names) {
    const pid = /^eml-api-(\d+)-/.exec(name)?.[1];
    if (pid === undefined || Number(pid) === process.pid || isRunning(Number(pid))) continue;
    await rm(join(directory, name), { recursive: true, force: true }).catch(() => undefined);
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function removeAllNow(): void {
  for (const folder of live) rmSync(folder, { recursive: true, force: true });
  live.clear();
}

/**
 * A SIGINT and SIGTERM listener, placed first while spool folders exist. Any listener turns off Node's default action,
 * so the spool's must not swallow a signal nobody else handles, nor act on one the app handles (a graceful close keeps
 * the files of messages in flight). Only the first listener sees the listeners there were: Node calls a copy of the
 * list, and `once` listeners are gone by the time later ones run.
 */
function hookSignals(): void {
  signalsHooked = true;
  for (const signal of SIGNALS) process.prependListener(signal, onSignal);
  process.on('newListener', keepFirst);
}

function unhookSignals(): void {
  signalsHooked = false;
  for (const signal of SIGNALS) process.off(signal, onSignal);
  process.off('newListener', keepFirst);
}

/**
 * Puts the spool's listener first again after the app prepends one: 'newListener' fires before the listener is added,
 * so the move waits for a microtask, which runs before any signal can be emitted.
 */
function keepFirst(event: string | symbol, listener: unknown): void {
  if (listener === onSignal || !(SIGNALS as readonly (string | symbol)[]).includes(event)) return;
  const signal = event as NodeJS.Signals;
  queueMicrotask(() => {
    if (!signalsHooked || process.listeners(signal)[0] === onSignal) return;
    process.off(signal, onSignal);
    process.prependListener(signal, onSignal);
  });
}

/**
 * With another listener, the app handles the signal, and the 'exit' handler removes the folders. With none, the folders
 * are removed and the signal raised again with no listener, so it ends the process as it would have.
 */
function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  removeAllNow();
  unhookSignals();
  process.kill(process.pid, signal);
}

/**
 * Where and when messages are spooled to disk.
 * @example new EmlApiTransport({ apiKey, baseUrl, spool: { threshold: 8 * 1024 * 1024, directory: '/var/tmp' } });
 */
export interface SpoolOptions {
  /** Messages larger than this many bytes are spooled to a file. @default 2097152 (2 MiB) */
  threshold?: number;
  /** Folder for the temporary files. @default os.tmpdir() */
  directory?: string;
}

export type SpoolSettings = Required<SpoolOptions>;

/** Read when called: `os.tmpdir()` follows `TMPDIR`. */
export function defaultSpoolSettings(): SpoolSettings {
  return { threshold: 2 * 1024 * 1024, directory: tmpdir() };
}
