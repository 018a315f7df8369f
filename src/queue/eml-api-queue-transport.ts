import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Queue } from 'bullmq';
import { startSpan } from '../observability/tracing.js';
import { checkIdempotencyKey, checkGroupId } from '../client/client-input.js';
import { ConcurrencyLimiter } from '../http/requester.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { loggerOption, type EmlApiLogger } from '../shared/options-kit.js';
import { VERSION } from '../shared/version.js';
import { type BuildThreads, buildMessage } from '../transport/build-message.js';
import { BuildThreadPool } from '../transport/build-threads/pool.js';
import { sendRouteOf, type SendRoute, type JsonRoute, jsonSendFromMail } from '../transport/json-send-from-mail.js';
import type { MailEnvelope, NodemailerMail } from '../transport/nodemailer-types.js';
import type { SpoolSettings } from '../body/message-spool.js';
import { toGroupEmailRequest, toStandardEmailRequest } from '../client/eml-api-client.js';
import { outboxJobId, type OutboxJobData, type OutboxSendResult } from './outbox-job.js';
import { type EmlApiQueueTransportOptions, resolveQueueTransportOptions } from './queue-transport-options.js';
import { OutboxProducer, type OutboxQueuedMessageInfo, type OutboxMessage } from './outbox-producer.js';

/**
 * The event of {@link EmlApiQueueTransport}: `'idle'` when a send would start at once again (Nodemailer's pool).
 * @example
 * transport.on('idle', () => console.log('ready for more'));
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- EventEmitter implements them
export interface EmlApiQueueTransport {
  on(event: 'idle', listener: (...args: unknown[]) => void): this;
  once(event: 'idle', listener: (...args: unknown[]) => void): this;
  off(event: 'idle', listener: (...args: unknown[]) => void): this;
  addListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  removeListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  prependListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  prependOnceListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  emit(event: 'idle'): boolean;
}

/**
 * Nodemailer transport that queues messages in Redis instead of sending them: `sendMail` resolves once Redis has
 * stored the message, as a relay answers `250` once it is on disk. Workers ({@link startOutboxWorker}, the CLI) send
 * them; messages are built and checked exactly as {@link EmlApiTransport} builds them. Holds no API key.
 * @example
 * const transporter = nodemailer.createTransport(new EmlApiQueueTransport({ connection: process.env.REDIS_URL! }));
 * const info = await transporter.sendMail({ from: 'shop@example.com', to: 'ann@example.net', subject: 'Hi', text: 'Hello', idempotencyKey: 'welcome-ann' });
 * console.log(info.response); // '250 Queued as welcome-ann'
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- typed events (interface above)
export class EmlApiQueueTransport extends EventEmitter {
  /** Transport name, used by Nodemailer in logs. */
  readonly name = 'EmlApiQueueTransport';
  /** Package version, used by Nodemailer in logs. */
  readonly version = VERSION;
  /** `sendMail({ signal })` aborts a send until its job is stored (`EABORT`). */
  readonly supportsAbortSignal = true;
  /** The producer this transport stores through: give it to the relay's `queue`, or `enqueue()` other messages. */
  readonly producer: OutboxProducer;
  /** The BullMQ queue jobs are added to: counts, jobs and events through BullMQ's own API. */
  readonly queue: Queue<OutboxJobData, OutboxSendResult>;
  /** Name of the queue. */
  readonly queueName: string;
  readonly #logger: EmlApiLogger;
  readonly #spool: SpoolSettings;
  readonly #limiter: ConcurrencyLimiter;
  readonly #threads: BuildThreads | undefined;
  readonly #inflight = new Set<Promise<unknown>>();
  #closed = false;
  #closing: Promise<void> | undefined;

  /** @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid */
  constructor(options: EmlApiQueueTransportOptions) {
    super();
    const settings = resolveQueueTransportOptions(options);
    this.producer = new OutboxProducer(settings.producer);
    this.queue = this.producer.queue;
    this.queueName = this.producer.queueName;
    this.#logger = loggerOption(options.logger);
    this.#spool = settings.spool;
    const { buildThreads } = settings;
    const logger = this.#logger;
    this.#threads = buildThreads > 0 ? { pool: new BuildThreadPool(buildThreads, logger), logger } : undefined;
    this.#limiter = new ConcurrencyLimiter(settings.concurrency, () => {
      if (this.isIdle()) this.emit('idle');
    });
  }

  /** Queues one message; called by Nodemailer's `sendMail`. The callback is called exactly once. */
  readonly send = (
    mail: NodemailerMail,
    callback: (err: Error | null, info?: OutboxQueuedMessageInfo) => void,
  ): void => {
    let queued: Promise<OutboxQueuedMessageInfo>;
    try {
      queued = this.#send(mail);
    } catch (err) {
      queued = Promise.reject(err);
    }
    queued.then(
      (info) => callback(null, info),
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))),
    );
  };

  /**
   * Checks that Redis answers and keeps what is queued (see {@link OutboxProducer.verify}); a Promise without callback.
   * @throws {EmlApiError} `ECONNECTION` when Redis cannot be reached; `ECONFIG` when Redis would lose queued mail
   * @example
   * await transporter.verify(); // true
   */
  readonly verify: {
    (): Promise<true>;
    (callback: (err: Error | null, success?: true) => void): void;
  } = ((callback?: (err: Error | null, success?: true) => void): Promise<true> | void => {
    const promise = this.producer.verify();
    if (typeof callback !== 'function') return promise;
    promise.then(
      (ok) => callback(null, ok),
      (err: Error) => callback(err),
    );
  }) as EmlApiQueueTransport['verify'];

  /**
   * Stops the transport: new sends fail with `ECONNECTION`, sends made are stored, then the connection closes (one you
   * passed in is left open) and the build threads end.
   * @example
   * await transporter.close();
   */
  readonly close = (callback?: (err?: Error | null) => void): Promise<void> => {
    this.#closed = true;
    this.#closing ??= (async () => {
      while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
      await this.producer.close();
      await this.#threads?.pool.close();
    })();
    if (typeof callback === 'function') {
      this.#closing.then(
        () => callback(null),
        (err: Error) => callback(err),
      );
    }
    return this.#closing;
  };

  /** Whether a send would start at once (fewer than `concurrency` building or storing). */
  readonly isIdle = (): boolean => !this.#closed && this.#limiter.hasFreeSlot;

  #send(mail: NodemailerMail): Promise<OutboxQueuedMessageInfo> {
    if (this.#closed) {
      throw new EmlApiError('ECONNECTION', 'The transport is closed; create a new one to queue more mail', {
        permanent: true,
      });
    }
    const data = mail.data as Record<string, unknown>;
    const route = sendRouteOf(data);
    const idempotencyKey = checkIdempotencyKey(data.idempotencyKey) ?? randomUUID();
    const signal = signalOf(mail);
    // The job carries the span's context, so the worker's span continues the trace.
    const span = startSpan('eml-api.queue', {
      kind: 'producer',
      attributes: {
        'eml_api.component': 'producer',
        'messaging.system': 'bullmq',
        'messaging.destination.name': this.queue.name,
      },
    });
    const run = this.#limiter
      .run(
        () => span.run(() => this.#enqueue(mail, route, idempotencyKey, signal ?? new AbortController().signal)),
        signal,
      )
      .catch((err: unknown) => {
        if (signal?.aborted && !(err instanceof EmlApiError)) {
          throw new EmlApiError('EABORT', 'sendMail was aborted before the message was queued: nothing was stored', {
            cause: err,
            permanent: true,
            idempotencyKey,
            queueId: outboxJobId(idempotencyKey),
          });
        }
        throw err;
      });
    run.then(
      (info) => {
        span.set({ 'messaging.message.id': info.queueId, 'eml_api.duplicate': info.duplicate });
        span.end();
      },
      (err: unknown) => {
        span.fail(err);
        span.end();
      },
    );
    this.#inflight.add(run);
    void run.finally(() => this.#inflight.delete(run)).catch(() => undefined);
    return run;
  }

  async #enqueue(
    mail: NodemailerMail,
    route: SendRoute,
    idempotencyKey: string,
    signal: AbortSignal,
  ): Promise<OutboxQueuedMessageInfo> {
    const built = await buildQueuedMessage(
      mail,
      route,
      this.#spool,
      signal,
      this.#threads,
      this.producer.maxMessageSize,
    );
    try {
      if (built.fromDiffers) {
        this.#logger.info(
          { envelopeFrom: built.message.envelope.from },
          'Envelope sender differs from From; the service sets its own return path, so the envelope sender is not used',
        );
      }
      return await this.producer.enqueue({ ...built.message, idempotencyKey }, { signal });
    } finally {
      await built.dispose();
    }
  }
}

/** A Nodemailer message built to be queued: the exact bytes every attempt will post. */
interface BuiltMessage {
  message: OutboxMessage & { size: number };
  fromDiffers: boolean;
  dispose(): Promise<void>;
}

/**
 * Builds a send's content exactly as {@link EmlApiTransport} would post it, with the same checks (an EML, or the JSON
 * request body of a group or tracked send), so that every attempt sends the same request under the same key.
 * @param maxMessageSize the most bytes an EML may have: its build stops as it passes them @default Infinity
 */
async function buildQueuedMessage(
  mail: NodemailerMail,
  route: SendRoute,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads: BuildThreads | undefined,
  maxMessageSize: number,
): Promise<BuiltMessage> {
  if (route.kind !== 'eml') return buildJsonMessage(mail, route, signal);
  const limit = {
    bytes: maxMessageSize,
    error: () =>
      new EmlApiError(
        'EMESSAGE',
        `The message is over maxMessageSize (${(maxMessageSize / 1024 / 1024).toFixed(1)} MiB): its build stopped there, not queued, nothing was stored`,
        { permanent: true },
      ),
  };
  const built = await buildMessage(mail, spool, signal, threads, null, limit);
  const { spooled } = built;
  if (spooled.size === 0) {
    await spooled.body.dispose();
    throw new EmlApiError('EMESSAGE', 'sendMail() got an empty message', { permanent: true });
  }
  return {
    message: {
      envelope: built.envelope,
      messageId: built.messageId,
      size: spooled.size,
      content: spooled.bytes ?? spooled.open(),
    },
    fromDiffers: built.fromDiffers,
    dispose: () => spooled.body.dispose(),
  };
}

async function buildJsonMessage(mail: NodemailerMail, route: JsonRoute, signal: AbortSignal): Promise<BuiltMessage> {
  if (route.kind === 'group') checkGroupId(route.groupId, 'sendMail: group');
  const input = await jsonSendFromMail(mail, route, signal);
  let json: Buffer;
  let envelope: MailEnvelope;
  if (route.kind === 'group') {
    const body = toGroupEmailRequest(
      { from: input.from, subject: input.subject, textContent: input.textContent },
      'sendMail',
    );
    json = Buffer.from(JSON.stringify(body));
    envelope = { from: body.from.email, to: [] };
  } else {
    const body = toStandardEmailRequest(input, 'sendMail');
    json = Buffer.from(JSON.stringify(body));
    envelope = { from: body.from.email, to: body.to.map((a) => a.email) };
  }
  return {
    message: {
      kind: route.kind,
      ...(route.kind === 'group' ? { group: route.groupId } : {}),
      envelope,
      size: json.length,
      content: json,
    },
    fromDiffers: false,
    dispose: () => Promise.resolve(),
  };
}

function signalOf(mail: NodemailerMail): AbortSignal | undefined {
  const signal = (mail.data as { signal?: unknown }).signal;
  return signal instanceof AbortSignal ? signal : undefined;
}

export type { OutboxQueuedMessageInfo } from './outbox-producer.js';
