import { EmlApiError } from '../shared/eml-api-error.js';
import { statusVerdict } from '../shared/failure.js';
import { senderRefusalOf } from './sender-lists.js';

/** An SMTP reply: its code, and its text starting with the enhanced status code (RFC 3463). */
export interface SmtpReply {
  code: number;
  /** E.g. `4.4.1 The email service could not be reached, try again later: ...` */
  text: string;
}

/** Whose API key a message is sent with: the client's own (its AUTH password) or the relay's. */
export type KeyOwner = 'client' | 'relay';

/** The longest reason quoted in a reply: a reply line must stay under 512 characters (RFC 5321 4.5.3.1.5). */
const MAX_REASON = 380;

/** `250 2.0.0 Ok: <id>`, naming the id the service (or the outbox) gave the message. */
export function acceptedReply(id: string | undefined): SmtpReply {
  return { code: 250, text: `2.0.0 Ok: ${id ?? 'accepted (the service gave no id)'}` };
}

/**
 * The reply to a message the relay itself refused or could not take, before handing it on ({@link
 * serviceFailureReply} and {@link outboxFailureReply} answer for the destination).
 *
 * | failure | reply |
 * | --- | --- |
 * | a From or Sender that is not the login's ({@link senderRefusalOf}) | `553 5.7.1`, naming the address |
 * | headers name recipients not in RCPT TO (`EENVELOPE`) | `550 5.7.1`, naming them |
 * | a message over SIZE with its line ends CRLF (`EMESSAGE` with 413) | `552 5.3.4` |
 * | a message that cannot be read, or that the service is certain to refuse (permanent `EMESSAGE`) | `554 5.6.0`, saying why |
 * | the relay is shutting down (`EABORT`) | `451 4.3.2` |
 * | the relay's spool could not store it (`ESPOOL`: disk full...) | `451 4.3.0` |
 * | anything else | `451 4.3.0` |
 *
 * The relay's own refusals say what is wrong with the message; its own
 * failures say only to try again later (the log has the detail).
 */
export function relayFailureReply(err: unknown): SmtpReply {
  if (!(err instanceof EmlApiError)) return LOCAL_ERROR;
  if (senderRefusalOf(err)) return { code: 553, text: `5.7.1 ${reason(err)}` };
  switch (err.code) {
    case 'EENVELOPE':
      return { code: 550, text: `5.7.1 ${reason(err)}` };
    case 'EMESSAGE':
      if (err.responseCode === 413) return { code: 552, text: `5.3.4 ${reason(err)}` };
      return err.permanent ? { code: 554, text: `5.6.0 The message cannot be sent: ${reason(err)}` } : LOCAL_ERROR;
    case 'EABORT':
      return SHUTTING_DOWN;
    case 'ESPOOL':
      return { code: 451, text: '4.3.0 The relay could not store the message, try again later' };
    default:
      return LOCAL_ERROR;
  }
}

/**
 * The reply to a message the service did not accept (the direct relay). Transient failures answer `451`, so the
 * client's queue retries, with no detail (the log has it); failures the same message can never get past answer `5xx`
 * with the service's own reason.
 *
 * | failure | reply |
 * | --- | --- |
 * | 400 `invalid_address` | `554 5.1.3` |
 * | other 400 (`invalid_eml`, `no_recipients`...) | `554 5.6.0` |
 * | 413 | `552 5.3.4` |
 * | 401/403 for the client's own key | `550 5.7.1` |
 * | 401/403 for the relay's key (the relay is misconfigured) | `451 4.7.1` |
 * | 404, 405, 3xx: no send endpoint at the relay's base URL, or a redirect (misconfigured) | `451 4.3.5` |
 * | other 4xx | `554 5.0.0` |
 * | 429 | `451 4.4.5` |
 * | 408, timeout | `451 4.4.2` |
 * | unreachable, connection broke | `451 4.4.1` |
 * | 5xx | `451 4.3.0` |
 * | the relay is shutting down | `451 4.3.2` |
 * | anything else | as {@link relayFailureReply} |
 */
export function serviceFailureReply(err: unknown, owner: KeyOwner): SmtpReply {
  if (!(err instanceof EmlApiError)) return LOCAL_ERROR;
  const status = err.responseCode;
  switch (err.code) {
    case 'EAUTH':
      return owner === 'relay'
        ? { code: 451, text: "4.7.1 The service refused the relay's API key, try again later" }
        : { code: 550, text: `5.7.1 The service refused your API key for sending: ${serviceReason(err)}` };
    case 'ECONNECTION':
      return { code: 451, text: '4.4.1 The email service could not be reached, try again later' };
    case 'ETIMEDOUT':
      return { code: 451, text: '4.4.2 The email service did not answer in time, try again later' };
    case 'ECONFIG':
      return MISCONFIGURED;
    case 'EAPI':
      break;
    default:
      return relayFailureReply(err);
  }
  if (status === 413)
    return { code: 552, text: `5.3.4 The message is too large for the email service: ${serviceReason(err)}` };
  if (status === 429) return { code: 451, text: '4.4.5 The email service is rate limiting, try again later' };
  if (status === 408) return { code: 451, text: '4.4.2 The email service did not answer in time, try again later' };
  if (status === 400 && err.apiCode === 'invalid_address')
    return { code: 554, text: `5.1.3 The email service refused an address: ${serviceReason(err)}` };
  if (status === 400) return { code: 554, text: `5.6.0 The email service refused the message: ${serviceReason(err)}` };
  // A wrong or moved base URL (no send endpoint, a redirect the client does not follow) fails every message until the
  // relay is fixed: the mail waits in the senders' queues instead of bouncing.
  if (status !== undefined && (statusVerdict(status).refuses === 'endpoint' || (status >= 300 && status < 400)))
    return MISCONFIGURED;
  if (status !== undefined && status >= 400 && status < 500 && err.permanent)
    return { code: 554, text: `5.0.0 The email service refused the message: ${serviceReason(err)}` };
  return { code: 451, text: '4.3.0 The email service failed, try again later' };
}

/**
 * The reply to a message the outbox did not store (store-and-forward): `451 4.3.0` whatever Redis answered (the
 * detail is for the log); `552 5.3.4` past the outbox's `maxMessageSize`; `554 5.6.0` for a message whose earlier
 * copy failed and waits for the operator, or that the outbox refuses (saying why).
 */
export function outboxFailureReply(err: unknown): SmtpReply {
  if (!(err instanceof EmlApiError)) return LOCAL_ERROR;
  if (err.code === 'EABORT') return SHUTTING_DOWN;
  if (err.code === 'EMESSAGE' && err.permanent) {
    if (err.queueId !== undefined) {
      return {
        code: 554,
        text: "5.6.0 The relay cannot take this message again: an earlier copy of it failed and waits for the relay's operator",
      };
    }
    if (err.responseCode === 413)
      return { code: 552, text: "5.3.4 The message is larger than the relay's outbox takes" };
    return { code: 554, text: `5.6.0 The relay's outbox cannot take this message: ${reason(err)}` };
  }
  return { code: 451, text: '4.3.0 The relay could not store the message, try again later' };
}

/**
 * The reply to an `AUTH` whose API key could not be accepted: `535 5.7.8` when the service refused it (or it cannot
 * be a key), `454 4.7.0` when the service could not tell; no detail.
 */
export function authFailureReply(err: unknown): SmtpReply {
  if (err instanceof EmlApiError && (err.code === 'EAUTH' || err.code === 'ECONFIG')) {
    return { code: 535, text: '5.7.8 Authentication credentials invalid' };
  }
  return { code: 454, text: '4.7.0 Temporary authentication failure, try again later' };
}

const LOCAL_ERROR: SmtpReply = { code: 451, text: '4.3.0 Local error in processing, try again later' };
const SHUTTING_DOWN: SmtpReply = { code: 451, text: '4.3.2 The relay is shutting down, try again later' };
const MISCONFIGURED: SmtpReply = { code: 451, text: '4.3.5 The relay is not configured to send this, try again later' };

/**
 * The service's own reason for refusing a request: the code and message of its JSON error body, else its HTTP status.
 * Never the error's own message, which names the service's URL.
 */
function serviceReason(err: EmlApiError): string {
  let body: unknown;
  try {
    body = err.response === undefined ? undefined : JSON.parse(err.response);
  } catch {
    body = undefined;
  }
  const error = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  const code = typeof error?.code === 'string' ? error.code : err.apiCode;
  const message = typeof error?.message === 'string' ? error.message : undefined;
  const text = [code, message].filter(Boolean).join(': ');
  return oneLine(text || `HTTP ${err.responseCode ?? 'error'}`);
}

/**
 * Whether an error came from inside the relay rather than from the service or the client: anything but an
 * `EmlApiError`. Its text never reaches a reply; the relay logs it, with the client's password taken out.
 */
export function isInternalError(err: unknown): boolean {
  return !(err instanceof EmlApiError);
}

/** An error that smtp-server turns into `reply` (its `responseCode` and message). */
export function replyError(reply: SmtpReply): Error & { responseCode: number } {
  return Object.assign(new Error(reply.text), { responseCode: reply.code });
}

/** The error's message on one line, cut to {@link MAX_REASON} characters. */
function reason(err: Error): string {
  return oneLine(err.message);
}

/** The text on one line, cut to {@link MAX_REASON} characters. */
function oneLine(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > MAX_REASON ? `${line.slice(0, MAX_REASON - 1)}…` : line;
}

/** The reply to AUTH on a connection where it is not offered (plain text, not from `trustedNetworks`): RFC 4954's `538`. */
export const AUTH_NEEDS_TLS: SmtpReply = {
  code: 538,
  text: '5.7.11 Encryption required: AUTH is accepted over TLS (STARTTLS first), or from trusted networks only',
};
