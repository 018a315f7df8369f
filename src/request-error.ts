import { EmlApiError } from './errors.js';
import { readApiError, type ServiceResponse } from './service-response.js';

/**
 * Turns a non-2xx answer into an {@link EmlApiError}: `EAUTH` for 401/403,
 * `EAPI` otherwise. The service's code and message are kept; the API key is
 * redacted from anything the service echoed back.
 */
export function errorFromResponse(command: string, res: ServiceResponse, apiKey: string): EmlApiError {
  const text = redact(res.text, apiKey);
  const raw = readApiError(res.data);
  const apiCode = raw.code === undefined ? undefined : redact(raw.code, apiKey);
  const message = raw.message;
  const detail = message ? redact(message, apiKey) : res.response;
  const label = apiCode ? `${res.statusCode} ${apiCode}` : res.response;
  const isAuth = res.statusCode === 401 || res.statusCode === 403;
  const summary = isAuth
    ? res.statusCode === 401
      ? 'the service refused the API key'
      : 'the API key is not allowed to do this'
    : 'the service answered with an error';
  return new EmlApiError(isAuth ? 'EAUTH' : 'EAPI', `${command} failed, ${summary} (${label}): ${detail}`, {
    responseCode: res.statusCode,
    response: text,
    command,
    ...(apiCode === undefined ? {} : { apiCode }),
  });
}

const TIMEOUT_CODES: Record<string, string> = {
  UND_ERR_CONNECT_TIMEOUT: 'connect timeout',
  UND_ERR_HEADERS_TIMEOUT: 'response headers timeout',
  UND_ERR_BODY_TIMEOUT: 'response body timeout',
  ETIMEDOUT: 'connect timeout',
};

/**
 * Turns a failure to exchange a request (network, timeout, abort) into an
 * {@link EmlApiError}. Errors that already are `EmlApiError`s pass through.
 */
export function errorFromFailure(
  command: string,
  origin: string,
  err: unknown,
  apiKey: string,
  signal?: AbortSignal,
): EmlApiError {
  if (err instanceof EmlApiError) return err;
  const e = (typeof err === 'object' && err !== null ? err : {}) as {
    code?: unknown;
    name?: unknown;
    message?: unknown;
    cause?: { code?: unknown };
  };
  // The caller's signal decides, whatever reason it was aborted with.
  if (signal?.aborted) {
    const reason: unknown = signal.reason;
    if (reason instanceof Error && reason.name === 'TimeoutError') {
      return new EmlApiError('ETIMEDOUT', `${command} to ${origin} failed: the AbortSignal timeout elapsed`, {
        command,
        cause: err,
        permanent: false,
      });
    }
    return new EmlApiError('EABORT', `${command} was aborted`, { command, cause: err, permanent: true });
  }
  const code = typeof e.code === 'string' ? e.code : typeof e.cause?.code === 'string' ? e.cause.code : '';
  const reason = redact(String(e.message ?? err), apiKey);
  if (e.name === 'AbortError') {
    return new EmlApiError('EABORT', `${command} was aborted`, { command, cause: err, permanent: true });
  }
  if (e.name === 'TimeoutError') {
    return new EmlApiError('ETIMEDOUT', `${command} to ${origin} failed: ${reason}`, {
      command,
      cause: err,
      permanent: false,
    });
  }
  if (code in TIMEOUT_CODES) {
    return new EmlApiError('ETIMEDOUT', `${command} to ${origin} failed: ${TIMEOUT_CODES[code]} (${code})`, {
      command,
      cause: err,
      permanent: false,
    });
  }
  const suffix = code ? ` (${code})` : '';
  return new EmlApiError('ECONNECTION', `${command} to ${origin} failed: ${reason}${suffix}`, {
    command,
    cause: err,
    permanent: false,
  });
}

/** Replaces every occurrence of the API key in a text. */
export function redact(text: string, apiKey: string): string {
  return apiKey.length > 0 && text.includes(apiKey) ? text.split(apiKey).join('[redacted]') : text;
}
