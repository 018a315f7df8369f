import { spoolMessage, type SpooledMessage } from '../body/message-spool.js';
import type { SpoolSettings } from '../body/spool-options.js';
import { resolveEnvelope } from './message-envelope.js';
import type { MailEnvelope, NodemailerMail } from './nodemailer-types.js';
import { sliceLargeContents } from './slice-large-contents.js';

/** A message Nodemailer compiled, built to bytes and checked, ready to upload or store. */
export interface BuiltMessage {
  /** The built bytes: in memory, or in a spool file past the threshold. The caller disposes `spooled.body`. */
  spooled: SpooledMessage;
  /** Sender and recipients, as the service will read them from the headers. */
  envelope: MailEnvelope;
  /** The Message-ID written in the bytes (Nodemailer's own when the message has none). */
  messageId: string;
  /** Whether the envelope sender differs from the From header (the service sets its own return path). */
  fromDiffers: boolean;
}

/**
 * Builds a compiled message the way the EML endpoint needs it: Bcc kept in
 * the headers (the service reads recipients from To, Cc and Bcc and removes
 * Bcc itself, as sendmail and SES transports do), streamed into the spool,
 * then checked: recipients present and the same as any custom envelope.
 *
 * @throws {EmlApiError} `EENVELOPE` or `EMESSAGE`; the signal's reason when it aborts
 */
export async function buildMessage(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
): Promise<BuiltMessage> {
  mail.message.keepBcc = true;
  sliceLargeContents(mail.message as unknown as Parameters<typeof sliceLargeContents>[0]);
  const spooled = await spoolMessage(mail.message.createReadStream(), spool, signal);
  try {
    const resolved = resolveEnvelope(mail, spooled.head);
    return {
      spooled,
      envelope: resolved.envelope,
      // The Message-ID written in the bytes is the truth: with `raw`,
      // Nodemailer's own messageId() is one it made up and never wrote.
      messageId: resolved.messageId ?? mail.message.messageId(),
      fromDiffers: resolved.fromDiffers,
    };
  } catch (err) {
    await spooled.body.dispose();
    throw err;
  }
}
