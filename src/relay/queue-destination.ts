import { emlBodyLength } from '../body/eml-upload-body.js';
import { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import type { MessageDestination } from './message-destination.js';
import { outboxRedisReadiness } from '../queue/outbox-readiness.js';
import { queueRedis } from '../queue/outbox-queue.js';

/** The largest `concurrency` the queue transport takes. */
const MAX_CONCURRENCY = 10_000;

/**
 * The destination of the `queue` option (`eml-api relay --redis`): the
 * outbox. The relay answers `250` once Redis has stored the message; the
 * outbox's workers send it when the service can take it, retrying for about a
 * day, under the message's idempotency key.
 *
 * @param queue a queue transport the caller owns (left open on close), or the
 *   options of one the relay makes and closes
 * @param maxClients the relay's `maxClients`: a transport the relay makes
 *   stores that many messages at once unless its options set `concurrency`
 */
export function queueDestination(
  queue: EmlApiQueueTransport | EmlApiQueueTransportOptions,
  maxClients: number,
): MessageDestination {
  const owned = !(queue instanceof EmlApiQueueTransport);
  // The transport's `concurrency` (10 by default) bounds how many messages Nodemailer builds at
  // once. A relay's messages are already spooled when they reach it, and each connection has one
  // at a time: a limit below maxClients only makes clients wait in line for Redis (20 sessions of
  // smtp-source were accepted 2-10% faster with it at maxClients).
  const transport =
    queue instanceof EmlApiQueueTransport
      ? queue
      : new EmlApiQueueTransport({ concurrency: Math.min(maxClients, MAX_CONCURRENCY), ...queue });
  return {
    name: 'outbox',
    async deliver(message, _sender, signal) {
      const { spooled } = message;
      const info = await transport.queueContent(
        {
          kind: 'eml',
          envelope: { from: message.envelope.from || false, to: [...message.envelope.to] },
          messageId: message.messageId,
          size: spooled.size,
          requestBytes: emlBodyLength(spooled.size),
          fromDiffers: false,
          open: () => spooled.open(),
          // The relay disposes of the spooled message once deliver() settles.
          dispose: () => Promise.resolve(),
        },
        message.idempotencyKey,
        signal,
      );
      return { id: info.queueId };
    },
    // Redis must answer and keep what is queued (noeviction; AOF as the transport's durability asks).
    ready: async () => {
      await transport.verify();
    },
    readiness: () =>
      outboxRedisReadiness(() => queueRedis(transport.queue), {
        prefix: transport.queue.opts.prefix ?? 'bull',
        queueName: transport.queue.name,
      }).check(),
    close: () => (owned ? transport.close() : Promise.resolve()),
  };
}
