import nodemailer from 'nodemailer';
import type { ApiAddress } from '../../protocol/api-types.js';

/** What the emulator needs to build one delivered copy of a JSON send. */
export interface ComposeInput {
  from: ApiAddress;
  to: ApiAddress[];
  subject: string;
  html: string | undefined;
  text: string | undefined;
  messageId: string;
  date: Date;
  headers?: Record<string, string>;
}

// The emulator builds the MIME of JSON and group sends with Nodemailer itself
// (a peer dependency of this package), as a real service would with its own composer.
const composer = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' });

/** Builds an RFC 5322 message for one recipient. */
export async function composeMessage(input: ComposeInput): Promise<Buffer> {
  const info = await composer.sendMail({
    from: { name: input.from.name ?? '', address: input.from.email },
    to: input.to.map((a) => ({ name: a.name ?? '', address: a.email })),
    subject: input.subject,
    html: input.html,
    text: input.text,
    messageId: input.messageId,
    date: input.date,
    headers: input.headers,
    disableFileAccess: true,
    disableUrlAccess: true,
  });
  return info.message as Buffer;
}
