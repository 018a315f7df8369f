import { Readable } from 'node:stream';
import { spooledInMemory, spoolMessage, type SpooledMessage, type SpoolSettings } from '../body/message-spool.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { envelopeRecipients } from './envelope-commands.js';
import { appendField, eolOf, planningEnvelope, type EnvelopePlan } from './envelope-plan.js';
import type { MessageDestination, MessageSender } from './message-destination.js';
import type { MessageIdentities, MessageIdentity } from './message-identities.js';
import { MessageRewriter } from './message-rewriter.js';
import { fromRefusal, runInSlices } from './relay-headers.js';
import { headerSenderRefusal, type SenderList } from './sender-lists.js';
import type { SMTPServerDataStream, SMTPServerSession } from './smtp-server-adapter.js';

/** What receiving a message needs from the relay. */
export interface ReceiveContext {
  spool: SpoolSettings;
  destination: MessageDestination;
  /** Aborted when the relay is closed with `{ abort: true }`. */
  signal: AbortSignal;
  /**
   * Aborted as soon as the relay is closed (whether or not with `abort`): a message still arriving then is given up,
   * so that a slow or stalled client cannot hold close().
   */
  arriving: AbortSignal;
  /** One per relay: it remembers sends whose outcome it could not know. */
  identities: MessageIdentities;
  /** Also bounds the ways the headers may spell their recipients. */
  maxRecipients: number;
  /** The relay's `maxMessageSize` (SIZE), applied to the message with CRLF line ends. */
  maxMessageSize: number;
  /** Refuse a From the relay cannot read for certain (the outbox stores the message: nobody would hear of the service's refusal). */
  certainFrom: boolean;
  /** The addresses the session's login may send as, when it has a list: From and Sender must be among them. */
  senders: SenderList | undefined;
  /** The session's login, named in a refusal (undefined for a client sending without AUTH). */
  login: string | undefined;
}

/** A message handed on. */
export interface ReceivedMessage {
  id: string | undefined;
  /** Its Message-ID: the client's, or the one the relay added. */
  messageId: string;
  /** Bytes uploaded. */
  size: number;
  /** Recipients written into the Bcc field (envelope-only recipients). */
  addedBcc: number;
  /** Its identity, to settle again if its client never reads the reply (see `MessageIdentities.settle`). */
  identity: MessageIdentity;
}

/**
 * How receiving a message ended: handed on, or failed where `stage` says: `client` (it left before the end of DATA:
 * nobody to answer), `destination` (its `deliver` failed, and `MessageDestination.reply` answers), or `relay`.
 */
export type ReceiveOutcome =
  { ok: true; message: ReceivedMessage } | { ok: false; stage: 'client' | 'relay' | 'destination'; error: unknown };

/**
 * One SMTP transaction's message, from DATA to its destination: the header section reconciled with the envelope, the
 * message streamed into the spool while it is hashed, named by {@link MessageIdentities}, and handed on.
 */
export async function receiveMessage(
  stream: SMTPServerDataStream,
  session: SMTPServerSession,
  sender: MessageSender,
  context: ReceiveContext,
): Promise<ReceiveOutcome> {
  const rcptTo = envelopeRecipients(session);
  let plan: EnvelopePlan | undefined;
  const rewriter: MessageRewriter = new MessageRewriter(
    async (head) => {
      plan = await runInSlices(planningEnvelope(head, rcptTo, { maxRecipients: context.maxRecipients }));
      // A sender that is not the login's is refused first, so that every such try is counted as one.
      // What the service is certain to refuse gets no 250, in either mode (the outbox would store it for nothing).
      const refusal =
        (await headerSenderRefusal(plan.froms, plan.senders, context.senders, context.login)) ??
        (await fromRefusal(plan.froms, { certain: context.certainFrom }));
      if (refusal) throw refusal;
      return plan.head;
    },
    // SIZE bounds the message with CRLF line ends (RFC 1870), which is what is uploaded: one of bare LF
    // lines within SIZE on the wire may be over it, and is refused here, before the service is asked.
    () =>
      stream.sizeExceeded || rewriter.size > context.maxMessageSize
        ? new EmlApiError(
            'EMESSAGE',
            `The message is larger than SIZE (${context.maxMessageSize} bytes, counted with CRLF line ends)`,
            { permanent: true, responseCode: 413 },
          )
        : undefined,
  );
  stream.pipe(rewriter);
  // smtp-server destroys the DATA stream when the client disconnects mid-message, and pipe() does not pass that on:
  // the spool would wait for the rest for ever. The error (and its stack) is built only when a client vanishes.
  let gone: EmlApiError | undefined;
  const onClose = () => {
    if (stream.readableEnded) return;
    gone = clientGone();
    rewriter.destroy(gone);
  };
  stream.once('close', onClose);
  let spooled: SpooledMessage;
  try {
    spooled = await spoolMessage(rewriter, context.spool, context.arriving);
  } catch (err) {
    stream.unpipe(rewriter);
    // The rest of the message is read and dropped, so that smtp-server can answer.
    stream.resume();
    if (err === rewriter.failure || (gone && err === gone) || context.signal.aborted || context.arriving.aborted) {
      // The relay builds no message, so an `ESTREAM` is always the client's DATA breaking off.
      const clientLeft = err instanceof EmlApiError && err.code === 'ESTREAM';
      return { ok: false, stage: clientLeft ? 'client' : 'relay', error: err };
    }
    return { ok: false, stage: 'relay', error: storingFailed(err) };
  } finally {
    stream.off('close', onClose);
  }
  const { addedBcc } = plan!;
  const envelope = { from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to: rcptTo };
  const identity = context.identities.identify({
    secret: sender.identitySecret,
    envelope,
    digest: rewriter.digest(),
    hasMessageId: plan!.messageId !== undefined,
    hasDate: plan!.hasDate,
    from: plan!.from,
  });
  const messageId = plan!.messageId ?? identity.addedMessageId!;
  let failure: unknown;
  let stage: 'relay' | 'destination' = 'relay';
  try {
    if (plan!.messageId === undefined) {
      const first = spooled;
      spooled = await respool(first, messageId, context);
      await first.body.dispose();
    }
    stage = 'destination';
    const receipt = await context.destination.deliver(
      { spooled, idempotencyKey: identity.idempotencyKey, messageId, envelope },
      sender,
      context.signal,
    );
    return {
      ok: true,
      message: { id: receipt.id, messageId, size: spooled.size, addedBcc: addedBcc.length, identity },
    };
  } catch (err) {
    failure = err;
    return { ok: false, stage, error: err };
  } finally {
    context.identities.settle(identity, failure);
    await spooled.body.dispose();
  }
}

/** The spooled message again, with a Message-ID field (made from its bytes) added at the end of its header section. */
async function respool(spooled: SpooledMessage, messageId: string, context: ReceiveContext): Promise<SpooledMessage> {
  // The plan took out the empty Message-ID fields of a message without one.
  const head = appendField(spooled.head, `Message-ID: ${messageId}${eolOf(spooled.head)}`);
  if (spooled.size + head.length - spooled.head.length <= context.spool.threshold) {
    // One copy, without the spool's stream machinery.
    const parts: Buffer[] = [];
    for await (const chunk of spooled.open() as AsyncIterable<Buffer>) parts.push(chunk);
    return spooledInMemory(Buffer.concat([head, Buffer.concat(parts).subarray(spooled.head.length)]), head);
  }
  const rest = async function* (): AsyncGenerator<Buffer> {
    yield head;
    let skip = spooled.head.length;
    for await (const chunk of spooled.open() as AsyncIterable<Buffer>) {
      if (skip >= chunk.length) {
        skip -= chunk.length;
        continue;
      }
      yield skip > 0 ? chunk.subarray(skip) : chunk;
      skip = 0;
    }
  };
  try {
    return await spoolMessage(Readable.from(rest(), { objectMode: false }), context.spool, context.arriving);
  } catch (err) {
    if (context.signal.aborted || context.arriving.aborted) throw err;
    throw storingFailed(err);
  }
}

/** Answered `451`; its text names no path or system error (the relay's log has them, in `cause`). */
function storingFailed(err: unknown): EmlApiError {
  if (err instanceof EmlApiError && err.code === 'ESPOOL') return err;
  return new EmlApiError('ESPOOL', 'The relay could not store the message', { cause: err, permanent: false });
}

/** The message's stream (the client's DATA) broke before the message was whole: `ESTREAM`, as in Nodemailer. */
function clientGone(): EmlApiError {
  return new EmlApiError('ESTREAM', 'The SMTP client disconnected before the end of its message (DATA)', {
    permanent: false,
  });
}
