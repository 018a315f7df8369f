/**
 * How the transport turns Nodemailer's compiled message (a MimeNode tree)
 * into bytes, on the sending thread and on a build thread alike: Bcc kept,
 * large Buffers sliced, and the bytes written straight into the consumer.
 */

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

/**
 * What the message is written into: a Writable, or a lighter object that does
 * what Nodemailer's tree and `pipe` ask of one; it knows the last byte
 * written into it (for the final line break).
 */
export type ByteSink = NodeJS.WritableStream & {
  readonly lastByte: number;
  readonly destroyed: boolean;
  destroy(err?: Error): unknown;
};

/**
 * Readies a compiled message for the EML endpoint: Bcc kept in the headers
 * (the service reads recipients from To, Cc and Bcc and removes Bcc itself,
 * as sendmail and SES transports do), large Buffers sliced (see
 * {@link sliceLargeContents}).
 */
export function prepareForUpload(message: WritableTree): void {
  message.keepBcc = true;
  sliceLargeContents(message as unknown as Parameters<typeof sliceLargeContents>[0]);
}

/**
 * Writes the bytes `message.createReadStream()` gives into `sink`, then
 * calls `done` once (with the error that stopped it, if any).
 *
 * `createReadStream()` runs the tree's output through a PassThrough, the
 * tree's transforms, a stage that ends the message with a line break, DKIM
 * and other processFuncs and a newline converter, joined with `pipeline`. A
 * message with no transforms, processFuncs or `newline` option needs none of
 * them but the line break: it is written by the tree straight into `sink`
 * and the line break added here, as that stage adds it, saving a stream, a
 * pipeline and a pass over every chunk. Any other message goes through
 * `createReadStream()` itself.
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
      // What Nodemailer's LastNewline stage does: a message always ends with a line break.
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

/** The MimeNode fields this uses, present in Nodemailer 6 to 10. */
interface ContentNode {
  content?: unknown;
  childNodes?: ContentNode[];
  setContent?(content: unknown): unknown;
  getTransferEncoding?(): string | false;
  getHeader?(name: string): unknown;
  setHeader?(name: string, value: string): unknown;
}

/** Contents larger than this are fed to Nodemailer's encoder in slices. */
const SLICE_ABOVE = 1024 * 1024;
/** A multiple of 3 bytes, so Base64 slices need no carry-over. */
const SLICE = 3 * 64 * 1024;

/**
 * Replaces large Buffer contents (attachments given as Buffers) in a compiled
 * message with streams of slices of the same Buffer. Nodemailer encodes a
 * Buffer in one piece, making several full-size copies (Base64 text, wrapped
 * lines); slices keep its encoder's memory flat. The bytes are the same: the
 * slices are views of the caller's Buffer, not copies, and the transfer
 * encoding Nodemailer chose for the Buffer (it reads a text Buffer to pick
 * quoted-printable or Base64, which it cannot do for a stream) is kept.
 */
export function sliceLargeContents(node: ContentNode): void {
  if (Buffer.isBuffer(node.content) && node.content.length > SLICE_ABOVE && typeof node.setContent === 'function') {
    const content = node.content;
    // Decided while the content is still a Buffer, then fixed in the header, which Nodemailer honours.
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
