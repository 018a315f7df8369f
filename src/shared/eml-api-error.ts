import { isPermanentStatus } from './failure.js';

/**
 * The package's error codes, in Nodemailer's style:
 * - `EAUTH`: the service refused the API key (401) or its scope or plan (403)
 * - `EENVELOPE`: the envelope cannot be expressed (custom recipients, none at all)
 * - `EMESSAGE`: the message cannot be sent in the requested form
 * - `ESTREAM`: the message's stream broke before it was whole (a build thread died, an SMTP client left mid-DATA);
 *   nothing was sent, retryable
 * - `ESPOOL`: the spool file could not be written (disk full, file-size limit); nothing was sent, retryable
 * - `ETIMEDOUT`: a connect, header or overall timeout elapsed
 * - `ECONNECTION`: the service could not be reached or the connection broke
 * - `EABORT`: the send was aborted through its `AbortSignal`
 * - `ECONFIG`: invalid options, found before any request; or an outbox Redis set up to lose queued mail
 * - `EAPI`: any other answer of the service that is not a success
 * @example if (err instanceof EmlApiError && (['ECONNECTION', 'ETIMEDOUT'] as EmlApiErrorCode[]).includes(err.code)) retryLater();
 */
export type EmlApiErrorCode =
  | 'EAUTH'
  | 'EENVELOPE'
  | 'EMESSAGE'
  | 'ESTREAM'
  | 'ESPOOL'
  | 'ETIMEDOUT'
  | 'ECONNECTION'
  | 'EABORT'
  | 'ECONFIG'
  | 'EAPI';

/**
 * Fields an {@link EmlApiError} can carry besides its message, each absent by default.
 * @example throw new EmlApiError('EAPI', 'Service unavailable', { responseCode: 503, permanent: false });
 */
export interface EmlApiErrorDetails {
  /** As {@link EmlApiError.responseCode}. */
  responseCode?: number;
  /** As {@link EmlApiError.response}; truncated to 2,000 characters. */
  response?: string;
  /** As {@link EmlApiError.command}. */
  command?: string;
  /** As {@link EmlApiError.apiCode}. */
  apiCode?: string;
  /** As {@link EmlApiError.permanent}. @default `true` for a `responseCode` of 4xx other than 408 and 429 */
  permanent?: boolean;
  /** The underlying error. */
  cause?: unknown;
  /** As {@link EmlApiError.partial}. */
  partial?: unknown;
  /** As {@link EmlApiError.mayHaveBeenAccepted}. @default false */
  mayHaveBeenAccepted?: boolean;
  /** As {@link EmlApiError.attempts}. */
  attempts?: number;
  /** As {@link EmlApiError.retryAfter}. */
  retryAfter?: number;
  /** As {@link EmlApiError.idempotencyKey}. */
  idempotencyKey?: string;
  /** As {@link EmlApiError.queueId}. */
  queueId?: string;
}

const MAX_RESPONSE_CHARS = 2000;

/** Marks every EmlApiError, whichever copy of this module made it. */
const BRAND = Symbol.for('nodemailer-eml-api.EmlApiError');

/**
 * The package's one error class, carrying the fields Nodemailer's transports use (`code`, `responseCode`, `response`,
 * `command`) so apps and frameworks handle it unchanged; the API key never appears in it.
 * @example
 * try {
 *   await transporter.sendMail(message);
 * } catch (err) {
 *   if (err instanceof EmlApiError && err.code === 'EAUTH') {
 *     console.error('The API key was refused:', err.message);
 *   }
 * }
 */
export class EmlApiError extends Error {
  /** Holds for an error of any copy of the class: an app may load the ES module and CommonJS builds, or two installs. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }

  override readonly name = 'EmlApiError';
  /** Nodemailer-style error code. */
  readonly code: EmlApiErrorCode;
  /** HTTP status of the service's answer, when there was one. */
  readonly responseCode?: number;
  /** Body text of the service's answer (truncated). */
  readonly response?: string;
  /** The request that failed, e.g. `POST /v1/send/eml`. */
  readonly command?: string;
  /** The service's own error code, e.g. `invalid_api_key`. */
  readonly apiCode?: string;
  /** `true` when repeating the same request cannot succeed. */
  readonly permanent: boolean;
  /** What was done before the failure, e.g. `{ added, skipped, batches }` of earlier batches. */
  readonly partial?: unknown;
  /** The request was sent before the failure (timeout or reset after sending, 502, 504), so the service may have accepted it. */
  readonly mayHaveBeenAccepted: boolean;
  /** Attempts made, retries included (1 when there was no retry). */
  readonly attempts?: number;
  /** The service's `Retry-After` on the answer that failed the call (429, 503), in ms. */
  readonly retryAfter?: number;
  /**
   * The `Idempotency-Key` of the send that failed (on the outbox's storing errors, one it made up too): sending again
   * with it cannot deliver the message twice.
   */
  readonly idempotencyKey?: string;
  /** The outbox job id the message is or may be queued under: `transport.queue.getJob(err.queueId)` tells whether it landed. */
  readonly queueId?: string;

  constructor(code: EmlApiErrorCode, message: string, details: EmlApiErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    Object.defineProperty(this, BRAND, { value: true });
    this.code = code;
    if (details.responseCode !== undefined) this.responseCode = details.responseCode;
    if (details.response !== undefined) this.response = truncate(details.response);
    if (details.command !== undefined) this.command = details.command;
    if (details.apiCode !== undefined) this.apiCode = details.apiCode;
    this.permanent = details.permanent ?? isPermanentStatus(details.responseCode);
    if (details.partial !== undefined) this.partial = details.partial;
    this.mayHaveBeenAccepted = details.mayHaveBeenAccepted ?? false;
    if (details.attempts !== undefined) this.attempts = details.attempts;
    if (details.retryAfter !== undefined) this.retryAfter = details.retryAfter;
    if (details.idempotencyKey !== undefined) this.idempotencyKey = details.idempotencyKey;
    if (details.queueId !== undefined) this.queueId = details.queueId;
  }
}

/** An error's fields as constructor details: `new EmlApiError(err.code, text, { ...errorDetails(err), queueId })`. */
export function errorDetails(err: EmlApiError): EmlApiErrorDetails {
  const details: EmlApiErrorDetails = { permanent: err.permanent, mayHaveBeenAccepted: err.mayHaveBeenAccepted };
  const optional = [
    'responseCode',
    'response',
    'command',
    'apiCode',
    'partial',
    'attempts',
    'retryAfter',
    'idempotencyKey',
    'queueId',
    'cause',
  ] as const;
  for (const name of optional) {
    if (err[name] !== undefined) (details as Record<string, unknown>)[name] = err[name];
  }
  return details;
}

function truncate(text: string): string {
  return text.length > MAX_RESPONSE_CHARS ? `${text.slice(0, MAX_RESPONSE_CHARS)}…` : text;
}
