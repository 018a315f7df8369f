import { randomUUID } from 'node:crypto';
import { emlBodyLength } from '../body/eml-upload-body.js';
import { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import { queueTransportInternals } from '../queue/queue-transport-internals.js';
import type { MessageDestination } from './message-destination.js';

/**
 * The destination of the `queue` option (`eml-api relay --redis`): the
 * outbox. The relay answers `250` once Redis has stored the message; the
 * outbox's workers send it when the service can take it, retrying for about a
 * day, under the message's idempotency key.
 *
 * @param queue a queue transport the caller owns (left open on close), or the
 *   options of one the relay makes and closes
 */
export function queueDestination(queue: EmlApiQueueTransport | EmlApiQueueTransportOptions): MessageDestination {
  const owned = !(queue instanceof EmlApiQueueTransport);
  const transport = queue instanceof EmlApiQueueTransport ? queue : new EmlApiQueueTransport(queue);
  const { enqueue } = queueTransportInternals(transport);
  return {
    name: 'outbox',
    async deliver(message, _sender, signal) {
      const { spooled } = message;
      const info = await enqueue(
        {
          kind: 'eml',
          envelope: { from: message.envelope.from || false, to: [...message.envelope.to] },
          messageId: message.messageId ?? '',
          size: spooled.size,
          requestBytes: emlBodyLength(spooled.size),
          fromDiffers: false,
          open: () => spooled.open(),
          // The relay disposes of the spooled message once deliver() settles.
          dispose: () => Promise.resolve(),
        },
        message.idempotencyKey ?? `smtp-relay-${randomUUID()}`,
        signal,
      );
      return { id: info.queueId };
    },
    // Redis must answer and keep what is queued (noeviction; AOF as the transport's durability asks).
    ready: async () => {
      await transport.verify();
    },
    close: () => (owned ? transport.close() : Promise.resolve()),
  };
}
