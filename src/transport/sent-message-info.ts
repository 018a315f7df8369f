import type { GroupSendAcceptedResponse, SendAcceptedResponse } from '../protocol/api-types.js';
import type { GroupSendResult, SendResult } from '../client/client-types.js';
import type { MailEnvelope } from './nodemailer-types.js';

/**
 * What `transporter.sendMail()` resolves with: the fields Nodemailer's SMTP
 * transport gives (`envelope`, `messageId`, `accepted`, `rejected`, `pending`,
 * `response`), plus the service's answer.
 *
 * @example
 * const info: EmlApiSentMessageInfo = await transporter.sendMail(message);
 * console.log(info.messageId, info.response); // '<...@example.test>' '202 Accepted'
 */
export interface EmlApiSentMessageInfo {
  /** Sender and recipients of the message. */
  envelope: MailEnvelope;
  /**
   * The Message-ID header of the uploaded message, with angle brackets. For a
   * tracked (JSON) send, the one the service reported; empty for group sends,
   * where every member's copy has its own.
   */
  messageId: string;
  /** Every envelope recipient: the service accepts or refuses a message as a whole. Empty for group sends. */
  accepted: string[];
  /** Always empty: a refused message rejects the promise instead. */
  rejected: string[];
  /** Always empty. */
  pending: string[];
  /** HTTP status line of the service's answer, e.g. `202 Accepted`. */
  response: string;
  /** The service's id for the send, when it gave one. */
  id: string | undefined;
  /** The service's parsed JSON answer (read leniently), when it sent JSON; for group sends `{ id, recipients, failed }`. */
  apiResponse: Partial<SendAcceptedResponse> | Partial<GroupSendAcceptedResponse> | undefined;
  /** The group a group send went to. */
  group?: string;
  /** The `Idempotency-Key` the send carried. */
  idempotencyKey: string;
  /**
   * Set when the 2xx answer was not the service's JSON (an HTML page behind a
   * wrong `baseUrl`): the message may not have been sent. Also logged as a warning.
   */
  warning?: string;
}

/**
 * The info of an accepted send: every envelope recipient accepted (the
 * service takes or refuses a message as a whole), with the service's answer.
 */
export function sentMessageInfo(
  envelope: MailEnvelope,
  messageId: string,
  result: SendResult | GroupSendResult,
): EmlApiSentMessageInfo {
  return {
    envelope,
    messageId,
    accepted: [...envelope.to],
    rejected: [],
    pending: [],
    response: result.response,
    id: result.id,
    apiResponse: result.data,
    idempotencyKey: result.idempotencyKey,
    ...(result.warning === undefined ? {} : { warning: result.warning }),
  };
}
