import { AsyncLocalStorage } from 'node:async_hooks';
import type { SpooledMessage } from '../body/message-spool.js';
import { loggerOption, type EmlApiLogger } from '../shared/options-kit.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { outboxFailureReply, serviceFailureReply, type KeyOwner, type SmtpReply } from './smtp-replies.js';
import { emlBodyLength } from '../body/eml-upload-body.js';
import { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import type { EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import { outboxRedisReadiness } from '../queue/redis-settings.js';
import { queueRedis } from '../queue/outbox-admin.js';

/** A message the relay received and checked, ready to leave. */
export interface RelayedMessage {
  /**
   * The message as it is to be uploaded (a `Bcc` field added for the
   * envelope-only recipients), spooled: its header section, its size, and
   * its `{"mail":"<base64>"}` request body (replayable). The relay disposes
   * of the body after {@link MessageDestination.deliver} settles.
   */
  readonly spooled: SpooledMessage;
  /** The `Idempotency-Key` of the send, from the message's identity (see `MessageIdentities`). */
  readonly idempotencyKey: string;
  /** The Message-ID header: the client's, or the one the relay added. */
  readonly messageId: string;
  /** `MAIL FROM` (not used by the service, which sets its own return path) and the `RCPT TO` recipients. */
  readonly envelope: { readonly from: string; readonly to: readonly string[] };
}

/** Who a message is sent for: the client holding the API key, and whose key it is. */
export interface MessageSender {
  readonly client: EmlApiClient;
  readonly owner: KeyOwner;
  /** The `identitySecret` of the key the client sends with: it keys the message's identity. */
  readonly identitySecret: Buffer;
}

/** What a destination answers once it holds the message safely. */
export interface DeliveryReceipt {
  /** The id named in `250 2.0.0 Ok: <id>` and in the log: the service's id, or the outbox's. */
  readonly id: string | undefined;
}

/**
 * Where an accepted message goes. The relay answers `250` only once
 * `deliver` resolves, so a destination resolves only when the message is
 * safe: the service accepted it (direct), or the outbox stored it. What it
 * rejects with is answered with its {@link MessageDestination.reply}.
 */
export interface MessageDestination {
  /** Names the destination in logs, e.g. `service` or `outbox`. */
  readonly name: string;
  deliver(message: RelayedMessage, sender: MessageSender, signal: AbortSignal): Promise<DeliveryReceipt>;
  /** The SMTP reply to a failure of {@link deliver}: what the client needs to know, nothing of the destination's insides. */
  reply(err: unknown, owner: KeyOwner): SmtpReply;
  /** Checks, before the relay listens, that the destination can keep what it is given (the outbox's Redis). */
  ready?(): Promise<void>;
  /** Checks, for `/readyz`, that the destination can keep what it is given now (quietly: probes repeat it). */
  readiness?(): Promise<void>;
  /** Stops the destination, letting deliveries in progress finish. */
  close(): Promise<void>;
}

/**
 * Uploads each message to `POST /v1/send/eml` through the sender's client,
 * through the client's send path: it waits for a connection slot and the
 * pace, is retried where that is safe, and is bounded by `timeouts.total`.
 */
export function directDestination(): MessageDestination {
  return {
    name: 'service',
    async deliver(message, sender, signal) {
      const { result } = await sender.client.send({
        kind: 'eml',
        body: message.spooled.body,
        idempotencyKey: message.idempotencyKey,
        signal,
      });
      return { id: result.id };
    },
    reply: serviceFailureReply,
    close: () => Promise.resolve(),
  };
}

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
 * @param logger the relay's: a transport the relay makes logs there unless its options name a logger, and every
 *   line it logs for a message carries the message's session fields ({@link withMessageLogFields})
 */
export function queueDestination(
  queue: EmlApiQueueTransport | EmlApiQueueTransportOptions,
  maxClients: number,
  logger: EmlApiLogger,
): MessageDestination {
  const owned = !(queue instanceof EmlApiQueueTransport);
  // The transport's `concurrency` (10 by default) bounds how many messages Nodemailer builds at
  // once. A relay's messages are already spooled when they reach it, and each connection has one
  // at a time: a limit below maxClients only makes clients wait in line for Redis (20 sessions of
  // smtp-source were accepted 2-10% faster with it at maxClients).
  const transport =
    queue instanceof EmlApiQueueTransport
      ? queue
      : new EmlApiQueueTransport({
          concurrency: Math.min(maxClients, MAX_CONCURRENCY),
          ...queue,
          logger: queueLogger(queue.logger, logger),
        });
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
    reply: outboxFailureReply,
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

/** The fields of the message being handled (its session, client, login), for the lines its destination logs. */
const messageLogFields = new AsyncLocalStorage<Readonly<Record<string, unknown>>>();

/**
 * Runs `work` (a message's handling) with `fields` added to every line the
 * destination's logger writes meanwhile: the outbox's lines then name the
 * session and the login, as the relay's own do.
 */
export function withMessageLogFields<T>(fields: Readonly<Record<string, unknown>>, work: () => T): T {
  return messageLogFields.run(fields, work);
}

function withSessionFields(logger: EmlApiLogger): EmlApiLogger {
  const level =
    (write: EmlApiLogger['info']): EmlApiLogger['info'] =>
    (meta, message) => {
      const fields = messageLogFields.getStore();
      write.call(logger, fields ? { ...fields, ...meta } : meta, message);
    };
  return { debug: level(logger.debug), info: level(logger.info), warn: level(logger.warn), error: level(logger.error) };
}

/**
 * The logger of a queue the relay makes: the one its options name, else the relay's, with the message's
 * session fields; a value that is no logger is left for the transport to refuse.
 */
function queueLogger(value: unknown, relayLogger: EmlApiLogger): EmlApiQueueTransportOptions['logger'] {
  if (value === undefined) return withSessionFields(relayLogger);
  if (typeof value === 'boolean' || (typeof value === 'object' && value !== null)) {
    return withSessionFields(loggerOption(value));
  }
  return value as EmlApiQueueTransportOptions['logger'];
}
