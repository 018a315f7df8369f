import { EmlApiError } from '../shared/eml-api-error.js';

/** An `EMESSAGE` error for bad input, found before any request: nothing was sent. */
export function inputError(message: string): EmlApiError {
  return new EmlApiError('EMESSAGE', message, { permanent: true });
}
