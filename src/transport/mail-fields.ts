import type {} from 'nodemailer/lib/mailer';

/**
 * The `sendMail` fields this transport adds. They are declared on Nodemailer's
 * own message options type (module augmentation for Nodemailer 10's bundled
 * types and for `@types/nodemailer`), so TypeScript accepts them without casts.
 *
 * @example
 * await transporter.sendMail({ from, subject: 'Hi {{first_name}}', html, group: 'newsletter' });
 * await transporter.sendMail({ from, to, subject, html, tracking: true });
 * await transporter.sendMail({ raw, idempotencyKey: `receipt-${order.id}` });
 */
export interface EmlApiMailOptions {
  /**
   * Send to every member of this group through `/v1/send/group/{group}`
   * instead of as EML. The message then cannot have to/cc/bcc, custom headers
   * or attachments other than inline images.
   * @default undefined (EML send)
   */
  group?: string;
  /**
   * Send through `/v1/send/email` with the service's tracking on (or, with
   * `group`, turn tracking on for the group send).
   * @default undefined (EML send)
   */
  tracking?: boolean;
  /**
   * `Idempotency-Key` of this logical send: the service delivers a repeat of
   * the same request under the same key once (within its window) and refuses
   * a different request under a used key (`EAPI` 422 `idempotency_key_reused`).
   * Nodemailer builds a message anew on every `sendMail` (a new Date, boundaries
   * and, unless given, Message-ID), so a repeat is the same request only when
   * the message is the same bytes: `raw`, or the outbox, which builds once.
   * 1 to 255 printable ASCII characters without spaces.
   * @default a new random UUID per send
   */
  idempotencyKey?: string;
}

declare module 'nodemailer/lib/mailer' {
  // @types/nodemailer (Nodemailer 6 to 9): Mail.Options is a namespace member of `export =`.
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface Options extends EmlApiMailOptions {}
}

declare module 'nodemailer/lib/mailer/index.js' {
  // The same for ES module consumers of @types/nodemailer, where a directory import does not resolve.
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface Options extends EmlApiMailOptions {}
}

declare module 'nodemailer/lib/mailer/mail-message' {
  // Nodemailer 10's bundled types: sendMail takes SendMailOptions.
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface SendMailOptions extends EmlApiMailOptions {}
}
