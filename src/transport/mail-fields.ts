import type {} from 'nodemailer/lib/mailer';

/**
 * The `sendMail` fields this transport adds. They are declared on Nodemailer's
 * own message options type (module augmentation for Nodemailer 10's bundled
 * types and for `@types/nodemailer`), so TypeScript accepts them without casts.
 *
 * @example
 * await transporter.sendMail({ from, subject: 'Hi {{first_name}}', html, group: 'newsletter' });
 * await transporter.sendMail({ from, to, subject, html, tracking: true });
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
