import { EmlApiError } from '../shared/eml-api-error.js';
import type { MessageDestination } from './message-destination.js';

/**
 * The destination for the `queue` option (`eml-api relay --redis`): the
 * outbox, which stores each message in Redis and answers `250` once it is
 * stored, then sends it when the service can take it.
 *
 * The outbox (`nodemailer-eml-api/queue`) is not part of this version yet,
 * so this refuses the option clearly instead of ignoring it.
 *
 * @throws {EmlApiError} `ECONFIG`, always (for now)
 */
export function queueDestination(queue: unknown): MessageDestination {
  void queue;
  throw new EmlApiError(
    'ECONFIG',
    'Invalid option queue: store-and-forward through the outbox (nodemailer-eml-api/queue, --redis) is not available ' +
      'in this version yet; run the relay without it (messages are then uploaded directly, and 250 means the service accepted them)',
    { permanent: true },
  );
}
