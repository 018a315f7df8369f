import type { SMTPServerDataStream, SMTPServerSession } from 'smtp-server';
import { spoolMessage } from '../body/message-spool.js';
import type { SpoolSettings } from '../body/spool-options.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { planEnvelope, type EnvelopePlan } from './envelope-plan.js';
import type { MessageDestination, MessageSender } from './message-destination.js';
import { MessageRewriter } from './message-rewriter.js';

/** What receiving a message needs from the relay. */
export interface ReceiveContext {
  spool: SpoolSettings;
  destination: MessageDestination;
  /** Aborted when the relay is closed with `{ abort: true }`. */
  signal: AbortSignal;
}

/** A message handed on. */
export interface ReceivedMessage {
  /** The id the destination gave it. */
  id: string | undefined;
  messageId: string | undefined;
  /** Bytes uploaded. */
  size: number;
  /** Recipients written into the Bcc field (envelope-only recipients). */
  addedBcc: number;
}

/**
 * One SMTP transaction's message, from DATA to its destination: the header
 * section is reconciled with the envelope (envelope-only recipients added as
 * Bcc; header recipients missing from RCPT TO refused), the message streams
 * into the spool (memory, or a temporary file past the threshold, never whole
 * in memory) while it is hashed, and the destination takes it. The key of
 * the send is derived from the bytes when the message has a Message-ID, so a
 * client that retries after a `451` (a timeout after the service may have
 * accepted it) is not delivered twice by a service that honours
 * `Idempotency-Key`.
 *
 * @throws {EmlApiError} `EENVELOPE`, a permanent `EMESSAGE` (the message cannot be read as one),
 *   a transient `EMESSAGE` (the relay could not store it), or what the destination throws
 */
export async function receiveMessage(
  stream: SMTPServerDataStream,
  session: SMTPServerSession,
  sender: MessageSender,
  context: ReceiveContext,
): Promise<ReceivedMessage> {
  const rcptTo = session.envelope.rcptTo.map((r) => r.address);
  let plan: EnvelopePlan | undefined;
  const rewriter = new MessageRewriter(
    (head) => {
      plan = planEnvelope(head, rcptTo);
      return plan.head;
    },
    () =>
      stream.sizeExceeded
        ? new EmlApiError('EMESSAGE', 'The message is larger than SIZE', { permanent: true })
        : undefined,
  );
  stream.pipe(rewriter);
  let spooled;
  try {
    spooled = await spoolMessage(rewriter, context.spool, context.signal);
  } catch (err) {
    stream.unpipe(rewriter);
    // The rest of the message is read and dropped, so that smtp-server can answer.
    stream.resume();
    if (err === rewriter.failure || context.signal.aborted) throw err;
    if (err instanceof EmlApiError && err.code === 'ESTREAM') throw err;
    // The spool could not store it (a full disk...): the client may try again.
    throw new EmlApiError('EMESSAGE', `The relay could not store the message: ${(err as Error).message}`, {
      cause: err,
      permanent: false,
    });
  }
  try {
    const { messageId, addedBcc } = plan!;
    const receipt = await context.destination.deliver(
      {
        spooled,
        idempotencyKey: messageId === undefined ? undefined : `smtp-relay-${rewriter.digest()}`,
        messageId,
        envelope: { from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to: rcptTo },
      },
      sender,
      context.signal,
    );
    return { id: receipt.id, messageId, size: spooled.size, addedBcc: addedBcc.length };
  } finally {
    await spooled.body.dispose();
  }
}
