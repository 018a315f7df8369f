import { inspect } from 'node:util';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { terminalText } from './terminal-text.js';

/**
 * The one line the CLI prints for a failure: the message on a single line,
 * followed by the error code when the client gave one, e.g.
 * `POST /v1/send/eml failed, the service refused the API key (401 invalid_api_key): ... [EAUTH]`.
 * Never a stack trace (see {@link formatErrorDetails}).
 */
export function formatErrorLine(err: unknown): string {
  // The message may quote the service, so it is made safe for the terminal after joining its lines.
  const message = terminalText(
    (err instanceof Error ? err.message : String(err)).replace(/\s*[\r\n]+\s*/g, ' ').trim(),
  );
  const api =
    err instanceof EmlApiError ? err : err instanceof Error && err.cause instanceof EmlApiError ? err.cause : undefined;
  return api ? `${message} [${api.code}]` : message;
}

/** Everything known about a failure, stack and causes included, for `--debug`. */
export function formatErrorDetails(err: unknown): string {
  return inspect(err, { depth: 4 });
}
