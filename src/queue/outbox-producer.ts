import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Queue } from 'bullmq';
import { activeTraceCarrier } from '../observability/tracing.js';
import { emlBodyLength } from '../body/eml-upload-body.js';
import { checkGroupId, checkIdempotencyKey, inputError } from '../client/client-input.js';
import { ConcurrencyLimiter } from '../http/requester.js';
import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import type { SendKind } from '../protocol/api-types.js';
import { findForbiddenCharacter } from '../protocol/message-format.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import { ContentStore, storedLength } from './content-store.js';
import {
  addJob,
  finishedByWorker,
  settleDuplicate,
  waitForReplicas,
  type AddedState,
  type DuplicateSettlement,
} from './add-job.js';
import {
  outboxJobId,
  recordQueue,
  SEND_KINDS,
  type OutboxJobRecord,
  type OutboxJobData,
  type OutboxSendResult,
} from './outbox-job.js';
import {
  loadBullmq,
  closeOutboxRedis,
  openOutboxRedis,
  type OutboxRedis,
  outboxWaits,
  withDeadline,
} from './redis-connection.js';
import {
  type OutboxProducerOptions,
  resolveProducerOptions,
  type ResolvedProducerOptions,
} from './queue-transport-options.js';
import { commandFate, redisFailure, type StoredSend, trackConnectionErrors, watchRefusal } from './redis-failure.js';
import { RedisSettingsWatch, registerKeyChecks } from './redis-settings.js';
import { checkProducerOwner } from './queue-owner.js';
import { queueKey } from './queue-location.js';

/**
 * A message for {@link OutboxProducer.enqueue}: the exact bytes every attempt posts.
 * @example
 * const message: OutboxMessage = {
 *   content: fs.readFileSync('welcome.eml'),
 *   envelope: { from: 'shop@example.com', to: ['ann@example.net'] },
 *   idempotencyKey: 'welcome-ann',
 * };
 */
export interface OutboxMessage {
  /** The EML for `kind` `'eml'`, else the endpoint's JSON request body. A stream is read once, as it is stored. */
  content: Uint8Array | Readable;
  /**
   * Needed for a stream; the message is refused when the stream holds another number of bytes.
   * @default content.length
   */
  size?: number;
  /** As reported (`info.envelope`, `info.accepted`, `eml-api queue status`). */
  envelope: { from: string | false; to: readonly string[] };
  /** @default '' */
  messageId?: string;
  /**
   * The `Idempotency-Key` of every attempt and the job's id: a key queued already is stored once.
   * @default a new UUID
   */
  idempotencyKey?: string;
  /** @default 'eml' */
  kind?: SendKind;
  /** The group of a group send. */
  group?: string;
}

/**
 * What a queued send resolves with: the fields Nodemailer's SMTP transport gives.
 * @example
 * const info = (await transporter.sendMail(message)) as OutboxQueuedMessageInfo;
 * console.log(info.response); // '250 Queued as order-1042'
 */
export interface OutboxQueuedMessageInfo {
  /** None for a group send, whose members are the recipients. */
  envelope: MailEnvelope;
  /** '' for group and tracked sends: the service gives their copies theirs. */
  messageId: string;
  /** Every envelope recipient: the queue takes a message whole. */
  accepted: string[];
  /** Always empty. */
  rejected: string[];
  /** Always empty. */
  pending: string[];
  /** `250 Queued as <queueId>`. */
  response: string;
  /** The idempotency key, escaped where BullMQ needs it. */
  queueId: string;
  /** The `Idempotency-Key` every attempt of this send carries. */
  idempotencyKey: string;
  /** The group of a group send. */
  group?: string;
  /** A job with this key was already queued: nothing was stored, the fields describe that job. */
  duplicate: boolean;
  /**
   * Set when this key's job had failed and this call put it back: `'replaced'` with this message (no attempt of it can
   * have been accepted), `'retried'` with its own bytes (the service refuses other bytes under the key). Parked: never.
   */
  requeued?: 'replaced' | 'retried';
}

/**
 * The producer side of the outbox: stores messages in Redis for the workers. A message is acknowledged only once Redis
 * (and, with `replicas`, its replicas) holds it whole, in settings that keep it; a key queued already is stored once.
 * @example
 * const producer = new OutboxProducer({ connection: process.env.REDIS_URL! });
 * const info = await producer.enqueue({
 *   content: eml,
 *   envelope: { from: 'shop@example.com', to: ['ann@example.net'] },
 *   idempotencyKey: 'welcome-ann',
 * });
 * console.log(info.response); // '250 Queued as welcome-ann'
 * await producer.close();
 */
export class OutboxProducer {
  /** Counts, jobs and events through BullMQ's own API. */
  readonly queue: Queue<OutboxJobData, OutboxSendResult>;
  /** Name of the queue. */
  readonly queueName: string;
  /** In bytes (`maxMessageSize`). */
  readonly maxMessageSize: number;
  readonly #settings: ResolvedProducerOptions;
  readonly #redis: OutboxRedis;
  readonly #content: ContentStore;
  readonly #limiter: ConcurrencyLimiter;
  readonly #inflight = new Set<Promise<unknown>>();
  readonly #refusal: { refused: Promise<never>; stop(): void };
  readonly #watch: RedisSettingsWatch;
  #closed = false;
  #closing: Promise<void> | undefined;

  /** @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid */
  constructor(options: OutboxProducerOptions) {
    const settings = resolveProducerOptions(options);
    this.#settings = settings;
    const { Queue } = loadBullmq();
    this.#redis = openOutboxRedis(options.connection, 'producer', settings, 'connection', settings.storeTimeout);
    this.#refusal = watchRefusal(this.#redis.redis, this.#redis.where);
    trackConnectionErrors(this.#redis.redis);
    const { logger: log, keyring } = settings;
    this.#content = new ContentStore(this.#redis.redis, settings, keyring);
    this.#watch = new RedisSettingsWatch(this.#redis, {
      durability: settings.durability,
      verified: settings.durabilityVerified,
      location: settings,
      reports: {
        warn: (message) => log.warn({}, message),
        wrong: (message) => log.error({}, `${message}. Sends are refused until it is fixed`),
        fixed: (message) => log.info({}, message),
      },
      more: async () => {
        if (keyring) await registerKeyChecks(this.#redis.redis, settings, keyring);
        await checkProducerOwner(this.#redis.redis, settings, { account: settings.account, encrypts: !!keyring });
      },
    });
    this.queueName = settings.queueName;
    this.maxMessageSize = settings.maxMessageSize;
    this.#limiter = new ConcurrencyLimiter(settings.concurrency);
    this.queue = new Queue<OutboxJobData, OutboxSendResult>(this.queueName, {
      connection: this.#redis.redis,
      prefix: settings.prefix,
    });
    // An 'error' event without a listener ends the process; Redis errors reach the sends anyway.
    this.queue.on('error', (err: Error) => log.warn({ error: err.message }, 'Redis error (queue)'));
    this.#redis.redis.on('error', (err: Error) => log.debug({ error: err.message }, 'Redis error'));
  }

  /**
   * Stores a message for the workers; resolves once Redis holds it whole, in settings that keep it (the `250`).
   * @param options `signal` stops the store until the job is added, waiting for a turn included
   * @throws {EmlApiError} `EMESSAGE` for a message that cannot be queued (over `maxMessageSize`, a bad field, a key
   *   whose failed job waits for a person); `ECONNECTION` or `ETIMEDOUT` when Redis fails, with `idempotencyKey`,
   *   `queueId` and, when it may be stored all the same, `mayHaveBeenAccepted`; `ECONFIG` when Redis would lose it
   * @example
   * const envelope = { from: 'shop@example.com', to: ['ann@example.net'] };
   * const info = await transport.producer.enqueue({ content: eml, envelope, idempotencyKey: `order-${order.id}` });
   */
  enqueue(message: OutboxMessage, { signal }: { signal?: AbortSignal } = {}): Promise<OutboxQueuedMessageInfo> {
    // In the caller's context: the job carries the trace it was queued in.
    const trace = activeTraceCarrier();
    const run = (async () => {
      try {
        if (this.#closed) {
          throw new EmlApiError('ECONNECTION', 'The producer is closed; create a new one to queue more mail', {
            permanent: true,
          });
        }
        const checked = checkMessage(message);
        const stop = signal ?? new AbortController().signal;
        return await this.#limiter.run(() => this.#storeChecked(checked, stop, trace), stop);
      } finally {
        // A stream not read to its end holds its file open until destroyed.
        const content = (message as { content?: unknown } | null)?.content;
        if (content instanceof Readable && !content.readableEnded) content.destroy();
      }
    })();
    this.#inflight.add(run);
    void run.finally(() => this.#inflight.delete(run)).catch(() => undefined);
    return run;
  }

  /**
   * Checks that Redis answers and keeps what is queued (`noeviction`, the `durability` persistence).
   * @throws {EmlApiError} `ECONNECTION` when Redis cannot be reached; `ECONFIG` naming the Redis setting (and the
   *   command that fixes it) when Redis would lose queued mail
   * @example
   * const producer = new OutboxProducer({ connection });
   * await producer.verify(); // true
   */
  async verify(): Promise<true> {
    const pinged = withDeadline(this.#redis.redis.ping(), this.#settings.storeTimeout);
    try {
      await Promise.race([pinged, this.#refusal.refused]);
    } catch (err) {
      throw redisFailure(err, `Could not reach Redis at ${this.#redis.where}`, false, undefined, this.#redis);
    }
    this.#watch.start();
    await this.#checkSettings(() => this.#watch.check(), this.#settings.storeTimeout);
    return true;
  }

  /**
   * Stops the producer: new messages are refused with `ECONNECTION`, those being stored finish (a connection you passed
   * in is left open).
   * @example
   * const producer = new OutboxProducer({ connection });
   * await producer.close();
   */
  close(): Promise<void> {
    this.#closed = true;
    this.#closing ??= (async () => {
      while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
      await withDeadline(this.queue.close(), outboxWaits.quit).catch(() => undefined);
      this.#refusal.stop();
      this.#watch.stop();
      await closeOutboxRedis(this.#redis);
    })();
    return this.#closing;
  }

  async #storeChecked(
    message: CheckedMessage,
    signal: AbortSignal,
    trace: OutboxJobRecord['trace'],
  ): Promise<OutboxQueuedMessageInfo> {
    const { maxMessageSize: limit, storeTimeout, logger } = this.#settings;
    // A JSON send may be as large as a Base64-encoded EML of the limit.
    if (message.kind === 'eml' ? message.size > limit : message.size > emlBodyLength(limit)) {
      const what =
        message.kind === 'eml'
          ? `The message is ${mib(message.size)}, over maxMessageSize (${mib(limit)})`
          : `The request body is ${mib(message.size)}, over the upload of a message of maxMessageSize (${mib(limit)})`;
      throw new EmlApiError('EMESSAGE', `${what}: not queued, nothing was stored`, {
        permanent: true,
        responseCode: 413,
      });
    }
    const deadline = Date.now() + storeTimeout;
    if (!this.#watch.confirmed) await this.#checkSettings(() => this.#watch.confirm(), storeTimeout);
    signal.throwIfAborted();
    const info = await this.#store(message, signal, deadline, trace);
    logger.info(
      {
        queueId: info.queueId,
        messageId: info.messageId,
        bytes: message.size,
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

  /** Content first: a job never points at content not fully stored. */
  async #store(
    message: CheckedMessage,
    signal: AbortSignal,
    deadline: number,
    trace: OutboxJobRecord['trace'],
  ): Promise<OutboxQueuedMessageInfo> {
    const { redis, where } = this.#redis;
    const { idempotencyKey } = message;
    const jobId = outboxJobId(idempotencyKey);
    // Attached to every error: the caller can queue it again safely and look the job up.
    const send: StoredSend = { idempotencyKey, queueId: jobId };
    const contentKey = this.#content.newKey(jobId);
    const left = () => Math.max(1, deadline - Date.now());
    const clear = {
      envelope: message.envelope,
      messageId: message.messageId,
      kind: message.kind,
      group: message.group,
    };
    const data = {
      kind: message.kind,
      ...(message.group === undefined ? {} : { group: message.group }),
      contentKey,
      size: message.size,
      envelope: message.envelope,
      messageId: message.messageId,
      idempotencyKey,
      ...(this.#settings.account === undefined ? {} : { account: this.#settings.account }),
      ...(trace ? { trace } : {}),
    } as OutboxJobRecord;
    const writing = new AbortController();
    const inline = this.#content.fitsInline(message.size);
    try {
      if (inline) {
        const { inline: bytes, ...written } = await this.#content.sealInline(contentKey, message.content, message);
        Object.assign(data, this.#content.jobFields(contentKey, written, clear), { inline: bytes });
      } else {
        const written = await withDeadline(
          this.#content.write(contentKey, message.content, {
            size: message.size,
            holdMs: this.#settings.storeTimeout,
            signal: writing.signal,
          }),
          left(),
        );
        Object.assign(data, this.#content.jobFields(contentKey, written, clear));
      }
    } catch (err) {
      // The writes may still be going on: the discard's tombstone fails every one to come.
      writing.abort();
      void this.#content.discard(contentKey).catch(() => undefined);
      throw redisFailure(err, `Could not store the message in Redis at ${where}`, false, send, this.#redis);
    }
    if (signal.aborted) {
      void this.#content.discard(contentKey).catch(() => undefined);
      signal.throwIfAborted();
    }
    const storedSize = inline ? undefined : storedLength(data);
    const json = inline ? inlineJson(data) : undefined;
    let settled: DuplicateSettlement = { kind: 'gone' };
    let state: AddedState | undefined;
    let replicas: number | undefined;
    let unconfirmed: { error: unknown } | undefined;
    try {
      // A job with this id decides what this send does; removed in between, it is added again.
      for (let tries = 0; settled.kind === 'gone' && tries < 3; tries++) {
        const job = {
          name: message.kind,
          data,
          json,
          options: this.#settings.jobOptions,
          jobId,
          contentKey,
          replicas: this.#settings.replicas,
        };
        const added = await withDeadline(addJob(recordQueue(this.queue), job), left());
        if (added.kind === 'unconfirmed') {
          unconfirmed = added;
          break;
        }
        ({ state, replicas } = added);
        settled = state.ours
          ? { kind: 'new' }
          : await withDeadline(settleDuplicate(recordQueue(this.queue), redis, jobId, data, state, storedSize), left());
      }
    } catch (err) {
      throw await this.#addFailure(err, jobId, contentKey, !inline, left(), send);
    }
    const queueing = `Could not queue the message in Redis at ${where}`;
    if (unconfirmed) throw redisFailure(unconfirmed.error, queueing, true, send, this.#redis);
    switch (settled.kind) {
      case 'gone':
        throw redisFailure(new Error('the job was removed as it was added, three times'), queueing, true, send);
      case 'lost':
        void this.#content.discard(contentKey).catch(() => undefined);
        throw this.#lost(send);
      case 'refused':
        void this.#content.release(jobId, contentKey).catch(() => undefined);
        throw settled.error;
      case 'put-back-failed':
        throw this.#putBackFailure(settled.cause, send);
      case 'duplicate':
      case 'retried':
        // Never content the job points at (checked in the same step); a clean-up left undone is the sweeper's.
        if (!inline) void this.#content.release(jobId, contentKey).catch(() => undefined);
        break;
      case 'replaced':
        if (settled.removeContent !== undefined) {
          void this.#content.release(jobId, settled.removeContent).catch(() => undefined);
        }
        break;
      case 'new':
        // Acknowledged only when the content is whole too.
        if (storedSize !== undefined && state!.storedLength !== storedSize && !finishedByWorker(state!)) {
          await this.#lostOnAdd(jobId, contentKey, send, left());
        }
    }
    // A job put back (retried, replaced) wrote more since the add's WAIT.
    await this.#confirmReplicas(
      settled.kind === 'new' || settled.kind === 'duplicate' ? replicas : undefined,
      { jobId, queuedAt: state!.queuedAt, holds: JSON.stringify(contentKey) },
      send,
      left(),
    );
    await this.#confirmSettings(send, left());
    const requeued = settled.kind === 'retried' || settled.kind === 'replaced' ? settled.kind : undefined;
    if (settled.kind === 'duplicate' || settled.kind === 'retried') {
      return queuedMessageInfo(this.#content.reveal(settled.data), jobId, true, requeued);
    }
    return queuedMessageInfo(
      { ...data, envelope: message.envelope, messageId: message.messageId },
      jobId,
      false,
      requeued,
    );
  }

  /** A refused password ends the check with its reason instead of at the deadline. */
  async #checkSettings(check: () => Promise<void>, ms: number): Promise<void> {
    try {
      await Promise.race([this.#refusal.refused, withDeadline(check(), ms)]);
    } catch (err) {
      const doing = `Could not read the settings of Redis at ${this.#redis.where}`;
      throw redisFailure(err, doing, false, undefined, this.#redis);
    }
  }

  /** A Redis that restarted into settings that lose mail has the message, but no `250`. */
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
   * A refusal (`NOPERM`, `OOM`, `READONLY`...) means the add never ran; a cluster that gave up re-routing may have run
   * an earlier try: refused only once the content is withdrawn. Anything else may have landed: `mayHaveBeenAccepted`.
   */
  async #addFailure(
    err: unknown,
    jobId: string,
    contentKey: string,
    stored: boolean,
    ms: number,
    send: StoredSend,
  ): Promise<EmlApiError> {
    const doing = `Could not queue the message in Redis at ${this.#redis.where}`;
    const fate = commandFate(err, this.#redis.cluster);
    if (fate === 'unknown') return redisFailure(err, doing, true, send, this.#redis);
    const withdrawn = await withDeadline(this.#content.withdraw(jobId, contentKey, stored), ms).then(
      (outcome) => outcome === 'withdrawn',
      // A refusal is still certain (the sweeper removes the content); a re-routing is not.
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

  /** The job may be back or still failed, so never a `250`; queueing again with the key finishes the put-back. */
  #putBackFailure(cause: unknown, send: StoredSend): EmlApiError {
    const failure = redisFailure(cause, `Could not reach Redis at ${this.#redis.where}`, false, send, this.#redis);
    return new EmlApiError(
      failure.code === 'ETIMEDOUT' ? 'ETIMEDOUT' : 'ECONNECTION',
      `The job queued under idempotencyKey ${JSON.stringify(send.idempotencyKey)} had failed, and could not be put ` +
        `back in the queue (${failure.message}): it may be back, or still failed and never sent. Queueing it again ` +
        'with the same idempotencyKey (err.idempotencyKey) finishes putting it back',
      { ...errorDetails(failure), permanent: false, mayHaveBeenAccepted: true, ...send },
    );
  }

  /** With `replicas`, rejects unless that many replicas confirmed every write of the message: `mayHaveBeenAccepted`. */
  async #confirmReplicas(
    confirmed: number | undefined,
    job: { jobId: string; queuedAt: string | null; holds: string },
    send: StoredSend,
    ms: number,
  ): Promise<void> {
    const { replicas } = this.#settings;
    if (!replicas) return;
    if (confirmed === undefined) {
      const check = {
        ...job,
        jobKey: queueKey(this.#settings, job.jobId),
        failedKey: queueKey(this.#settings, 'failed'),
      };
      try {
        confirmed = await withDeadline(waitForReplicas(this.#redis.redis, replicas, check), ms);
      } catch (err) {
        const doing = `Could not queue the message in Redis at ${this.#redis.where}`;
        throw redisFailure(err, doing, true, send, this.#redis);
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
   * Content not whole right after the add, and no worker finished the job: Redis lost data (a restart without AOF, a
   * failover) and a resent add re-created the job alone, which is removed and the send refused.
   */
  async #lostOnAdd(jobId: string, contentKey: string, send: StoredSend, ms: number): Promise<never> {
    const removed = async () => {
      await this.#content.discard(contentKey);
      await this.queue.remove(jobId);
    };
    await withDeadline(removed(), ms).catch(() => undefined);
    throw this.#lost(send);
  }

  #lost(send: StoredSend): EmlApiError {
    return new EmlApiError(
      'ECONNECTION',
      `Redis at ${this.#redis.where} lost the message as it was queued (it restarted or failed over): ` +
        'not queued, nothing will be sent; queue it again',
      { permanent: false, mayHaveBeenAccepted: false, ...send },
    );
  }
}

interface CheckedMessage {
  content: Buffer | Readable;
  size: number;
  envelope: MailEnvelope;
  messageId: string;
  idempotencyKey: string;
  kind: SendKind;
  group: string | undefined;
}

/** @throws {EmlApiError} `EMESSAGE` naming the field */
function checkMessage(message: OutboxMessage): CheckedMessage {
  if (typeof message !== 'object' || message === null) throw inputError('enqueue: expected a message object');
  const { content, envelope } = message;
  const kind = message.kind ?? 'eml';
  if (!SEND_KINDS.includes(kind)) throw inputError(`enqueue: kind must be one of ${SEND_KINDS.join(', ')}`);
  if (kind === 'group') checkGroupId(message.group, 'enqueue: group');
  else if (message.group !== undefined) throw inputError(`enqueue: group is for kind 'group' only`);
  const stream = content instanceof Readable;
  if (!stream && !(content instanceof Uint8Array))
    throw inputError('enqueue: content must be a Buffer, Uint8Array or Readable');
  const size = message.size ?? (stream ? undefined : content.length);
  if (!Number.isSafeInteger(size) || size! < 0)
    throw inputError('enqueue: size must be the bytes of content (needed for a stream)');
  if (!stream && size !== content.length)
    throw inputError(`enqueue: size is ${size}, but content is ${content.length} bytes`);
  const to = (envelope as { to?: unknown } | null)?.to;
  const from = (envelope as { from?: unknown } | null)?.from;
  if (!Array.isArray(to) || !to.every((a) => typeof a === 'string') || (from !== false && typeof from !== 'string')) {
    throw inputError('enqueue: envelope must be { from: string | false, to: string[] }');
  }
  if (message.messageId !== undefined && typeof message.messageId !== 'string') {
    throw inputError('enqueue: messageId must be a string');
  }
  // They are shown by `eml-api queue`, logs and metrics, and read by Redis's scripts.
  const texts: [string, unknown][] = [
    ['envelope.from', from],
    ...(to as string[]).map((address, i): [string, string] => [`envelope.to[${i}]`, address]),
    ['messageId', message.messageId],
  ];
  for (const [field, text] of texts) {
    const bad = typeof text === 'string' ? findForbiddenCharacter(text) : undefined;
    if (bad) throw inputError(`enqueue: ${field} holds ${bad.what}`);
  }
  return {
    content: stream ? content : Buffer.from(content.buffer, content.byteOffset, content.byteLength),
    size: size!,
    envelope: { from, to: [...(to as string[])] },
    messageId: message.messageId ?? '',
    idempotencyKey: checkIdempotencyKey(message.idempotencyKey) ?? randomUUID(),
    kind,
    group: message.group,
  };
}

/** `JSON.stringify(data)`, but the Base64 content (never escaped) is not scanned for characters to escape. */
function inlineJson(data: OutboxJobRecord): string {
  const { inline, ...rest } = data;
  return inline === undefined ? JSON.stringify(data) : `${JSON.stringify(rest).slice(0, -1)},"inline":"${inline}"}`;
}

function mib(n: number): string {
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function queuedMessageInfo(
  fields: { envelope: MailEnvelope; messageId: string; group?: string | undefined; idempotencyKey: string },
  queueId: string,
  duplicate: boolean,
  requeued?: 'replaced' | 'retried',
): OutboxQueuedMessageInfo {
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
