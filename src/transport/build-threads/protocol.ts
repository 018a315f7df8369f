/**
 * The messages between the sending thread and a build thread.
 *
 * The sending thread posts `build` with the message's data (its Buffers
 * transferred as fresh copies); the thread answers with the built bytes, in
 * `chunk`s of about {@link BATCH_BYTES} (each one's ArrayBuffer transferred,
 * so nothing is copied on the way back) and a final `done`. A message smaller
 * than a batch comes back whole in `done`: one postMessage, one Buffer. A
 * larger one streams: the thread stops reading Nodemailer's output once
 * {@link WINDOW_BYTES} are posted and not yet taken (`ack`), so a large
 * message never piles up in memory on either side.
 */

/** A path into the mail data: keys and array indexes. */
export type DataPath = (string | number)[];

/** One Buffer of the mail data, carried as a fresh copy whose ArrayBuffer is transferred. */
export interface CarriedBytes {
  path: DataPath;
  bytes: Uint8Array;
}

/** Builds one message. */
export interface BuildRequest {
  type: 'build';
  id: number;
  /** The file of the Nodemailer MimeNode module that compiled the message: the thread loads its siblings. */
  nodemailer: string;
  /** The fields of `mail.data` the build reads, Buffers left out (see `buffers`). */
  data: Record<string, unknown>;
  /** The Buffers of `data`, put back at their paths by the thread. */
  buffers: CarriedBytes[];
  /** DKIM options of the transporter (`createTransport(transport, { dkim })`), when it signs. */
  mailerDkim: Record<string, unknown> | undefined;
  /** What the sending thread's compile chose at random, so the bytes are the same. */
  date: number;
  messageId: string;
  baseBoundary: string;
}

/** Stops a build whose send was aborted. */
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

/** An error as it crosses threads: what the message of the send's error needs. */
export interface ThreadError {
  name: string;
  message: string;
  code?: string;
}

export type FromThread =
  /** The thread listens for builds. */
  | { type: 'ready' }
  /** Part of a large message. */
  | { type: 'chunk'; id: number; bytes: Uint8Array }
  /** The end of the message (its last bytes, or all of a small message). */
  | { type: 'done'; id: number; bytes: Uint8Array; size: number }
  /** Nodemailer failed to build the message (a missing file, a bad option...). */
  | { type: 'failed'; id: number; error: ThreadError }
  /** The thread cannot build this message (Nodemailer's modules did not load): build it on the sending thread. */
  | { type: 'unmovable'; id: number; reason: string };

/** Bytes per chunk posted back; a message up to this size comes back in one piece. */
export const BATCH_BYTES = 256 * 1024;

/** Bytes a build may have posted and not yet taken before the thread stops reading. */
export const WINDOW_BYTES = 4 * BATCH_BYTES;

/** Flattens an error for postMessage. */
export function toThreadError(err: unknown): ThreadError {
  const e = err as { name?: unknown; message?: unknown; code?: unknown } | null;
  return {
    name: typeof e?.name === 'string' ? e.name : 'Error',
    message: typeof e?.message === 'string' ? e.message : String(err),
    ...(typeof e?.code === 'string' ? { code: e.code } : {}),
  };
}

/** The Error of the thread, rebuilt on the sending thread (the cause of the send's error). */
export function fromThreadError(error: ThreadError): Error {
  const rebuilt = new Error(error.message) as Error & { code?: string };
  rebuilt.name = error.name;
  if (error.code !== undefined) rebuilt.code = error.code;
  return rebuilt;
}

/**
 * Copies chunks into one Buffer of its own (never from Node's shared pool of
 * small Buffers, whose ArrayBuffer other Buffers use: transferring that would
 * detach them).
 */
export function ownBuffer(chunks: Buffer[], size: number): Buffer {
  const out = Buffer.allocUnsafeSlow(size);
  let at = 0;
  for (const chunk of chunks) {
    chunk.copy(out, at);
    at += chunk.length;
  }
  return out;
}
