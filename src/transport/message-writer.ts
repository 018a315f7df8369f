// Nodemailer's compiled message (a MimeNode tree) into bytes, on the sending thread and a build thread alike.

import { Readable } from 'node:stream';

/** The MimeNode members the writer uses, present in Nodemailer 6.9 to 10. */
export interface WritableTree {
  keepBcc: boolean;
  newline?: unknown;
  _transforms?: unknown[];
  _processFuncs?: unknown[];
  createReadStream(): NodeJS.ReadableStream & { destroy?(): void };
  stream?(output: ByteSink, options: object, done: (err?: Error | null) => void): void;
}

/** A Writable, or a lighter object doing what the tree and `pipe` ask of one; it knows its last byte for the final line break. */
export type ByteSink = NodeJS.WritableStream & {
  readonly lastByte: number;
  readonly destroyed: boolean;
  destroy(err?: Error): unknown;
};

/** Readies a compiled message for the EML endpoint: Bcc kept in the headers (the service removes it), large Buffers sliced. */
export function prepareForUpload(message: WritableTree): void {
  message.keepBcc = true;
  sliceLargeContents(message as unknown as Parameters<typeof sliceLargeContents>[0]);
}

/**
 * Writes the message into `sink`, then calls `done` once. `createReadStream()` pipes the tree through a PassThrough,
 * its transforms, a final line break stage, the processFuncs (DKIM) and a newline converter; a message with none of
 * these but the line break is written by the tree straight into `sink`, saving a stream, a pipeline and a pass over
 * every chunk.
 */
export function writeMessage(message: WritableTree, sink: ByteSink, done: (err?: Error | null) => void): void {
  const direct =
    typeof message.stream === 'function' &&
    !message.newline &&
    Array.isArray(message._transforms) &&
    message._transforms.length === 0 &&
    Array.isArray(message._processFuncs) &&
    message._processFuncs.length === 0;
  if (direct) {
    message.stream!(sink, {}, (err) => {
      if (err) return done(err);
      // As Nodemailer's LastNewline stage does: a message always ends with a line break.
      if (sink.lastByte === 0x0d) sink.write('\n');
      else if (sink.lastByte !== 0x0a) sink.write('\r\n');
      done();
    });
    return;
  }
  const output = message.createReadStream();
  let finished = false;
  const finish = (err?: Error | null) => {
    if (finished) return;
    finished = true;
    sink.off('close', onSinkClose);
    done(err);
  };
  // The consumer went away (an abort): stop reading the message's sources.
  const onSinkClose = () => {
    output.destroy?.();
    finish(new Error('The message was not read to its end'));
  };
  sink.once('close', onSinkClose);
  output.once('error', (err: Error) => finish(err));
  output.once('end', () => finish());
  output.pipe(sink, { end: false });
}

/** The MimeNode fields used here, present in Nodemailer 6 to 10. */
interface ContentNode {
  content?: unknown;
  childNodes?: ContentNode[];
  setContent?(content: unknown): unknown;
  getTransferEncoding?(): string | false;
  getHeader?(name: string): unknown;
  setHeader?(name: string, value: string): unknown;
}

const SLICE_ABOVE = 1024 * 1024;
/** A multiple of 3 bytes, so Base64 slices need no carry-over. */
const SLICE = 3 * 64 * 1024;

/**
 * Feeds large Buffer contents to Nodemailer's encoder as slices (views, not copies) of the same Buffer: it encodes a
 * Buffer in one piece with several full-size copies. The transfer encoding Nodemailer picked by reading the Buffer,
 * which it cannot do for a stream, is kept.
 */
export function sliceLargeContents(node: ContentNode): void {
  if (Buffer.isBuffer(node.content) && node.content.length > SLICE_ABOVE && typeof node.setContent === 'function') {
    const content = node.content;
    // Decided while the content is a Buffer, then fixed in the header, which Nodemailer honours.
    const encoding = node.getTransferEncoding?.();
    node.setContent(Readable.from(slices(content), { objectMode: false }));
    if ((encoding === 'base64' || encoding === 'quoted-printable') && !node.getHeader?.('Content-Transfer-Encoding')) {
      node.setHeader?.('Content-Transfer-Encoding', encoding);
    }
  }
  for (const child of node.childNodes ?? []) sliceLargeContents(child);
}

function* slices(content: Buffer): Generator<Buffer> {
  for (let at = 0; at < content.length; at += SLICE) yield content.subarray(at, at + SLICE);
}
