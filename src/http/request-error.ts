import { STATUS_CODES } from 'node:http';
import { inspect } from 'node:util';
import { EmlApiError } from '../shared/eml-api-error.js';
import { statusVerdict } from '../shared/failure.js';
import { ExchangeFailure } from './exchange.js';

export interface FailureContext {
  command: string;
  origin: string;
  /** Redacted from every text the error carries. */
  secret: string;
  /** The call's signal (caller's signal, total timeout, close). */
  signal?: AbortSignal | undefined;
  attempts?: number;
  /** The call repeats ambiguous failures (a check, or `retry.retryAmbiguous`), so its note says no "not retried". */
  replaysAmbiguous?: boolean;
  responseTimeout?: number;
  stage?: CallStage;
}

/** What a call is doing, named in failure messages. */
export type CallStage = 'queued' | 'building' | 'sending';

const STAGE_TEXT = {
  queued: ' while waiting for a free connection slot',
  building: ' while the message was being built',
  sending: '',
} as const;

const SENT = 'the request was sent, so the service may have accepted it';

/** What an ambiguous failure says of the client's retries; the outbox, which does retry them, replaces it. */
export const MAY_HAVE_BEEN_ACCEPTED = `${SENT}; not retried to avoid sending twice (see retry.retryAmbiguous)`;

/** A non-2xx answer as `EAUTH` (401/403) or `EAPI`, with the service's code and message and the API key redacted. */
export function errorFromResponse(
  command: string,
  res: ServiceResponse,
  secret: string,
  extra: { attempts?: number; note?: string; retryAfter?: number; replaysAmbiguous?: boolean } = {},
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
  const ambiguous = statusVerdict(res.statusCode).mayHaveBeenAccepted;
  const attempts = extra.attempts !== undefined && extra.attempts > 1 ? ` after ${extra.attempts} attempts` : '';
  const notes = [extra.note, ambiguous ? (extra.replaysAmbiguous ? SENT : MAY_HAVE_BEEN_ACCEPTED) : undefined]
    .filter(Boolean)
    .join('; ');
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

/** A permanent `EAPI` for a 2xx the caller could not read: neither a yes nor a no. */
export function errorFromUnreadableAnswer(
  command: string,
  res: ServiceResponse,
  secret: string,
  what: string,
  expected: string,
): EmlApiError {
  const shape = bodyShape(res);
  const shown = shape === 'empty' ? 'an empty body' : shape === 'json' ? 'JSON' : 'a body that is not JSON';
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

/** OpenSSL's words for a TLS handshake answered in plain text (an http:// server under an https:// URL). */
const PLAIN_ANSWER_TO_TLS: ReadonlySet<string> = new Set([
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ERR_SSL_PACKET_LENGTH_TOO_LONG',
]);

/** A failure to exchange a request (network, timeout, abort) as an {@link EmlApiError}; those pass through. */
export function errorFromFailure(err: unknown, ctx: FailureContext): EmlApiError {
  if (err instanceof EmlApiError) return err;
  const { command, origin } = ctx;
  const phase = err instanceof ExchangeFailure ? err.phase : undefined;
  const cause = err instanceof ExchangeFailure ? err.cause : err;
  // The request body could not produce its bytes: its own error, not the network's.
  if (cause instanceof EmlApiError && !ctx.signal?.aborted) return cause;
  const sent = phase === 'sent';
  const note = sent ? `; ${ctx.replaysAmbiguous ? SENT : MAY_HAVE_BEEN_ACCEPTED}` : '';
  const attempts = ctx.attempts !== undefined && ctx.attempts > 1 ? ` after ${ctx.attempts} attempts` : '';
  const common = {
    command,
    cause: withoutSecret(cause, ctx.secret),
    mayHaveBeenAccepted: sent,
    ...(ctx.attempts === undefined ? {} : { attempts: ctx.attempts }),
  };
  // The call's signal decides, whatever the reason it was aborted with.
  if (ctx.signal?.aborted) {
    const reason: unknown = ctx.signal.reason;
    const during = STAGE_TEXT[ctx.stage ?? 'sending'];
    if (reason instanceof TotalTimeoutReason) {
      return new EmlApiError(
        'ETIMEDOUT',
        `${command} to ${origin} failed: overall timeout (timeouts.total, ${reason.ms} ms) elapsed${during}${note}`,
        { ...common, permanent: false },
      );
    }
    if (reason instanceof Error && reason.name === 'TimeoutError') {
      return new EmlApiError(
        'ETIMEDOUT',
        `${command} to ${origin} failed: the caller's AbortSignal timeout elapsed${during}${note}`,
        { ...common, permanent: false },
      );
    }
    const why =
      reason instanceof ClientClosedReason
        ? 'the client was closed with { abort: true }'
        : 'its AbortSignal was aborted';
    return new EmlApiError('EABORT', `${command} was aborted${during}: ${why}${note}`, {
      ...common,
      permanent: true,
    });
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
      `${command} to ${origin} failed${attempts}: ${which}${limit}${code ? ` (${code})` : ''}${note}`,
      { ...common, permanent: false },
    );
  }
  const suffix = code ? ` (${code})` : '';
  const said = PLAIN_ANSWER_TO_TLS.has(code)
    ? 'the server answered without TLS: does the URL need http:// instead of https://?'
    : reason;
  return new EmlApiError('ECONNECTION', `${command} to ${origin} failed${attempts}: ${said}${suffix}${note}`, {
    ...common,
    permanent: false,
  });
}

export class TotalTimeoutReason extends Error {
  override readonly name = 'TimeoutError';
  constructor(readonly ms: number) {
    super(`overall timeout of ${ms} ms elapsed`);
  }
}

export class ClientClosedReason extends Error {
  override readonly name = 'AbortError';
  constructor() {
    super('the client was closed');
  }
}

export const REDACTED = '[redacted]';

/**
 * An error to keep as a cause that shows no secret: a copy with its message and stack redacted (its code and name kept,
 * its own causes dropped) when it, or an error under it, quotes the secret (a dispatcher quoting the request's headers).
 */
function withoutSecret(cause: unknown, secret: string): unknown {
  if (!(cause instanceof Error)) return cause;
  const shown = inspect(cause, { depth: 5 });
  if (redact(shown, secret) === shown) return cause;
  const copy = new Error(redact(cause.message, secret));
  copy.name = cause.name;
  copy.stack = redact(cause.stack ?? '', secret);
  const { code } = cause as { code?: unknown };
  if (code !== undefined) Object.assign(copy, { code });
  return copy;
}

/** Shorter secrets are redacted only as a whole token, so ordinary words survive. */
const SHORT_SECRET = 12;

/**
 * Replaces `secret` in a text as written or as a service or proxy writes it back, JSON-, HTML- or URL-escaped in any
 * mix and either case. Plain substring search over the text and its unescaped reading keeps it linear for a secret of
 * any length; a pattern built from the secret would not compile for a long one.
 */
export function redact(text: string, secret: string): string {
  // An escape is longer than its character: a shorter text cannot hold the secret.
  if (secret.length === 0 || text.length < secret.length) return text;
  const needle = fold(secret);
  const whole = secret.length < SHORT_SECRET;
  // As written first (a secret may itself look escaped, `a%41`), then unescaped.
  const once = replaceAll(text, readLiterally(text), needle, whole);
  if (!/[%\\&]/.test(once)) return once;
  return replaceAll(once, readUnescaped(once), needle, whole);
}

/** A text's characters (case-folded), each with the span (one character, or an escape) that wrote it. */
interface Reading {
  chars: string;
  /** Each character's span in the text; undefined: one character each, in place. */
  starts: number[] | undefined;
  ends: number[] | undefined;
}

function replaceAll(text: string, reading: Reading, needle: string, whole: boolean): string {
  const { chars, starts, ends } = reading;
  let out = '';
  let copied = 0;
  let from = 0;
  for (;;) {
    const at = chars.indexOf(needle, from);
    if (at === -1) break;
    const last = at + needle.length - 1;
    if (whole && (isWordChar(chars[at - 1]) || isWordChar(chars[last + 1]))) {
      from = at + 1;
      continue;
    }
    out += text.slice(copied, starts ? starts[at] : at) + REDACTED;
    copied = ends ? ends[last]! : last + 1;
    from = last + 1;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

function readLiterally(text: string): Reading {
  return { chars: fold(text), starts: undefined, ends: undefined };
}

function readUnescaped(text: string): Reading {
  const chars: string[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  let i = 0;
  while (i < text.length) {
    const [ch, length] = escapeAt(text, i) ?? [text[i]!, 1];
    chars.push(foldChar(ch));
    starts.push(i);
    ends.push(i + length);
    i += length;
  }
  return { chars: chars.join(''), starts, ends };
}

const NAMED: Record<string, string> = { quot: '"', amp: '&', lt: '<', gt: '>', apos: "'" };
const JSON_SHORT: Record<string, string> = { '"': '"', '\\': '\\', '/': '/' };
/** `&#x0000000022;` is valid HTML, but escapes are not read without end. */
const MAX_ESCAPE = 16;

function escapeAt(text: string, i: number): [string, number] | undefined {
  const c = text[i];
  if (c === '%') {
    const hex = text.slice(i + 1, i + 3);
    return /^[0-9a-f]{2}$/i.test(hex) ? [String.fromCharCode(parseInt(hex, 16)), 3] : undefined;
  }
  if (c === '\\') {
    const next = text[i + 1];
    if (next === 'u') {
      const hex = text.slice(i + 2, i + 6);
      return /^[0-9a-f]{4}$/i.test(hex) ? [String.fromCharCode(parseInt(hex, 16)), 6] : undefined;
    }
    return next !== undefined && JSON_SHORT[next] ? [JSON_SHORT[next], 2] : undefined;
  }
  if (c === '&') {
    const end = text.indexOf(';', i + 1);
    if (end === -1 || end - i > MAX_ESCAPE) return undefined;
    const body = text.slice(i + 1, end);
    const length = end - i + 1;
    const named = NAMED[body.toLowerCase()];
    if (named) return [named, length];
    const number = /^#(?:x([0-9a-f]+)|(\d+))$/i.exec(body);
    if (!number) return undefined;
    const code = number[1] !== undefined ? parseInt(number[1], 16) : Number(number[2]);
    return code <= 0xffff ? [String.fromCharCode(code), length] : undefined;
  }
  return undefined;
}

/** Folded character by character, so the text keeps one character per character. */
function fold(text: string): string {
  // eslint-disable-next-line no-control-regex
  if (/^[\x00-\x7f]*$/.test(text)) return text.toLowerCase();
  let out = '';
  for (let i = 0; i < text.length; i++) out += foldChar(text[i]!);
  return out;
}

function foldChar(ch: string): string {
  const lower = ch.toLowerCase();
  return lower.length === 1 ? lower : ch;
}

function isWordChar(ch: string | undefined): boolean {
  return ch !== undefined && /[a-z0-9]/i.test(ch);
}

/**
 * A service answer read leniently: any status, JSON when the body is JSON, the raw text always.
 * @example const { statusCode, response, data, text } = await client.sendEml(eml); // 202, '202 Accepted', { id, ... }, '{"id":...}'
 */
export interface ServiceResponse<T = unknown> {
  /** HTTP status. */
  statusCode: number;
  /** Status line text, e.g. `202 Accepted`. */
  response: string;
  /** Parsed JSON body, or `undefined` when it is not JSON. */
  data: T | undefined;
  /** Raw body text. */
  text: string;
}

export function readServiceResponse<T>(
  statusCode: number,
  contentType: string | undefined,
  text: string,
): ServiceResponse<T> {
  let data: T | undefined;
  const looksJson = /\bjson\b/i.test(contentType ?? '') || /^\s*[{[]/.test(text);
  if (looksJson && text.length > 0) {
    try {
      data = JSON.parse(text) as T;
    } catch {
      // A proxy's HTML page or a truncated body: the text stays.
      data = undefined;
    }
  }
  return { statusCode, response: `${statusCode} ${STATUS_CODES[statusCode] ?? ''}`.trim(), data, text };
}

/** What a body is, as the messages about an answer that is not the service's name it. */
export function bodyShape(res: Pick<ServiceResponse, 'data' | 'text'>): 'empty' | 'html' | 'text' | 'json' {
  const body = res.text.trim();
  if (body === '') return 'empty';
  if (res.data !== undefined) return 'json';
  return body.startsWith('<') ? 'html' : 'text';
}

/** `error.code` and `error.message` from an error body of any common shape. */
export function readApiError(data: unknown): { code?: string; message?: string } {
  if (typeof data !== 'object' || data === null) return {};
  const body = data as Record<string, unknown>;
  const inner = typeof body.error === 'object' && body.error !== null ? (body.error as Record<string, unknown>) : body;
  const code = typeof inner.code === 'string' ? inner.code : typeof body.error === 'string' ? body.error : undefined;
  const message = typeof inner.message === 'string' ? inner.message : undefined;
  return { code, message };
}
