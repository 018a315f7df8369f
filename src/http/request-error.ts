import { ClientClosedReason, TotalTimeoutReason } from './abort-reasons.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { ExchangeFailure } from './exchange.js';
import { redact } from './redact.js';
import { readApiError, type ServiceResponse } from './service-response.js';

/** What the error mapping needs to know about the call. */
export interface FailureContext {
  command: string;
  origin: string;
  /** Redacted from every text the error carries. */
  secret: string;
  /** The call's combined signal (caller's signal, total timeout, close). */
  signal?: AbortSignal | undefined;
  attempts?: number;
  /** Time limit of one attempt's response, for the message. */
  responseTimeout?: number;
  /** What the call was doing, for the message of an abort or timeout. */
  stage?: CallStage;
}

/** What a call is doing; failure messages name it. */
export type CallStage = 'queued' | 'building' | 'sending';

const STAGE_TEXT = {
  queued: ' while waiting for a free connection slot',
  building: ' while the message was being built',
  sending: '',
} as const;

/**
 * What an ambiguous failure's message says of the client's own retries. The
 * outbox, which does retry such sends, replaces it in what it reports.
 * @example
 * err.message.includes(MAY_HAVE_BEEN_ACCEPTED); // a timeout after the request was sent
 */
export const MAY_HAVE_BEEN_ACCEPTED =
  'the request was sent, so the service may have accepted it; not retried to avoid sending twice (see retry.retryAmbiguous)';

/**
 * Turns a non-2xx answer into an {@link EmlApiError}: `EAUTH` for 401/403,
 * `EAPI` otherwise. The service's code and message are kept; the API key is
 * redacted from anything the service echoed back.
 */
export function errorFromResponse(
  command: string,
  res: ServiceResponse,
  secret: string,
  extra: { attempts?: number; note?: string; retryAfter?: number } = {},
): EmlApiError {
  const text = redact(res.text, secret);
  const raw = readApiError(res.data);
  const apiCode = raw.code === undefined ? undefined : redact(raw.code, secret);
  const detail = raw.message ? redact(raw.message, secret) : res.response;
  const label = apiCode ? `${res.statusCode} ${apiCode}` : res.response;
  const isAuth = res.statusCode === 401 || res.statusCode === 403;
  const summary = isAuth
    ? res.statusCode === 401
      ? 'the service refused the API key'
      : 'the API key is not allowed to do this'
    : 'the service answered with an error';
  const ambiguous = res.statusCode === 502 || res.statusCode === 504;
  const attempts = extra.attempts !== undefined && extra.attempts > 1 ? ` after ${extra.attempts} attempts` : '';
  const notes = [extra.note, ambiguous ? MAY_HAVE_BEEN_ACCEPTED : undefined].filter(Boolean).join('; ');
  return new EmlApiError(
    isAuth ? 'EAUTH' : 'EAPI',
    `${command} failed${attempts}, ${summary} (${label}): ${detail}${notes ? `; ${notes}` : ''}`,
    {
      responseCode: res.statusCode,
      response: text,
      command,
      ...(apiCode === undefined ? {} : { apiCode }),
      ...(extra.attempts === undefined ? {} : { attempts: extra.attempts }),
      ...(extra.retryAfter === undefined ? {} : { retryAfter: extra.retryAfter }),
      mayHaveBeenAccepted: ambiguous,
    },
  );
}

/**
 * An {@link EmlApiError} (`EAPI`, permanent) for a 2xx answer the caller had
 * to read and could not: the answer states nothing it recognises, so it is
 * neither a yes nor a no.
 *
 * @param expected what a readable answer looks like, e.g. `{"member": true|false}`
 */
export function errorFromUnreadableAnswer(
  command: string,
  res: ServiceResponse,
  secret: string,
  what: string,
  expected: string,
): EmlApiError {
  const shown = res.text.trim() === '' ? 'an empty body' : res.data === undefined ? 'a body that is not JSON' : 'JSON';
  return new EmlApiError(
    'EAPI',
    `${command} answered ${res.response} with ${shown}, which is not ${what} (expected ${expected}); is baseUrl the service's?`,
    { responseCode: res.statusCode, response: redact(res.text, secret), command, permanent: true },
  );
}

const TIMEOUT_CODES: Record<string, string> = {
  UND_ERR_CONNECT_TIMEOUT: 'connect timeout',
  UND_ERR_HEADERS_TIMEOUT: 'response timeout',
  UND_ERR_BODY_TIMEOUT: 'response timeout',
  ETIMEDOUT: 'connect timeout',
};

/**
 * Turns a failure to exchange a request (network, timeout, abort) into an
 * {@link EmlApiError}. Errors that already are `EmlApiError`s pass through.
 */
export function errorFromFailure(err: unknown, ctx: FailureContext): EmlApiError {
  if (err instanceof EmlApiError) return err;
  const { command, origin } = ctx;
  const phase = err instanceof ExchangeFailure ? err.phase : undefined;
  const cause = err instanceof ExchangeFailure ? err.cause : err;
  // The request body's own failure (it could not produce its bytes), not the network's.
  if (cause instanceof EmlApiError && !ctx.signal?.aborted) return cause;
  const sent = phase === 'sent';
  const attempts = ctx.attempts !== undefined && ctx.attempts > 1 ? ` after ${ctx.attempts} attempts` : '';
  const common = {
    command,
    cause,
    mayHaveBeenAccepted: sent,
    ...(ctx.attempts === undefined ? {} : { attempts: ctx.attempts }),
  };
  // The call's signal decides, whatever reason it was aborted with.
  if (ctx.signal?.aborted) {
    const reason: unknown = ctx.signal.reason;
    const during = STAGE_TEXT[ctx.stage ?? 'sending'];
    if (reason instanceof TotalTimeoutReason) {
      return new EmlApiError(
        'ETIMEDOUT',
        `${command} to ${origin} failed: overall timeout (timeouts.total, ${reason.ms} ms) elapsed${during}${sent ? `; ${MAY_HAVE_BEEN_ACCEPTED}` : ''}`,
        { ...common, permanent: false },
      );
    }
    if (reason instanceof Error && reason.name === 'TimeoutError') {
      return new EmlApiError(
        'ETIMEDOUT',
        `${command} to ${origin} failed: the caller's AbortSignal timeout elapsed${during}${sent ? `; ${MAY_HAVE_BEEN_ACCEPTED}` : ''}`,
        { ...common, permanent: false },
      );
    }
    const why =
      reason instanceof ClientClosedReason
        ? 'the client was closed with { abort: true }'
        : 'its AbortSignal was aborted';
    return new EmlApiError(
      'EABORT',
      `${command} was aborted${during}: ${why}${sent ? `; ${MAY_HAVE_BEEN_ACCEPTED}` : ''}`,
      {
        ...common,
        permanent: true,
      },
    );
  }
  const e = (typeof cause === 'object' && cause !== null ? cause : {}) as {
    code?: unknown;
    name?: unknown;
    message?: unknown;
    cause?: { code?: unknown };
  };
  const code = typeof e.code === 'string' ? e.code : typeof e.cause?.code === 'string' ? e.cause.code : '';
  const reason = redact(String(e.message ?? cause), ctx.secret);
  if (e.name === 'AbortError') {
    return new EmlApiError('EABORT', `${command} was aborted`, { ...common, permanent: true });
  }
  if (code in TIMEOUT_CODES || e.name === 'TimeoutError') {
    const which = TIMEOUT_CODES[code] ?? 'timeout';
    const limit =
      which === 'response timeout' && ctx.responseTimeout
        ? ` (timeouts.response, ${ctx.responseTimeout} ms): no response`
        : '';
    return new EmlApiError(
      'ETIMEDOUT',
      `${command} to ${origin} failed${attempts}: ${which}${limit}${code ? ` (${code})` : ''}${sent ? `; ${MAY_HAVE_BEEN_ACCEPTED}` : ''}`,
      { ...common, permanent: false },
    );
  }
  const suffix = code ? ` (${code})` : '';
  return new EmlApiError(
    'ECONNECTION',
    `${command} to ${origin} failed${attempts}: ${reason}${suffix}${sent ? `; ${MAY_HAVE_BEEN_ACCEPTED}` : ''}`,
    { ...common, permanent: false },
  );
}
