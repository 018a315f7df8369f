// A build thread: rebuilds messages with the Nodemailer that compiled them on the sending thread and posts their
// bytes back. It holds no API key and makes no request. Built as dist/build-thread.js and .cjs; from source it runs
// under tsx.
import { dirname, join } from 'node:path';
import { Writable, type Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { parentPort } from 'node:worker_threads';
import { headerSection, lastByteOf } from '../../body/message-spool.js';
import { wholeEmlBody } from '../../body/eml-upload-body.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { resolveEnvelope } from '../message-envelope.js';
import type { NodemailerMail } from '../nodemailer-types.js';
import { prepareForUpload, writeMessage, type WritableTree } from '../message-writer.js';
import {
  type CheckedEnvelope,
  restoreMailData,
  BATCH_BYTES,
  ownBuffer,
  toThreadError,
  WINDOW_BYTES,
  type BuildRequest,
  type FromThread,
  type ToThread,
} from './portable-mail.js';

/** The parts of Nodemailer a build uses, loaded from beside the MimeNode module the app's mail came from. */
interface NodemailerParts {
  compose(data: Record<string, unknown>): MimeTree;
  /** Its header setters run as `sendMail` runs them. */
  mailMessage: {
    setMailerHeader(this: unknown): void;
    setPriorityHeaders(this: unknown): void;
    setListHeaders(this: unknown): void;
  };
  dkim(options: unknown): { sign(input: Readable, extra: unknown): Readable };
}

interface MimeTree extends WritableTree {
  date: Date;
  setHeader(name: string, value: string): unknown;
  processFunc(fn: (input: Readable) => Readable): unknown;
}

const port = parentPort!;
const loaded = new Map<string, Promise<NodemailerParts>>();
const builds = new Map<number, PostingSink>();
/** Builds waiting for Nodemailer to load, and those of them cancelled meanwhile. */
const loading = new Set<number>();
const cancelled = new Set<number>();

function post(message: FromThread, transfer: ArrayBuffer[] = []): void {
  port.postMessage(message, transfer);
}

async function importDefault<T>(file: string): Promise<T> {
  const module = (await import(pathToFileURL(file).href)) as { default?: unknown };
  return (module.default ?? module) as T;
}

function nodemailerBeside(mimeNodeFile: string): Promise<NodemailerParts> {
  let parts = loaded.get(mimeNodeFile);
  if (!parts) {
    const lib = dirname(dirname(mimeNodeFile));
    parts = (async () => {
      type Ctor<T> = new (...args: unknown[]) => T;
      const [MailComposer, MailMessage, DKIM] = await Promise.all([
        importDefault<Ctor<{ compile(): MimeTree }>>(join(lib, 'mail-composer', 'index.js')),
        importDefault<{ prototype: NodemailerParts['mailMessage'] }>(join(lib, 'mailer', 'mail-message.js')),
        importDefault<Ctor<ReturnType<NodemailerParts['dkim']>>>(join(lib, 'dkim', 'index.js')),
      ]);
      return {
        compose: (data) => new MailComposer(data).compile(),
        mailMessage: MailMessage.prototype,
        dkim: (options) => new DKIM(options),
      };
    })();
    loaded.set(mimeNodeFile, parts);
  }
  return parts;
}

/**
 * Builds as `sendMail` does (compile, its headers, DKIM's processFunc) with the sending thread's random choices put
 * back, then as the transport does to every message (Bcc kept, large Buffers sliced).
 */
function compose(parts: NodemailerParts, request: BuildRequest, data: Record<string, unknown>): MimeTree {
  data.baseBoundary = request.baseBoundary;
  const message = parts.compose(data);
  const mail = Object.assign(Object.create(parts.mailMessage) as object, { data, message });
  parts.mailMessage.setMailerHeader.call(mail);
  parts.mailMessage.setPriorityHeaders.call(mail);
  parts.mailMessage.setListHeaders.call(mail);
  message.date = new Date(request.date);
  // In place, so the header keeps its position.
  message.setHeader('Message-ID', request.messageId);
  const dkimOptions = data.dkim || request.mailerDkim;
  if (dkimOptions) message.processFunc((input) => parts.dkim(dkimOptions).sign(input, data._dkim));
  prepareForUpload(message);
  return message;
}

/** Posts the bytes in batches, holding the build back (its write pending) while a window's worth is not yet taken. */
class PostingSink extends Writable {
  readonly #id: number;
  #lastByte = -1;
  #chunks: Buffer[] = [];
  #pending = 0;
  #size = 0;
  #unacked = 0;
  #waiting: (() => void) | undefined;

  constructor(id: number) {
    super();
    this.#id = id;
  }

  get lastByte(): number {
    return this.#lastByte;
  }

  override write(chunk: unknown, ...rest: unknown[]): boolean {
    this.#lastByte = lastByteOf(chunk, this.#lastByte);
    return (super.write as (...args: unknown[]) => boolean)(chunk, ...rest);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.#chunks.push(chunk);
    this.#pending += chunk.length;
    this.#size += chunk.length;
    if (this.#pending < BATCH_BYTES) return callback();
    const batch = this.#take();
    this.#unacked += batch.length;
    post({ type: 'chunk', id: this.#id, bytes: batch }, [batch.buffer as ArrayBuffer]);
    if (this.#unacked < WINDOW_BYTES) return callback();
    this.#waiting = callback;
  }

  ack(bytes: number): void {
    this.#unacked -= bytes;
    if (this.#unacked >= WINDOW_BYTES || !this.#waiting) return;
    const resume = this.#waiting;
    this.#waiting = undefined;
    resume();
  }

  /** Posts the rest of the message and its size; a whole message with what `whole` adds. */
  done(whole: (eml: Buffer) => Pick<Extract<FromThread, { type: 'done' }>, 'checked' | 'body'>): void {
    const cameWhole = this.#size === this.#pending;
    const rest = this.#take();
    const extra = cameWhole ? whole(rest) : {};
    const transfer = [rest.buffer as ArrayBuffer];
    if (extra.body) transfer.push(extra.body.buffer as ArrayBuffer);
    post({ type: 'done', id: this.#id, bytes: rest, size: this.#size, ...extra }, transfer);
  }

  #take(): Buffer {
    const bytes = ownBuffer(this.#chunks, this.#pending);
    this.#chunks = [];
    this.#pending = 0;
    return bytes;
  }
}

/** For a message that came whole: its envelope checked, and its upload body when small enough to go in one piece. */
function checkWhole(
  message: MimeTree,
  data: Record<string, unknown>,
  eml: Buffer,
  bodyUpTo: number,
): Pick<Extract<FromThread, { type: 'done' }>, 'checked' | 'body'> {
  let checked: CheckedEnvelope;
  try {
    const mail = { data, message } as unknown as NodemailerMail;
    checked = { ok: true, ...resolveEnvelope(mail, { head: headerSection(eml) }) };
  } catch (err) {
    // Anything but the envelope's own refusals is left to the sending thread to report.
    if (!(err instanceof EmlApiError)) return {};
    checked = { ok: false, code: err.code, message: err.message };
  }
  return eml.length <= bodyUpTo ? { checked, body: wholeEmlBody(eml, Buffer.allocUnsafeSlow) } : { checked };
}

async function build(request: BuildRequest): Promise<void> {
  const { id } = request;
  let parts: NodemailerParts;
  loading.add(id);
  try {
    parts = await nodemailerBeside(request.nodemailer);
  } catch (err) {
    cancelled.delete(id);
    post({
      type: 'unmovable',
      id,
      reason: `Nodemailer did not load in the build thread: ${toThreadError(err).message}`,
    });
    return;
  } finally {
    loading.delete(id);
  }
  if (cancelled.delete(id)) return;
  const sink = new PostingSink(id);
  builds.set(id, sink);
  const fail = (err: unknown) => {
    if (!builds.delete(id)) return;
    sink.destroy();
    post({ type: 'failed', id, error: toThreadError(err) });
  };
  sink.on('error', fail);
  try {
    const data = restoreMailData(request.data, request.buffers);
    const message = compose(parts, request, data);
    writeMessage(message, sink, (err) => {
      if (err) return fail(err);
      // Every write has been taken (the last ones may have waited for an ack).
      sink.end(() => {
        if (builds.delete(id)) sink.done((eml) => checkWhole(message, data, eml, request.bodyUpTo));
      });
    });
  } catch (err) {
    fail(err);
  }
}

port.on('message', (message: ToThread) => {
  if (message.type === 'build') {
    void build(message);
  } else if (message.type === 'ack') {
    builds.get(message.id)?.ack(message.bytes);
  } else if (message.type === 'cancel') {
    const running = builds.get(message.id);
    if (loading.has(message.id)) cancelled.add(message.id);
    builds.delete(message.id);
    // Destroying the sink stops Nodemailer's build and releases the files it reads.
    running?.destroy();
  }
});

post({ type: 'ready' });
