import type { Readable } from 'node:stream';
import type { SpooledMessage } from '../../src/body/message-spool.js';

/** The bytes of a spooled message, read back through its `open()`. */
export async function spooledBytes(spooled: SpooledMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of spooled.open() as Readable) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The bytes of a stream. */
export async function streamBytes(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Buffer));
  return Buffer.concat(chunks);
}

/**
 * A message with what differs between two builds of the same mail made
 * neutral: the random part of MIME boundaries, the Content-IDs made for data:
 * URL images, and Message-ID and Date unless the message fixed them; with
 * `dropBcc`, without its Bcc field (the EML upload keeps it, SMTP does not);
 * with `dropDkim`, without its DKIM-Signature (which covers what differs);
 * with `smtpLineBreaks`, with every bare CR and LF made CRLF, as SMTP's DATA
 * does to a message (Nodemailer's SMTP transport and every MTA).
 */
export function neutralEml(
  raw: Buffer,
  options: { dropBcc?: boolean; dropDkim?: boolean; keepIds?: boolean; smtpLineBreaks?: boolean } = {},
) {
  let text = raw.toString('latin1');
  if (options.smtpLineBreaks) text = text.replace(/\r(?!\n)|(?<!\r)\n/g, '\r\n');
  const headEnd = text.indexOf('\r\n\r\n');
  let head = text.slice(0, headEnd + 2);
  const body = text.slice(headEnd + 2);
  const drop = (name: string) => {
    head = head.replace(new RegExp(`^${name}:.*\\r\\n(?:[ \\t].*\\r\\n)*`, 'im'), '');
  };
  if (options.dropBcc) drop('Bcc');
  if (options.dropDkim) drop('DKIM-Signature');
  if (!options.keepIds) {
    head = head.replace(/^Message-ID: .*$/im, 'Message-ID: <neutral>').replace(/^Date: .*$/im, 'Date: neutral');
  }
  text = head + body;
  return text
    .replace(/--_NmP-[0-9a-f]+-Part_/g, '--_NmP-neutral-Part_')
    .replace(/[0-9a-f]{20}@localhost/g, 'neutral@localhost');
}
