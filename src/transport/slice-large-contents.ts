import { Readable } from 'node:stream';

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
