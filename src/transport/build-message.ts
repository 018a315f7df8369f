import { spoolBuffer, spoolMessage, spoolWritten, type SpooledMessage } from '../body/message-spool.js';
import type { SpoolSettings } from '../body/spool-options.js';
import type { EmlApiLogger } from '../shared/logger.js';
import type { BuildThreadPool } from './build-threads/pool.js';
import { portableMail } from './build-threads/portable-mail.js';
import { prepareForUpload, writeMessage, type WritableTree } from './message-writer.js';
import { resolveEnvelope } from './message-envelope.js';
import type { MailEnvelope, NodemailerMail } from './nodemailer-types.js';

/** A message Nodemailer compiled, built to bytes and checked, ready to upload or store. */
export interface BuiltMessage {
  /** The built bytes: in memory, or in a spool file past the threshold. The caller disposes `spooled.body`. */
  spooled: SpooledMessage;
  /** Sender and recipients, as the service will read them from the headers. */
  envelope: MailEnvelope;
  /** The Message-ID written in the bytes (Nodemailer's own when the message has none). */
  messageId: string;
  /** Whether the envelope sender differs from From (the service sets its own return path). */
  fromDiffers: boolean;
  /** Whether a build thread built it (`buildThreads`), or the sending thread. */
  onThread: boolean;
}

/** Build threads and where to say why a message stays on the sending thread. */
export interface BuildThreads {
  pool: BuildThreadPool;
  logger: EmlApiLogger;
}

/**
 * Builds a compiled message the way the EML endpoint needs it: Bcc kept in
 * the headers (the service reads recipients from To, Cc and Bcc and removes
 * Bcc itself, as sendmail and SES transports do), spooled (in memory, or in a
 * file past the threshold), then checked: recipients present and the same as
 * any custom envelope. With `threads`, on a build thread when the message can
 * move to one.
 *
 * @throws {EmlApiError} `EENVELOPE` or `EMESSAGE`; `ESPOOL` when a spool file cannot be written,
 *   `ESTREAM` when a build thread dies; the signal's reason when it aborts
 */
export async function buildMessage(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads?: BuildThreads,
): Promise<BuiltMessage> {
  const built = (threads && (await buildOnThread(mail, spool, signal, threads))) ?? {
    spooled: await buildHere(mail, spool, signal),
    onThread: false,
  };
  const { spooled } = built;
  try {
    const resolved = resolveEnvelope(mail, spooled);
    return {
      spooled,
      envelope: resolved.envelope,
      // The Message-ID written in the bytes is the truth: with `raw`,
      // Nodemailer's own messageId() is one it made up and never wrote.
      messageId: resolved.messageId ?? mail.message.messageId(),
      fromDiffers: resolved.fromDiffers,
      onThread: built.onThread,
    };
  } catch (err) {
    await spooled.body.dispose();
    throw err;
  }
}

/** On the sending thread, written by Nodemailer's tree straight into the spool. */
function buildHere(mail: NodemailerMail, spool: SpoolSettings, signal: AbortSignal): Promise<SpooledMessage> {
  const tree = mail.message as unknown as WritableTree;
  prepareForUpload(tree);
  return spoolWritten((sink, done) => writeMessage(tree, sink, done), spool, signal);
}

/** On a build thread; undefined (after saying why, at debug level) when it must be built here. */
async function buildOnThread(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads: BuildThreads,
): Promise<{ spooled: SpooledMessage; onThread: true } | undefined> {
  const portable = portableMail(mail);
  let reason: string;
  if (portable.movable) {
    const built = await threads.pool.build(portable, signal);
    if (built.kind === 'whole') return { spooled: await spoolBuffer(built.eml, spool, signal), onThread: true };
    if (built.kind === 'stream') return { spooled: await spoolMessage(built.stream, spool, signal), onThread: true };
    reason = built.reason;
  } else {
    reason = portable.reason;
  }
  threads.logger.debug({ reason }, `Building the message on the sending thread: ${reason}`);
  return undefined;
}
