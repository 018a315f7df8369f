import { STATUS_CODES } from 'node:http';

/**
 * A service answer read leniently: any status, JSON when the body is JSON,
 * the raw text always. {@link SendResult} and {@link GroupSendResult} extend it.
 *
 * @example
 * const { statusCode, response, data, text } = await client.sendEml(eml); // 202, '202 Accepted', { id, ... }, '{"id":...}'
 */
export interface ServiceResponse<T = unknown> {
  /** HTTP status. */
  statusCode: number;
  /** Status line text, e.g. `202 Accepted`. */
  response: string;
  /** Parsed JSON body, or `undefined` when the body is not JSON. */
  data: T | undefined;
  /** Raw body text. */
  text: string;
}

/** Builds a {@link ServiceResponse} from a status, a content type and the body text. */
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
      // A proxy's HTML page or a truncated body: keep the text, never crash.
      data = undefined;
    }
  }
  return { statusCode, response: `${statusCode} ${STATUS_CODES[statusCode] ?? ''}`.trim(), data, text };
}

/** Reads `error.code` and `error.message` from an error body of any common shape. */
export function readApiError(data: unknown): { code?: string; message?: string } {
  if (typeof data !== 'object' || data === null) return {};
  const body = data as Record<string, unknown>;
  const inner = typeof body.error === 'object' && body.error !== null ? (body.error as Record<string, unknown>) : body;
  const code = typeof inner.code === 'string' ? inner.code : typeof body.error === 'string' ? body.error : undefined;
  const message = typeof inner.message === 'string' ? inner.message : undefined;
  return { code, message };
}
