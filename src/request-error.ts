import { EmlApiError } from './errors.js';
import { readApiError, type ServiceResponse } from './service-response.js';

/**
 * Turns a non-2xx answer into an {@link EmlApiError}: `EAUTH` for 401/403,
 * `EAPI` otherwise. The service's code and message are kept; the API key is
 * redacted from anything the service echoed back.
 */
export function errorFromResponse(command: string, res: ServiceResponse, apiKey: string): EmlApiError {
  const text = redact(res.text, apiKey);
  const { code: apiCode, message } = readApiError(res.data);
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

const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
]);

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
export function errorFromFailure(command: string, origin: string, err: unknown, apiKey: string): EmlApiError {
  if (err instanceof EmlApiError) return err;
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string } };
  const code = e.code ?? e.cause?.code ?? '';
  const reason = redact(String(e.message ?? err), apiKey);
  if (e.name === 'AbortError' || code === 'ABORT_ERR') {
    return new EmlApiError('EABORT', `${command} was aborted`, { command, cause: err, permanent: true });
  }
  if (code in TIMEOUT_CODES) {
    return new EmlApiError('ETIMEDOUT', `${command} to ${origin} failed: ${TIMEOUT_CODES[code]} (${code})`, {
      command,
      cause: err,
      permanent: false,
    });
  }
  if (CONNECTION_CODES.has(code) || code.startsWith('UND_ERR')) {
    return new EmlApiError('ECONNECTION', `${command} to ${origin} failed: ${reason} (${code})`, {
      command,
      cause: err,
      permanent: false,
    });
  }
  return new EmlApiError('ECONNECTION', `${command} to ${origin} failed: ${reason}`, {
    command,
    cause: err,
    permanent: false,
  });
}

/** Replaces every occurrence of the API key in a text. */
export function redact(text: string, apiKey: string): string {
  return apiKey.length > 0 && text.includes(apiKey) ? text.split(apiKey).join('[redacted]') : text;
}
