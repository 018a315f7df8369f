// A compiled mail made movable to a build thread, which rebuilds it from `mail.data` exactly as `sendMail` did
// (compile, X-Mailer, priority and List-* headers, DKIM) with the compile's random choices (Date, Message-ID, boundary
// base) carried over, so the bytes are the same. A message moves only when that is certain: content that is a stream
// or a function, a stream plugin or transform, values that are not plain data (class instances lose their methods
// across threads), or a bundled Nodemailer keep it on the sending thread, with the reason.

import { fileURLToPath } from 'node:url';
import type { MailEnvelope, NodemailerMail } from '../nodemailer-types.js';
import type { EmlApiErrorCode } from '../../shared/eml-api-error.js';

/**
 * The fields of `mail.data` a build reads in Nodemailer 6.9 to 10 (composer, `sendMail`'s headers, DKIM); an app's own
 * fields, such as a template context, do not keep a message from moving. A test checks the list against the composer of
 * every Nodemailer the suite runs.
 */
export const BUILD_FIELDS = [
  'from',
  'sender',
  'to',
  'cc',
  'bcc',
  'replyTo',
  'inReplyTo',
  'references',
  'subject',
  'messageId',
  'date',
  'headers',
  'text',
  'html',
  'watchHtml',
  'amp',
  'icalEvent',
  'alternatives',
  'attachments',
  'raw',
  'envelope',
  'encoding',
  'textEncoding',
  'newline',
  'normalizeHeaderKey',
  'baseBoundary',
  'boundaryPrefix',
  'disableFileAccess',
  'disableUrlAccess',
  'otp',
  'list',
  'priority',
  'xMailer',
  'dkim',
  '_dkim',
] as const;

/** In-memory content above this stays on the sending thread, where a copy would not double it; files and URLs move at any size. */
export const MAX_CARRIED_BYTES = 2 * 1024 * 1024;

/** Deeper is not mail data, or is a cycle. */
const MAX_DEPTH = 16;

/** What a build thread needs, or why the message stays on the sending thread. */
export type Portable =
  | { movable: true; request: Omit<BuildRequest, 'type' | 'id' | 'bodyUpTo'>; transfer: ArrayBuffer[] }
  | { movable: false; reason: string };

/** The fields of Nodemailer's objects read here, present in Nodemailer 6.9 to 10. */
interface TreeNode {
  constructor: unknown;
  childNodes?: TreeNode[];
  _transforms?: unknown[];
  _processFuncs?: unknown[];
  date?: unknown;
  baseBoundary?: unknown;
  getHeader?(name: string): unknown;
}
interface Mailer {
  options?: { dkim?: unknown };
  dkim?: unknown;
  _userPlugins?: { stream?: unknown[] };
}

class Unmovable extends Error {}

/** Whether a compiled mail can be built on a thread, with what the thread needs (Buffers copied to transfer). */
export function portableMail(mail: NodemailerMail): Portable {
  try {
    return { movable: true, ...prepare(mail) };
  } catch (err) {
    if (err instanceof Unmovable) return { movable: false, reason: err.message };
    throw err;
  }
}

function prepare(mail: NodemailerMail): {
  request: Omit<BuildRequest, 'type' | 'id' | 'bodyUpTo'>;
  transfer: ArrayBuffer[];
} {
  const mailer = (mail as unknown as { mailer?: Mailer }).mailer;
  const root = mail.message as unknown as TreeNode;
  if (!mailer || typeof mailer !== 'object') throw new Unmovable('it was not sent through sendMail');
  const streamPlugins = mailer._userPlugins?.stream;
  if (!Array.isArray(streamPlugins)) throw new Unmovable("Nodemailer's plugins cannot be inspected");
  if (streamPlugins.length > 0) throw new Unmovable("a stream plugin is registered (transporter.use('stream', ...))");
  const data = mail.data as Record<string, unknown>;
  const signs = Boolean(data.dkim) || Boolean(mailer.dkim);
  checkTree(root, signs ? 1 : 0);
  const nodemailer = nodemailerFile(root.constructor);
  const date = root.date;
  const messageId = root.getHeader?.('Message-ID');
  if (!(date instanceof Date) || typeof messageId !== 'string' || typeof root.baseBoundary !== 'string') {
    throw new Unmovable("Nodemailer's compiled message is not of a known shape");
  }
  const carrier = new Carrier();
  const carried: Record<string, unknown> = {};
  for (const key of BUILD_FIELDS) {
    if (Object.hasOwn(data, key) && data[key] !== undefined) carried[key] = carrier.copy(data[key], [key], 0);
  }
  const mailerDkim = mailer.dkim ? carrier.copy(mailer.options?.dkim, ['dkim (transporter)'], 0) : undefined;
  return {
    request: {
      nodemailer,
      data: carried,
      buffers: carrier.buffers,
      mailerDkim: mailerDkim as Record<string, unknown> | undefined,
      date: date.getTime(),
      messageId,
      baseBoundary: root.baseBoundary,
    },
    transfer: carrier.buffers.map((b) => b.bytes.buffer as ArrayBuffer),
  };
}

/** Only DKIM's stream stages may be on the tree (the thread adds its own): others came from code the thread cannot run. */
function checkTree(root: TreeNode, expectedProcessFuncs: number): void {
  const processFuncs = root._processFuncs;
  if (!Array.isArray(processFuncs)) throw new Unmovable("Nodemailer's compiled message is not of a known shape");
  if (processFuncs.length !== expectedProcessFuncs) {
    throw new Unmovable('the compiled message has a processFunc of its own (not DKIM)');
  }
  const visit = (node: TreeNode): void => {
    if (!Array.isArray(node._transforms)) throw new Unmovable("Nodemailer's compiled message is not of a known shape");
    if (node._transforms.length > 0) throw new Unmovable('the compiled message has a transform stream');
    for (const child of node.childNodes ?? []) visit(child);
  };
  visit(root);
}

/** Copies plain mail data, checking that a thread will read it the same; collects its Buffers. */
class Carrier {
  readonly buffers: CarriedBytes[] = [];
  #bytes = 0;

  copy(value: unknown, path: DataPath, depth: number): unknown {
    if (value === null || typeof value !== 'object') {
      if (typeof value === 'string') this.#count(value.length);
      if (typeof value === 'function') throw new Unmovable(`${describePath(path)} is a function`);
      if (typeof value === 'symbol') throw new Unmovable(`${describePath(path)} is a symbol`);
      return value;
    }
    if (depth > MAX_DEPTH) throw new Unmovable(`${describePath(path)} is nested too deep`);
    if (Buffer.isBuffer(value)) {
      this.#count(value.length);
      // A copy of exactly these bytes: the Buffer may view a larger ArrayBuffer (Node's pool, a file).
      this.buffers.push({ path, bytes: new Uint8Array(value) });
      return null;
    }
    if (value instanceof Date) return new Date(value.getTime());
    if (typeof (value as { pipe?: unknown }).pipe === 'function') {
      throw new Unmovable(`${describePath(path)} is a stream`);
    }
    const proto: unknown = Object.getPrototypeOf(value);
    if (Array.isArray(value) && proto === Array.prototype) {
      return value.map((item, i) => this.copy(item, [...path, i], depth + 1));
    }
    if (proto !== Object.prototype && proto !== null) {
      const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
      throw new Unmovable(
        `${describePath(path)} is ${typeof name === 'string' && name ? `a ${name}` : 'not plain data'}`,
      );
    }
    const keys = Object.keys(value);
    // Non-enumerable keys: Nodemailer reads them, a copy would drop them.
    if (Object.getOwnPropertyNames(value).length !== keys.length) {
      throw new Unmovable(`${describePath(path)} has non-enumerable properties`);
    }
    const out: Record<string, unknown> = {};
    for (const key of keys) out[key] = this.copy((value as Record<string, unknown>)[key], [...path, key], depth + 1);
    return out;
  }

  #count(bytes: number): void {
    this.#bytes += bytes;
    if (this.#bytes > MAX_CARRIED_BYTES) {
      throw new Unmovable(
        `its in-memory contents are over ${MAX_CARRIED_BYTES / 1024 / 1024} MiB (a thread would need a copy)`,
      );
    }
  }
}

/** e.g. `attachments[2].content` */
function describePath(path: DataPath): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? p : `.${p}`)).join('');
}

const located = new WeakMap<object, string>();

/**
 * The file that defines the MimeNode class the mail was compiled with, so the thread loads the composer, DKIM and
 * MailMessage beside it: the very Nodemailer the app uses (6.9 or 10, ESM or CommonJS). Read from the constructor's
 * stack as it reads an option through a getter.
 */
function nodemailerFile(ctor: unknown): string {
  if (typeof ctor !== 'function') throw new Unmovable("Nodemailer's compiled message is not of a known shape");
  const known = located.get(ctor);
  if (known) return known;
  const file = constructorFile(ctor as new (type: unknown, options: unknown) => unknown);
  if (file === undefined) throw new Unmovable("Nodemailer's modules were not found on disk (is it bundled?)");
  located.set(ctor, file);
  return file;
}

function constructorFile(Ctor: new (type: unknown, options: unknown) => unknown): string | undefined {
  let sites: NodeJS.CallSite[] | undefined;
  const options = {
    get baseBoundary() {
      // The constructor's own read comes first (a subclass reads before its base class does).
      if (sites) return 'located';
      const savedPrepare = Error.prepareStackTrace;
      const savedLimit = Error.stackTraceLimit;
      try {
        Error.stackTraceLimit = 2;
        Error.prepareStackTrace = (_err, callSites) => callSites;
        const holder: { stack?: unknown } = {};
        Error.captureStackTrace(holder);
        sites = holder.stack as NodeJS.CallSite[];
      } finally {
        Error.prepareStackTrace = savedPrepare;
        Error.stackTraceLimit = savedLimit;
      }
      return 'located';
    },
  };
  try {
    new Ctor('text/plain', options);
  } catch {
    return undefined;
  }
  const name = sites?.[1]?.getFileName();
  if (typeof name !== 'string') return undefined;
  if (name.startsWith('file:')) return fileURLToPath(name);
  return name.startsWith('/') || /^[A-Za-z]:[\\/]/.test(name) ? name : undefined;
}

export function restoreMailData(data: Record<string, unknown>, buffers: CarriedBytes[]): Record<string, unknown> {
  for (const { path, bytes } of buffers) {
    let at: Record<string | number, unknown> = data;
    for (const key of path.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
    at[path.at(-1)!] = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  return data;
}

// The messages between the sending thread and a build thread: `build` (Buffers transferred as fresh copies), answered
// with `chunk`s of about BATCH_BYTES (each ArrayBuffer transferred back) and a final `done`; a message smaller than a
// batch comes whole in `done`. The thread stops reading Nodemailer's output while WINDOW_BYTES are posted and not yet
// `ack`ed, so a large message never piles up in memory on either side.

export type DataPath = (string | number)[];

/** One Buffer of the mail data, carried as a fresh copy whose ArrayBuffer is transferred. */
export interface CarriedBytes {
  path: DataPath;
  bytes: Uint8Array;
}

export interface BuildRequest {
  type: 'build';
  id: number;
  /** The Nodemailer MimeNode module's file: the thread loads its siblings. */
  nodemailer: string;
  /** The fields of `mail.data` the build reads, without the Buffers. */
  data: Record<string, unknown>;
  buffers: CarriedBytes[];
  /** DKIM options of the transporter (`createTransport(transport, { dkim })`). */
  mailerDkim: Record<string, unknown> | undefined;
  /** The compile's random choices, so the bytes are the same. */
  date: number;
  messageId: string;
  baseBoundary: string;
  /** The largest message whose upload body the thread makes too (0: none). */
  bodyUpTo: number;
}

export interface CancelRequest {
  type: 'cancel';
  id: number;
}

/** The sending thread took `bytes` of a build's chunks: the thread may read on. */
export interface AckRequest {
  type: 'ack';
  id: number;
  bytes: number;
}

export type ToThread = BuildRequest | CancelRequest | AckRequest;

export interface ThreadError {
  name: string;
  message: string;
  code?: string;
}

export type FromThread =
  | { type: 'ready' }
  | { type: 'chunk'; id: number; bytes: Uint8Array }
  /** The last bytes, or all of a small message, which comes with its envelope checked and its upload body up to `bodyUpTo`. */
  | { type: 'done'; id: number; bytes: Uint8Array; size: number; checked?: CheckedEnvelope; body?: Uint8Array }
  | { type: 'failed'; id: number; error: ThreadError }
  /** Nodemailer's modules did not load on the thread: build it on the sending thread. */
  | { type: 'unmovable'; id: number; reason: string };

/** The envelope of a message checked on its build thread, or why the send fails. */
export type CheckedEnvelope =
  | { ok: true; envelope: MailEnvelope; fromDiffers: boolean; messageId: string | undefined }
  | { ok: false; code: EmlApiErrorCode; message: string };

/** Bytes per chunk posted back; a message up to this size comes back whole. */
export const BATCH_BYTES = 256 * 1024;

/** Bytes a build may have posted and not yet had taken before the thread stops reading. */
export const WINDOW_BYTES = 4 * BATCH_BYTES;

export function toThreadError(err: unknown): ThreadError {
  const e = err as { name?: unknown; message?: unknown; code?: unknown } | null;
  return {
    name: typeof e?.name === 'string' ? e.name : 'Error',
    message: typeof e?.message === 'string' ? e.message : String(err),
    ...(typeof e?.code === 'string' ? { code: e.code } : {}),
  };
}

/** The thread's Error, rebuilt as the cause of the send's error. */
export function fromThreadError(error: ThreadError): Error {
  const rebuilt = new Error(error.message) as Error & { code?: string };
  rebuilt.name = error.name;
  if (error.code !== undefined) rebuilt.code = error.code;
  return rebuilt;
}

/** Chunks copied into a Buffer of its own: transferring one from Node's shared pool would detach the others. */
export function ownBuffer(chunks: Buffer[], size: number): Buffer {
  const out = Buffer.allocUnsafeSlow(size);
  let at = 0;
  for (const chunk of chunks) {
    chunk.copy(out, at);
    at += chunk.length;
  }
  return out;
}
