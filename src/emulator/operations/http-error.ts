import type { ApiErrorCode } from '../../protocol/api-types.js';

/**
 * An error answer of the emulator: thrown by handlers, turned into
 * `{ "error": { "code", "message" } }` with its status by the server.
 */
export class HttpError extends Error {
  override readonly name = 'HttpError';
  constructor(
    readonly status: number,
    readonly code: ApiErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}
