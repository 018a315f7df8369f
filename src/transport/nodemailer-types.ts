import type { Readable } from 'node:stream';

/**
 * The parts of Nodemailer's `MailMessage`, which Nodemailer passes to `transport.send`, that the transport uses,
 * declared structurally so that every supported major (6.9 to 10) fits without importing its types.
 * @example
 * // A wrapper that logs each send, then hands it on.
 * const send: EmlApiTransport['send'] = (mail: NodemailerMail, callback) => {
 *   log.info(mail.message.getEnvelope());
 *   transport.send(mail, callback);
 * };
 */
export interface NodemailerMail {
  data: { envelope?: unknown; raw?: unknown; to?: unknown; cc?: unknown; bcc?: unknown };
  /** The compiled message (Nodemailer's `MimeNode`). */
  message: {
    keepBcc: boolean;
    createReadStream(): Readable;
    getEnvelope(): { from: string | false; to: string[] };
    /** The message's address headers as parsed: `{ address, name }` at run time, typed differently by each major. */
    getAddresses(): { from?: unknown };
    messageId(): string;
  };
  /** Resolves every content value (streams, paths, URLs); attachments that were bytes come back Base64. */
  normalize(callback: (err: Error | null, data?: unknown) => void): void;
}

/**
 * An SMTP-style envelope: sender and the addresses the message goes to.
 * @example const { envelope } = await transporter.sendMail(message); // { from: 'shop@example.com', to: ['ann@example.net'] }
 */
export interface MailEnvelope {
  from: string | false;
  to: string[];
}
