import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Readable } from 'node:stream';
import type { Queue } from 'bullmq';
import { activeTraceCarrier, bindToActiveContext, startSpan } from '../observability/tracing.js';
import { emlBodyLength } from '../body/eml-upload-body.js';
import { checkIdempotencyKey, checkGroupId } from '../client/client-input.js';
import { ConcurrencyLimiter } from '../http/requester.js';
import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import { VERSION } from '../shared/version.js';
import { type BuildThreads, buildMessage } from '../transport/build-message.js';
import { BuildThreadPool } from '../transport/build-threads/pool.js';
import { sendRouteOf, type SendRoute, type JsonRoute, jsonSendFromMail } from '../transport/json-send-from-mail.js';
import type { NodemailerMail, MailEnvelope } from '../transport/nodemailer-types.js';
import { ContentStore } from './content-store.js';
import {
  addJob,
  AfterTheAdd,
  PutBackFailed,
  finishedByWorker,
  waitForReplicas,
  type AddedJob,
  settleDuplicate,
  type DuplicateSettlement,
} from './add-job.js';
import { outboxJobId, type OutboxJobData, type OutboxSendResult } from './outbox-job.js';
import {
  loadBullmq,
  closeOutboxRedis,
  openOutboxRedis,
  type OutboxRedis,
  outboxWaits,
  withDeadline,
} from './redis-connection.js';
import {
  type EmlApiQueueTransportOptions,
  resolveQueueTransportOptions,
  type ResolvedQueueTransportOptions,
} from './queue-transport-options.js';
import { commandFate, redisFailure, type StoredSend, trackConnectionErrors, watchRefusal } from './redis-failure.js';
import { RedisSettingsWatch, registerKeyChecks } from './redis-settings.js';
import { checkProducerOwner } from './queue-owner.js';
import type { SpoolSettings } from '../body/message-spool.js';
import { toGroupEmailRequest, toStandardEmailRequest } from '../client/eml-api-client.js';
import type { SendKind } from '../protocol/api-types.js';

/**
 * Nodemailer's callback of `transport.send`.
 * @example
 * transport.send(mail, (err, info) => console.log(err ?? info?.response));
 */
export type QueueSendCallback = (err: Error | null, info?: EmlApiQueuedMessageInfo) => void;

/**
 * The event of {@link EmlApiQueueTransport}: `'idle'` when a send would start at once again (Nodemailer's pool contract).
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
 * Nodemailer transport that queues messages in Redis (BullMQ) instead of
 * sending them: `sendMail` resolves once Redis has stored the message, like
 * a relay answering `250` once the message is on disk. Workers
 * ({@link startEmlApiWorker}, `eml-api worker`), on any number of machines,
 * send the queued messages through the service, retrying for most of a day (inside the service's idempotency window).
 *
 * Messages are built exactly as {@link EmlApiTransport} builds them (plugins
 * and DKIM applied, Bcc kept) and refused with the same errors before anything
 * is stored. The producer holds no API key.
 *
 * @example
 * import nodemailer from 'nodemailer';
 * import { EmlApiQueueTransport } from 'nodemailer-eml-api/queue';
 *
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
  /** The BullMQ queue jobs are added to: counts, jobs and events through BullMQ's own API. */
  readonly queue: Queue<OutboxJobData, OutboxSendResult>;
  /** Name of the queue. */
  readonly queueName: string;
  readonly #settings: ResolvedQueueTransportOptions;
  readonly #redis: OutboxRedis;
  readonly #content: ContentStore;
  readonly #limiter: ConcurrencyLimiter;
  /** The build threads (`buildThreads`), none started until a send needs one. */
  readonly #threads: BuildThreads | undefined;
  readonly #inflight = new Set<Promise<unknown>>();
  /**
   * Redis's refusal of the connection (a wrong password, a cluster connection to a Redis that is not one),
   * watched from the start: the client reports it once, as it connects, and then only retries.
   */
  readonly #refusal: { refused: Promise<never>; stop(): void };
  /** Redis's settings (eviction, persistence) and the queue's keys, checked again after every reconnect. */
  readonly #watch: RedisSettingsWatch;
  #closed = false;
  #closing: Promise<void> | undefined;

  /**
   * @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid
   */
  constructor(options: EmlApiQueueTransportOptions) {
    super();
    this.#settings = resolveQueueTransportOptions(options);
    const { Queue } = loadBullmq();
    this.#redis = openOutboxRedis(
      options.connection,
      'producer',
      this.#settings,
      'connection',
      this.#settings.storeTimeout,
    );
    this.#refusal = watchRefusal(this.#redis.redis, this.#redis.where);
    trackConnectionErrors(this.#redis.redis);
    this.#content = new ContentStore(this.#redis.redis, this.#settings, this.#settings.keyring);
    const { logger: log, keyring } = this.#settings;
    this.#watch = new RedisSettingsWatch(this.#redis, {
      durability: this.#settings.durability,
      verified: this.#settings.durabilityVerified,
      location: this.#settings,
      reports: {
        warn: (message) => log.warn({}, message),
        wrong: (message) => log.error({}, `${message}. Sends are refused until it is fixed`),
        fixed: (message) => log.info({}, message),
      },
      more: async () => {
        // The check value of the key new mail is encrypted with, for workers to compare theirs with (review F10).
        if (keyring) await registerKeyChecks(this.#redis.redis, this.#settings, keyring);
        await checkProducerOwner(this.#redis.redis, this.#settings, {
          account: this.#settings.account,
          encrypts: keyring !== undefined,
        });
      },
    });
    this.queueName = this.#settings.queueName;
    this.queue = new Queue<OutboxJobData, OutboxSendResult>(this.queueName, {
      connection: this.#redis.redis,
      prefix: this.#settings.prefix,
    });
    const logger = this.#settings.logger;
    const { buildThreads } = this.#settings;
    this.#threads = buildThreads > 0 ? { pool: new BuildThreadPool(buildThreads, logger), logger } : undefined;
    // An 'error' event without a listener would end the process; Redis errors reach the sends anyway.
    this.queue.on('error', (err: Error) => logger.warn({ error: err.message }, 'Redis error (queue)'));
    this.#redis.redis.on('error', (err: Error) => logger.debug({ error: err.message }, 'Redis error'));
    this.#limiter = new ConcurrencyLimiter(this.#settings.concurrency, () => {
      if (this.isIdle()) this.emit('idle');
    });
  }

  /**
   * Stores content that is already built as a job, with the same checks and
   * limits as `sendMail` (`maxMessageSize`, `concurrency`, close): the SMTP
   * relay receives a complete message, not a Nodemailer mail. The caller
   * disposes `content`.
   *
   * @internal Package-internal (the relay's outbox); not in the published types.
   */
  queueContent(content: QueuedContent, idempotencyKey: string, signal: AbortSignal): Promise<EmlApiQueuedMessageInfo> {
    return this.#track(
      // In the caller's trace (the relay's span of the message), which the job then carries.
      this.#limiter.run(
        bindToActiveContext(() => this.#storeChecked(content, idempotencyKey, signal)),
        signal,
      ),
    );
  }

  /**
   * Queues one message; called by Nodemailer's `sendMail`. The callback is
   * called exactly once.
   */
  readonly send = (mail: NodemailerMail, callback: QueueSendCallback): void => {
    let called = false;
    let queued: Promise<EmlApiQueuedMessageInfo>;
    try {
      queued = this.#send(mail);
    } catch (err) {
      queued = Promise.reject(err);
    }
    queued.then(
      (info) => {
        if (called) return;
        called = true;
        callback(null, info);
      },
      (err: unknown) => {
        if (called) return;
        called = true;
        callback(err instanceof Error ? err : new Error(String(err)));
      },
    );
  };

  /**
   * Checks that Redis answers (a PING) and keeps what is queued: its
   * `maxmemory-policy` must be `noeviction`, and its persistence what the
   * `durability` option asks (a warning is logged when the append-only file
   * is off). Returns a Promise when called without a callback.
   *
   * @throws {EmlApiError} `ECONNECTION` when Redis cannot be reached; `ECONFIG` naming the
   *   Redis setting (and the command that fixes it) when Redis would lose queued mail
   * @example
   * await transporter.verify(); // true
   */
  readonly verify: {
    (): Promise<true>;
    (callback: (err: Error | null, success?: true) => void): void;
  } = ((callback?: (err: Error | null, success?: true) => void): Promise<true> | void => {
    const pinged = withDeadline(this.#redis.redis.ping(), this.#settings.storeTimeout);
    const promise = Promise.race([pinged, this.#refusal.refused]).then(
      async () => {
        this.#watch.start();
        await this.#checkSettings(() => this.#watch.check(), this.#settings.storeTimeout);
        return true as const;
      },
      (err: unknown) => {
        throw redisFailure(err, `Could not reach Redis at ${this.#redis.where}`, false, undefined, this.#redis);
      },
    );
    if (typeof callback !== 'function') return promise;
    promise.then(
      (ok) => callback(null, ok),
      (err: Error) => callback(err),
    );
  }) as EmlApiQueueTransport['verify'];

  /**
   * Stops the transport: new sends fail with `ECONNECTION`; sends already
   * made are stored, then the Redis connection is closed (one you passed in
   * is left open) and the build threads end. Returns a Promise; an optional callback is called once.
   *
   * @example
   * await transporter.close();
   */
  readonly close = (callback?: (err?: Error | null) => void): Promise<void> => {
    this.#closed = true;
    this.#closing ??= (async () => {
      while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
      await withDeadline(this.queue.close(), outboxWaits.quit).catch(() => undefined);
      this.#refusal.stop();
      this.#watch.stop();
      await closeOutboxRedis(this.#redis);
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

  #send(mail: NodemailerMail): Promise<EmlApiQueuedMessageInfo> {
    if (this.#closed) {
      throw new EmlApiError('ECONNECTION', 'The transport is closed; create a new one to queue more mail', {
        permanent: true,
      });
    }
    const data = mail.data as Record<string, unknown>;
    const route = sendRouteOf(data);
    const idempotencyKey = checkIdempotencyKey(data.idempotencyKey) ?? randomUUID();
    const signal = signalOf(mail);
    // A span per sendMail that queues; the job carries its context, so the worker's span continues the trace.
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
    return this.#track(run);
  }

  /** Registers a send with close(), which waits for it. */
  #track<T>(run: Promise<T>): Promise<T> {
    if (this.#closed) {
      return Promise.reject(
        new EmlApiError('ECONNECTION', 'The transport is closed; create a new one to queue more mail', {
          permanent: true,
        }),
      );
    }
    this.#inflight.add(run);
    void run.finally(() => this.#inflight.delete(run)).catch(() => undefined);
    return run;
  }

  async #enqueue(
    mail: NodemailerMail,
    route: SendRoute,
    idempotencyKey: string,
    signal: AbortSignal,
  ): Promise<EmlApiQueuedMessageInfo> {
    const settings = this.#settings;
    const content = await prepareQueuedContent(
      mail,
      route,
      settings.spool,
      signal,
      this.#threads,
      settings.maxMessageSize,
    );
    try {
      if (content.fromDiffers) {
        settings.logger.info(
          { envelopeFrom: content.envelope.from },
          'Envelope sender differs from From; the service sets its own return path, so the envelope sender is not used',
        );
      }
      return await this.#storeChecked(content, idempotencyKey, signal);
    } finally {
      await content.dispose();
    }
  }

  /** Checks the size, then stores content that is built. */
  async #storeChecked(
    content: QueuedContent,
    idempotencyKey: string,
    signal: AbortSignal,
  ): Promise<EmlApiQueuedMessageInfo> {
    const settings = this.#settings;
    if (
      content.kind === 'eml'
        ? content.size > settings.maxMessageSize
        : content.requestBytes > emlBodyLength(settings.maxMessageSize)
    ) {
      throw tooLarge(content, settings.maxMessageSize);
    }
    // One deadline for every step with Redis: the checks, the writes, the add and what follows it.
    const deadline = Date.now() + settings.storeTimeout;
    await this.#checkSettings(() => this.#watch.confirm(), settings.storeTimeout);
    signal.throwIfAborted();
    const info = await this.#store(content, idempotencyKey, signal, deadline);
    settings.logger.info(
      {
        queueId: info.queueId,
        messageId: info.messageId,
        bytes: content.size,
        duplicate: info.duplicate,
        requeued: info.requeued,
      },
      info.requeued
        ? `A failed message under this idempotency key was put back (${info.requeued})`
        : info.duplicate
          ? 'Message already queued under this idempotency key'
          : 'Message queued',
    );
    return info;
  }

  /** Stores the content, then the job that points at it: a job never points at content not fully stored. */
  async #store(
    content: QueuedContent,
    idempotencyKey: string,
    signal: AbortSignal,
    deadline: number,
  ): Promise<EmlApiQueuedMessageInfo> {
    const { redis, where } = this.#redis;
    const jobId = outboxJobId(idempotencyKey);
    // On every error of this send: the caller can queue it again safely and look the job up.
    const send: StoredSend = { idempotencyKey, queueId: jobId };
    const contentKey = this.#content.newKey(jobId);
    const left = () => Math.max(1, deadline - Date.now());
    const data: OutboxJobData = {
      v: 1,
      kind: content.kind,
      ...(content.group === undefined ? {} : { group: content.group }),
      contentKey,
      size: content.size,
      envelope: content.envelope,
      messageId: content.messageId,
      idempotencyKey,
      ...(this.#settings.account === undefined ? {} : { account: this.#settings.account }),
      ...traceOfJob(),
    };
    const writing = new AbortController();
    const inline = this.#content.fitsInline(content.size);
    try {
      if (inline) {
        // Small content goes in the job, written with its add (issue 19, item 3).
        const { inline: bytes, ...written } = await this.#content.sealInline(contentKey, content.open(), content);
        Object.assign(data, this.#content.jobFields(contentKey, written, content), { v: 3, inline: bytes });
      } else {
        const written = await withDeadline(
          this.#content.write(contentKey, content.open(), {
            size: content.size,
            holdMs: this.#settings.storeTimeout,
            signal: writing.signal,
          }),
          left(),
        );
        // The SHA-256 a worker checks; encrypted, the key id and the envelope sealed (issue 20, items 1, 11).
        Object.assign(data, this.#content.jobFields(contentKey, written, content));
      }
    } catch (err) {
      // Past the deadline the writes may still be going on (a slow Redis): stop them, and discard
      // what was written. The discard leaves a tombstone on which every write still to come fails
      // (writes are conditional on the stored length), so none can bring the message back with no job.
      writing.abort();
      void this.#content.discard(contentKey).catch(() => undefined);
      throw redisFailure(err, `Could not store the message in Redis at ${where}`, false, send, this.#redis);
    }
    if (signal.aborted) {
      void this.#content.discard(contentKey).catch(() => undefined);
      signal.throwIfAborted();
    }
    let settled: DuplicateSettlement = { kind: 'gone' };
    let added: AddedJob | undefined;
    // What this content must measure under its key (none when it is in the job, which carries it whole).
    const storedSize = inline ? undefined : this.#content.storedSize(data);
    try {
      // A job with this id may be there already: BullMQ then keeps it and ignores this one, and what the
      // call does depends on that job (see duplicate-send.ts). Removed in between, it is added again.
      for (let tries = 0; settled.kind === 'gone' && tries < 3; tries++) {
        const { replicas } = this.#settings;
        const job = { name: content.kind, data, opts: { ...this.#settings.jobOptions, jobId }, contentKey, replicas };
        added = await withDeadline(addJob(this.queue, redis, job), left());
        settled = await withDeadline(settleDuplicate(this.queue, redis, jobId, data, added.state, storedSize), left());
      }
    } catch (err) {
      if (err instanceof EmlApiError) {
        // Refused (a job parked for a person): nothing of this call is kept.
        void this.#content.release(jobId, contentKey).catch(() => undefined);
        throw err;
      }
      if (err instanceof PutBackFailed) throw this.#putBackFailure(err, send);
      throw await this.#addFailure(err, jobId, contentKey, left(), send);
    }
    if (settled.kind === 'gone') {
      throw redisFailure(
        new Error('the job was removed as it was added, three times'),
        `Could not queue the message in Redis at ${where}`,
        true,
        send,
      );
    }
    if (settled.kind === 'lost') {
      // The failed job was left as it was: nothing of this call is kept.
      void this.#content.discard(contentKey).catch(() => undefined);
      throw this.#lost(send);
    }
    // Replicas confirmed the add with it (the pipeline's WAIT); a failed job put back wrote more since.
    const confirmed = settled.kind === 'new' || settled.kind === 'duplicate' ? added : undefined;
    if (settled.kind === 'duplicate' || settled.kind === 'retried') {
      // Never content the job points at (checked in the same step): a misjudged outcome must not remove it.
      // Not awaited: the send is settled, and a clean-up left undone is the sweeper's.
      if (!inline) void this.#content.release(jobId, contentKey).catch(() => undefined);
      await this.#confirmReplicas(confirmed, jobId, send, left());
      await this.#confirmSettings(send, left());
      const stored = this.#content.reveal(settled.data);
      return queuedMessageInfo(stored, jobId, true, settled.kind === 'retried' ? 'retried' : undefined);
    }
    if (settled.kind === 'replaced' && settled.removeContent !== undefined) {
      void this.#content.release(jobId, settled.removeContent).catch(() => undefined);
    }
    // The job points at this content (it was added, or replaced a failed one with it): acknowledged only
    // when the content is whole too, as read with the job right after the add (a replacement checked it
    // in the same step as it set the data). Content in the job came with it, whole (the add is one script).
    if (settled.kind === 'new' && storedSize !== undefined && added!.state.storedLength !== storedSize) {
      await this.#confirmStored(jobId, contentKey, finishedByWorker(added!.state), send, left());
    }
    await this.#confirmReplicas(confirmed, jobId, send, left());
    await this.#confirmSettings(send, left());
    const clear = { ...data, envelope: content.envelope, messageId: content.messageId };
    return queuedMessageInfo(clear, jobId, false, settled.kind === 'replaced' ? 'replaced' : undefined);
  }

  /**
   * Runs a check of Redis's settings within `ms`. A refused password leaves
   * the commands waiting until the deadline (a cluster client retries, saying
   * only "Failed to refresh slots cache."): the refusal, seen in the client's
   * errors, ends it with its reason.
   * @throws {EmlApiError} `ECONFIG` when the settings are wrong; `ECONNECTION`, `ETIMEDOUT`
   */
  async #checkSettings(check: () => Promise<void>, ms: number): Promise<void> {
    try {
      await Promise.race([this.#refusal.refused, withDeadline(check(), ms)]);
    } catch (err) {
      throw redisFailure(
        err,
        `Could not read the settings of Redis at ${this.#redis.where}`,
        false,
        undefined,
        this.#redis,
      );
    }
  }

  /**
   * Before a send is acknowledged: the settings were found right since the
   * connection last (re)connected. A Redis that restarted while the message
   * was stored, into settings that lose mail, has it, but no `250` is given.
   */
  async #confirmSettings(send: StoredSend, ms: number): Promise<void> {
    if (this.#watch.confirmed) return;
    try {
      await this.#checkSettings(() => this.#watch.confirm(), ms);
    } catch (err) {
      const failure = err as EmlApiError;
      throw new EmlApiError(
        failure.code,
        `Redis at ${this.#redis.where} stored the message, but could not be confirmed to keep it: ${failure.message}. ` +
          `Not acknowledged; once Redis is fixed, queueing it again with idempotencyKey ${JSON.stringify(send.idempotencyKey)} ` +
          '(err.idempotencyKey) stores it once',
        { ...errorDetails(failure), mayHaveBeenAccepted: true, ...send },
      );
    }
  }

  /**
   * The error of an add that failed. A refusal from Redis (`NOPERM`, `OOM`,
   * `READONLY`, `NOSCRIPT`, `CROSSSLOT`... see redis-failure.ts) means the add
   * never ran: the content is withdrawn (removed, a tombstone left, unless a
   * job points at it after all) and the send is not accepted. A cluster that
   * gave up re-routing it may have run an earlier try on a master that failed
   * over: the content is withdrawn unless a job points at it, and only then is
   * the send not accepted. Anything else (a timeout, a lost connection) may
   * have landed: `mayHaveBeenAccepted`.
   */
  async #addFailure(
    err: unknown,
    jobId: string,
    contentKey: string,
    ms: number,
    send: StoredSend,
  ): Promise<EmlApiError> {
    const doing = `Could not queue the message in Redis at ${this.#redis.where}`;
    if (err instanceof AfterTheAdd) return redisFailure(err.cause, doing, true, send, this.#redis);
    const fate = commandFate(err, this.#redis.cluster);
    if (fate === 'unknown') return redisFailure(err, doing, true, send, this.#redis);
    const withdrawn = await withDeadline(this.#content.withdraw(jobId, contentKey), ms).then(
      (outcome) => outcome === 'withdrawn',
      // Could not look: a refusal is still certain (the sweeper removes the content); a re-routing is not.
      () => fate === 'refused',
    );
    return redisFailure(
      err,
      withdrawn ? `${doing}, which refused it: not queued, nothing will be sent` : doing,
      !withdrawn,
      send,
      this.#redis,
    );
  }

  /**
   * The error of a failed job under the key that could not be put back
   * (Redis did not answer, or refused): it may be back in the queue or still
   * failed, holding this message (replaced) or its own (retried). Never a
   * `250`: a job left failed is never sent. Queueing again with the same key
   * finishes putting it back. The content this call stored stays: the job
   * may point at it, and the sweeper removes it otherwise.
   */
  #putBackFailure(err: PutBackFailed, send: StoredSend): EmlApiError {
    const failure = redisFailure(err.cause, `Could not reach Redis at ${this.#redis.where}`, false, send, this.#redis);
    return new EmlApiError(
      failure.code === 'ETIMEDOUT' ? 'ETIMEDOUT' : 'ECONNECTION',
      `The job queued under idempotencyKey ${JSON.stringify(send.idempotencyKey)} had failed, and could not be put ` +
        `back in the queue (${failure.message}): it may be back, or still failed and never sent. Queueing it again ` +
        'with the same idempotencyKey (err.idempotencyKey) finishes putting it back',
      { ...errorDetails(failure), permanent: false, mayHaveBeenAccepted: true, ...send },
    );
  }

  /**
   * With `replicas`, rejects unless that many replicas confirmed every write
   * of the message (read from the add's pipeline, or asked now after the
   * writes that put a failed job back). The message is on the master:
   * `mayHaveBeenAccepted`, and queueing it again with the same key stores it
   * once (the job found, or stored anew if a failover lost it).
   */
  async #confirmReplicas(added: AddedJob | undefined, jobId: string, send: StoredSend, ms: number): Promise<void> {
    const { replicas } = this.#settings;
    if (!replicas) return;
    let confirmed = added?.replicas;
    if (confirmed === undefined) {
      try {
        confirmed = await withDeadline(waitForReplicas(this.#redis.redis, this.queue.toKey(jobId), replicas), ms);
      } catch (err) {
        throw redisFailure(
          err,
          `Could not queue the message in Redis at ${this.#redis.where}`,
          true,
          send,
          this.#redis,
        );
      }
    }
    if (confirmed >= replicas.count) return;
    throw new EmlApiError(
      'ETIMEDOUT',
      `Redis at ${this.#redis.where} stored the message, but ${confirmed} of the ${replicas.count} replica(s) asked for ` +
        `(replicas.count) confirmed it within ${replicas.timeoutMs} ms: it is queued on the master and will most likely ` +
        `be sent, but a failover before a replica has it would lose it. Queueing it again with idempotencyKey ` +
        `${JSON.stringify(send.idempotencyKey)} (err.idempotencyKey) stores it once`,
      { permanent: false, mayHaveBeenAccepted: true, command: 'WAIT', response: String(confirmed), ...send },
    );
  }

  /**
   * The content under the job's key is not whole, as read with the job right
   * after the add. A worker may have taken the job and finished with it
   * already (`finished`: it recorded the send, which removes the content in
   * the same step, or the service refused it): then the send was queued, and
   * the job stays (review F3). Otherwise Redis lost data since the content
   * was written (a restart without AOF, a failover) and a re-sent add
   * re-created the job alone: the content is discarded (no worker can send
   * the job then: it finds no content and fails it, sending nothing), the job
   * removed, and the send refused, so the app queues it again. BullMQ adds a
   * job with a script of its own, so the read cannot be in the same script
   * as the add; it runs right after it, in the same pipeline.
   */
  async #confirmStored(
    jobId: string,
    contentKey: string,
    finished: boolean,
    send: StoredSend,
    ms: number,
  ): Promise<void> {
    if (finished) return;
    const removed = async () => {
      await this.#content.discard(contentKey);
      await this.queue.remove(jobId);
    };
    await withDeadline(removed(), ms).catch(() => undefined);
    throw this.#lost(send);
  }

  /** The error of a send whose content Redis lost as it was queued. */
  #lost(send: StoredSend): EmlApiError {
    return new EmlApiError(
      'ECONNECTION',
      `Redis at ${this.#redis.where} lost the message as it was queued (it restarted or failed over): ` +
        'not queued, nothing will be sent; queue it again',
      { permanent: false, mayHaveBeenAccepted: false, ...send },
    );
  }
}

function tooLarge(content: QueuedContent, limit: number): EmlApiError {
  const what =
    content.kind === 'eml'
      ? `The message is ${mib(content.size)}, over maxMessageSize (${mib(limit)})`
      : `The request body is ${mib(content.requestBytes)}, over the upload of a message of maxMessageSize (${mib(limit)})`;
  return new EmlApiError('EMESSAGE', `${what}: not queued, nothing was stored`, {
    permanent: true,
  });
}

/** The error of a message found over `maxMessageSize` as it was built: the build stopped there. */
function tooLargeBuilding(limit: number): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The message is over maxMessageSize (${mib(limit)}): its build stopped there, not queued, nothing was stored`,
    { permanent: true },
  );
}

function mib(n: number): string {
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** The AbortSignal of `sendMail({ signal })`, if any. */
/** The trace context a job carries (see `OutboxJobData.trace`), when a span is active. */
function traceOfJob(): Pick<OutboxJobData, 'trace'> {
  const trace = activeTraceCarrier();
  return trace ? { trace } : {};
}

function signalOf(mail: NodemailerMail): AbortSignal | undefined {
  const signal = (mail.data as { signal?: unknown }).signal;
  return signal instanceof AbortSignal ? signal : undefined;
}

/**
 * What a queued send stores: the exact bytes every attempt will post, built
 * and checked once, before anything reaches Redis.
 */
export interface QueuedContent {
  kind: SendKind;
  /** The group of a group send. */
  group?: string;
  envelope: MailEnvelope;
  messageId: string;
  /** Bytes of the content. */
  size: number;
  /** Bytes of the request a worker will make with it (an EML travels Base64-encoded in JSON). */
  requestBytes: number;
  /** Whether the envelope sender differs from From (logged; the service sets its own return path). */
  fromDiffers: boolean;
  /** The content, to store: a stream for a built EML (memory or spool file), bytes for JSON. */
  open(): Readable | Buffer;
  /** Removes the spool file, if any. */
  dispose(): Promise<void>;
}

/**
 * Builds the content of a send exactly as {@link EmlApiTransport} would post
 * it, with the same checks: an EML through `buildMessage` (plugins and DKIM
 * applied, Bcc kept, envelope checked), a group or tracked send as its JSON
 * request body (the normalized content: contents resolved, inline images
 * Base64-encoded, every field checked), so that replaying it later sends the
 * same request, under the same idempotency key, on every attempt.
 *
 * @param route where the message goes (its `group`/`tracking` fields)
 * @param threads build threads to build an EML on (`buildThreads`)
 * @param maxMessageSize the most bytes an EML may have: its build stops as it passes them @default Infinity
 * @throws {EmlApiError} `EENVELOPE` or `EMESSAGE`, as the direct transport; the signal's reason when it aborts
 */
export async function prepareQueuedContent(
  mail: NodemailerMail,
  route: SendRoute,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads?: BuildThreads,
  maxMessageSize = Number.POSITIVE_INFINITY,
): Promise<QueuedContent> {
  if (route.kind !== 'eml') return prepareJson(mail, route, signal);
  const limit = Number.isFinite(maxMessageSize)
    ? { bytes: maxMessageSize, error: () => tooLargeBuilding(maxMessageSize) }
    : undefined;
  const built = await buildMessage(mail, spool, signal, threads, null, limit);
  const { spooled } = built;
  if (spooled.size === 0) {
    await spooled.body.dispose();
    throw new EmlApiError('EMESSAGE', 'sendMail() got an empty message', { permanent: true });
  }
  return {
    kind: 'eml',
    envelope: built.envelope,
    messageId: built.messageId,
    size: spooled.size,
    requestBytes: emlBodyLength(spooled.size),
    fromDiffers: built.fromDiffers,
    open: () => spooled.open(),
    dispose: () => spooled.body.dispose(),
  };
}

async function prepareJson(mail: NodemailerMail, route: JsonRoute, signal: AbortSignal): Promise<QueuedContent> {
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
    kind: route.kind,
    ...(route.kind === 'group' ? { group: route.groupId } : {}),
    envelope,
    messageId: '',
    size: json.length,
    requestBytes: json.length,
    fromDiffers: false,
    open: () => json,
    dispose: () => Promise.resolve(),
  };
}

/**
 * What `sendMail()` resolves with through {@link EmlApiQueueTransport}: the
 * fields Nodemailer's SMTP transport gives, as a relay answers once it has
 * the message on disk. The message is then in Redis; a worker sends it.
 *
 * @example
 * const info = (await transporter.sendMail(message)) as EmlApiQueuedMessageInfo;
 * console.log(info.response); // '250 Queued as order-1042'
 */
export interface EmlApiQueuedMessageInfo {
  /** Sender and recipients (To, Cc and Bcc; none for a group send, whose members are the recipients). */
  envelope: MailEnvelope;
  /** The Message-ID of the stored EML ('' for group and tracked sends, whose copies get theirs from the service). */
  messageId: string;
  /** Every envelope recipient: the queue takes a message as a whole. */
  accepted: string[];
  /** Always empty. */
  rejected: string[];
  /** Always empty. */
  pending: string[];
  /** `250 Queued as <queueId>`. */
  response: string;
  /** The BullMQ job id: the idempotency key, escaped where BullMQ needs it (see {@link outboxJobId}). */
  queueId: string;
  /** The `Idempotency-Key` every attempt of this send carries. */
  idempotencyKey: string;
  /** The group of a group send. */
  group?: string;
  /**
   * `true` when a job with this idempotency key was already queued: nothing
   * new was stored, and the other fields describe the job queued first.
   */
  duplicate: boolean;
  /**
   * Set when the job this idempotency key names had failed and this call put
   * it back in the queue with a fresh retry schedule:
   * - `'replaced'`: with this message (`duplicate: false`). No attempt of the
   *   failed one can have been accepted (the service refused it, or never had
   *   it), so its key is free at the service.
   * - `'retried'`: with its own stored bytes (`duplicate: true`, the fields
   *   describe it). An attempt of it may have been accepted: the service
   *   answers the same bytes under the key from that attempt, and would
   *   refuse other bytes (422 `idempotency_key_reused`).
   * A failed job parked for a person is not put back: `sendMail` rejects.
   */
  requeued?: 'replaced' | 'retried';
}

/**
 * The info of a queued send.
 * @param requeued how a failed job under the key was put back, if it was @default undefined
 */
export function queuedMessageInfo(
  fields: { envelope: MailEnvelope; messageId: string; group?: string | undefined; idempotencyKey: string },
  queueId: string,
  duplicate: boolean,
  requeued?: 'replaced' | 'retried',
): EmlApiQueuedMessageInfo {
  return {
    envelope: { from: fields.envelope.from, to: [...fields.envelope.to] },
    messageId: fields.messageId,
    accepted: [...fields.envelope.to],
    rejected: [],
    pending: [],
    response: `250 Queued as ${queueId}`,
    queueId,
    idempotencyKey: fields.idempotencyKey,
    ...(fields.group === undefined ? {} : { group: fields.group }),
    duplicate,
    ...(requeued === undefined ? {} : { requeued }),
  };
}
