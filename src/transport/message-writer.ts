/**
 * How the transport turns Nodemailer's compiled message (a MimeNode tree)
 * into bytes, on the sending thread and on a build thread alike: Bcc kept,
 * large Buffers sliced, and the bytes written straight into the consumer.
 */
import type { Writable } from 'node:stream';
import { sliceLargeContents } from './slice-large-contents.js';

/** The MimeNode members the writer uses, present in Nodemailer 6.9 to 10. */
export interface WritableTree {
  keepBcc: boolean;
  newline?: unknown;
  _transforms?: unknown[];
  _processFuncs?: unknown[];
  createReadStream(): NodeJS.ReadableStream & { destroy?(): void };
  stream?(output: Writable, options: object, done: (err?: Error | null) => void): void;
}

/** A Writable that knows the last byte written into it (for the final line break). */
export type ByteSink = Writable & { readonly lastByte: number };

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
