/**
 * Nodemailer-style error codes used by this package.
 *
 * - `EAUTH`: the service refused the API key (401) or its scope or plan (403)
 * - `EENVELOPE`: the envelope cannot be expressed (custom recipients, none at all)
 * - `EMESSAGE`: the message cannot be sent in the requested form
 * - `ESTREAM`: the message's stream broke before the message was whole, as Nodemailer's `ESTREAM`: the
 *   build thread building it died (`buildThreads`); in the SMTP relay, the client disconnected in the
 *   middle of DATA. Nothing was sent; retryable
 * - `ESPOOL`: the message's spool file could not be written (disk full, I/O error, file-size limit):
 *   the message was sound, the local disk failed. Nothing was sent; retryable
 * - `ETIMEDOUT`: a connect, header or overall timeout elapsed
 * - `ECONNECTION`: the service could not be reached or the connection broke
 * - `EABORT`: the send was aborted through its `AbortSignal`
 * - `ECONFIG`: invalid options, found before any request; or the outbox's Redis set up to lose queued
 *   mail (`maxmemory-policy` other than `noeviction`, less persistence than `durability` asks)
 * - `EAPI`: any other answer of the service that is not a success
 *
 * @example
 * if (err instanceof EmlApiError && (['ECONNECTION', 'ETIMEDOUT'] as EmlApiErrorCode[]).includes(err.code)) retryLater();
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
 * Fields an {@link EmlApiError} can carry besides its message. Each is absent by default; `permanent`
 * then follows `responseCode` (`true` for a 4xx other than 408 and 429), `mayHaveBeenAccepted` is `false`.
 *
 * @example
 * // An error of the package's shape, e.g. from a test double of the transport:
 * throw new EmlApiError('EAPI', 'Service unavailable', { responseCode: 503, permanent: false });
 */
export interface EmlApiErrorDetails {
  /** HTTP status of the service's answer, when there was one. */
  responseCode?: number;
  /** Body text of the service's answer, truncated to 2,000 characters. */
  response?: string;
  /** The request, e.g. `POST /v1/send/eml`. */
  command?: string;
  /** The service's own error code, e.g. `missing_scope`. */
  apiCode?: string;
  /** Whether repeating the same request cannot succeed. Defaults to `true` for 4xx other than 408 and 429. */
  permanent?: boolean;
  /** The underlying error. */
  cause?: unknown;
  /** What was done before the failure, e.g. the members earlier batches added. */
  partial?: unknown;
  /** `true` when the request reached the service before failing: it may have been accepted. */
  mayHaveBeenAccepted?: boolean;
  /** Attempts made, retries included. */
  attempts?: number;
  /** How long the service asked to wait before trying again (its `Retry-After`), in ms. */
  retryAfter?: number;
  /** The `Idempotency-Key` of the send that failed, to try it again safely. */
  idempotencyKey?: string;
  /** The outbox job id of the send that failed (see `outboxJobId`). */
  queueId?: string;
}

const MAX_RESPONSE_CHARS = 2000;

/** Marks every EmlApiError, whichever copy of this module made it (see `Symbol.hasInstance` below). */
const BRAND = Symbol.for('nodemailer-eml-api.EmlApiError');

/**
 * The one error class of this package. Every failure of the client, the
 * transport and option validation is an `EmlApiError`, carrying the fields
 * Nodemailer's own transports use (`code`, `responseCode`, `response`,
 * `command`) so that apps and frameworks handle it unchanged.
 *
 * The API key never appears in its message or fields.
 *
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
  /**
   * `err instanceof EmlApiError` holds for an error made by any copy of this
   * class: the ES module and CommonJS builds each have one (the entry points of
   * a format share theirs), and an app may load both, or two installs of the package.
   */
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
  /** What was done before the failure (e.g. `{ added, skipped, batches }` of earlier batches). */
  readonly partial?: unknown;
  /**
   * `true` when the request was sent before the failure (a timeout or reset
   * after sending, 502, 504): the service may have accepted it. Not retried
   * unless `retry.retryAmbiguous` is set, to avoid sending twice.
   */
  readonly mayHaveBeenAccepted: boolean;
  /** Attempts made, retries included (1 when there was no retry). */
  readonly attempts?: number;
  /**
   * How long the service asked to wait before trying again, in ms: its
   * `Retry-After` on the answer that failed the call (429, 503), when it sent one.
   */
  readonly retryAfter?: number;
  /**
   * The `Idempotency-Key` of the send that failed: queueing or sending again
   * with it (`sendMail({ idempotencyKey })`) cannot deliver the message twice.
   * Set on the outbox's storing errors, also when `sendMail` was given no key
   * and the outbox made one up. Never a secret (the API key is never here).
   */
  readonly idempotencyKey?: string;
  /**
   * The outbox job id the message is (or may be) queued under, on the outbox's
   * storing errors: `transport.queue.getJob(err.queueId)` tells whether it landed.
   */
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

/**
 * The fields of an error as constructor details, to make another error like
 * it (another message, more fields): `new EmlApiError(err.code, text, { ...errorDetails(err), queueId })`.
 */
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

/**
 * Whether an HTTP status means the same request can never succeed: 4xx except
 * 408 (timeout) and 429 (rate limited).
 */
export function isPermanentStatus(status: number | undefined): boolean {
  return status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
}

function truncate(text: string): string {
  return text.length > MAX_RESPONSE_CHARS ? `${text.slice(0, MAX_RESPONSE_CHARS)}…` : text;
}
