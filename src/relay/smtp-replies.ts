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
 * The reply to a message the relay itself refused or could not take, before handing it on (docs/relay.md, "What the
 * relay promises", has the table). Its refusals say what is wrong; its own failures only to try again later.
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
 * The reply to a message the service did not accept (the direct relay): `451` without detail for what may pass (the
 * client's queue retries), `5xx` with the service's own reason for what never will.
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

/** The reply to a message the outbox did not store: `451 4.3.0` whatever Redis answered (the log has the detail). */
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

/** `535 5.7.8` when the service refused the AUTH's key (or it cannot be one), `454 4.7.0` when it could not tell. */
export function authFailureReply(err: unknown): SmtpReply {
  if (err instanceof EmlApiError && (err.code === 'EAUTH' || err.code === 'ECONFIG')) {
    return { code: 535, text: '5.7.8 Authentication credentials invalid' };
  }
  return { code: 454, text: '4.7.0 Temporary authentication failure, try again later' };
}

const LOCAL_ERROR: SmtpReply = { code: 451, text: '4.3.0 Local error in processing, try again later' };
/** What a client is told of a message the relay gave up as it stopped (`421` while it arrives, else `451`). */
export const SHUTTING_DOWN_TEXT = '4.3.2 The relay is shutting down, try again later';
const SHUTTING_DOWN: SmtpReply = { code: 451, text: SHUTTING_DOWN_TEXT };
const MISCONFIGURED: SmtpReply = { code: 451, text: '4.3.5 The relay is not configured to send this, try again later' };

/** The code and message of the service's JSON error body, else its status: never the message, which names its URL. */
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

/** An error from inside the relay (not an `EmlApiError`): its text never reaches a reply. */
export function isInternalError(err: unknown): boolean {
  return !(err instanceof EmlApiError);
}

/** An error that smtp-server turns into `reply` (its `responseCode` and message). */
export function replyError(reply: SmtpReply): Error & { responseCode: number } {
  return Object.assign(new Error(reply.text), { responseCode: reply.code });
}

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
