import type { MailEnvelope } from '../transport/nodemailer-types.js';

/**
 * What `sendMail()` resolves with through {@link EmlApiQueueTransport}: the
 * fields Nodemailer's SMTP transport gives, as a relay answers once it has
 * the message on disk. The message is then in Redis; a worker sends it.
 *
 * @example
 * const info = (await transporter.sendMail(message)) as EmlApiQueuedMessageInfo;
 * console.log(info.response); // '250 Queued as order-1042'
 */
export interface EmlApiQueuedMessageInfo {
  /** Sender and recipients (To, Cc and Bcc; none for a group send, whose members are the recipients). */
  envelope: MailEnvelope;
  /** The Message-ID of the stored EML ('' for group and tracked sends, whose copies get theirs from the service). */
  messageId: string;
  /** Every envelope recipient: the queue takes a message as a whole. */
  accepted: string[];
  /** Always empty. */
  rejected: string[];
  /** Always empty. */
  pending: string[];
  /** `250 Queued as <queueId>`. */
  response: string;
  /** The BullMQ job id: the idempotency key, escaped where BullMQ needs it (see {@link outboxJobId}). */
  queueId: string;
  /** The `Idempotency-Key` every attempt of this send carries. */
  idempotencyKey: string;
  /** The group of a group send. */
  group?: string;
  /**
   * `true` when a job with this idempotency key was already queued: nothing
   * new was stored, and the other fields describe the job queued first.
   */
  duplicate: boolean;
}

/**
 * The info of a queued send.
 * @example
 * return queuedMessageInfo({ envelope, messageId, idempotencyKey }, 'order-1042', false); // response '250 Queued as order-1042'
 */
export function queuedMessageInfo(
  fields: { envelope: MailEnvelope; messageId: string; group?: string | undefined; idempotencyKey: string },
  queueId: string,
  duplicate: boolean,
): EmlApiQueuedMessageInfo {
  return {
    envelope: { from: fields.envelope.from, to: [...fields.envelope.to] },
    messageId: fields.messageId,
    accepted: [...fields.envelope.to],
    rejected: [],
    pending: [],
    response: `250 Queued as ${queueId}`,
    queueId,
    idempotencyKey: fields.idempotencyKey,
    ...(fields.group === undefined ? {} : { group: fields.group }),
    duplicate,
  };
}
