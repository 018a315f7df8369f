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
  /**
   * Set when the job this idempotency key names had failed and this call put
   * it back in the queue with a fresh retry schedule:
   * - `'replaced'`: with this message (`duplicate: false`). No attempt of the
   *   failed one can have been accepted (the service refused it, or never had
   *   it), so its key is free at the service.
   * - `'retried'`: with its own stored bytes (`duplicate: true`, the fields
   *   describe it). An attempt of it may have been accepted: the service
   *   answers the same bytes under the key from that attempt, and would
   *   refuse other bytes (422 `idempotency_key_reused`).
   * A failed job parked for a person is not put back: `sendMail` rejects.
   */
  requeued?: 'replaced' | 'retried';
}

/**
 * The info of a queued send.
 * @param requeued how a failed job under the key was put back, if it was @default undefined
 * @example
 * return queuedMessageInfo({ envelope, messageId, idempotencyKey }, 'order-1042', false); // response '250 Queued as order-1042'
 */
export function queuedMessageInfo(
  fields: { envelope: MailEnvelope; messageId: string; group?: string | undefined; idempotencyKey: string },
  queueId: string,
  duplicate: boolean,
  requeued?: 'replaced' | 'retried',
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
    ...(requeued === undefined ? {} : { requeued }),
  };
}
