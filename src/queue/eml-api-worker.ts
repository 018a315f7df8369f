import { EventEmitter } from 'node:events';
import type { Job, MinimalJob, Worker } from 'bullmq';
import { clientInternals } from '../client/client-internals.js';
import { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/logger.js';
import { sweepStoredContent } from './content-sweeper.js';
import {
  explainFailure,
  failureAction,
  failureOutcome,
  mayHaveBeenAccepted,
  outboxJobError,
  parkedAfterStalls,
  parkedAfterWindow,
  stallFailure,
} from './job-failure.js';
import { recordSent } from './job-record.js';
import { readOutboxJobData, type OutboxJobData, type OutboxSendResult } from './outbox-job.js';
import type { QueueLocation } from './queue-location.js';
import { loadBullmq, type BullmqModule } from './queue-peers.js';
import { closeOutboxRedis, openOutboxRedis, QUIT_WAIT, type OutboxRedis } from './redis-connection.js';
import { withDeadline } from './deadline.js';
import { resolveWorkerOptions } from './resolve-worker-options.js';
import { outboxBackoffDelay, RETRY_PRIORITY, type OutboxBackoffOptions } from './retry-schedule.js';
import { sendOutboxJob } from './send-outbox-job.js';
import type { EmlApiWorkerOptions } from './worker-options.js';

/**
 * A job of the outbox, as BullMQ hands it to workers and events.
 * @example
 * outbox.on('failed', (job: OutboxJob, err) => console.log(job.id, job.data.envelope.to, err.message));
 */
export type OutboxJob = Job<OutboxJobData, OutboxSendResult>;

/**
 * Options of {@link EmlApiWorker.close}.
 * @example
 * await outbox.close({ force: true });
 */
export interface WorkerCloseOptions {
  /**
   * `false`: stop taking jobs and let the sends in flight finish. `true`:
   * abort them and put their jobs straight back in the queue for another
   * worker (the service's idempotency window makes a resend deliver once).
   * @default false
   */
  force?: boolean;
}

/** How long a forced close waits for aborted sends to hand their jobs back, in ms. */
const HAND_BACK_WAIT = 5_000;

/**
 * A running outbox worker: takes jobs from the queue and posts them through
 * the service with each job's idempotency key. Made by {@link startEmlApiWorker}.
 *
 * Events:
 * - `'sent'` `(job, result: OutboxSendResult)`: the service accepted a send
 * - `'retrying'` `(job, error: EmlApiError, delayMs)`: a send failed for a passing reason and will be tried again
 * - `'failed'` `(job, error: EmlApiError)`: a send failed for good (a permanent error, or out of attempts)
 * - `'error'` `(error)`: the worker itself failed (Redis unreachable...); logged when nobody listens
 *
 * @example
 * const outbox = await startEmlApiWorker({ connection, apiKey, baseUrl });
 * outbox.on('sent', (job, result) => metrics.increment('mail.sent'));
 * outbox.on('failed', (job, err) => log.error({ job: job.id, code: err.code }, err.message));
 * process.once('SIGTERM', () => outbox.close());
 */
export class EmlApiWorker extends EventEmitter {
  /** The BullMQ worker (pause, resume, events: BullMQ's own API). */
  readonly worker: Worker<OutboxJobData, OutboxSendResult>;
  /** The API client the worker sends through. */
  readonly client: EmlApiClient;
  /** Name of the queue. */
  readonly queueName: string;
  readonly #redis: OutboxRedis;
  readonly #location: QueueLocation;
  readonly #logger: EmlApiLogger;
  readonly #maxStalls: number;
  readonly #resendWithin: number;
  readonly #running = new Set<Promise<unknown>>();
  /** Jobs run again after they were sent: they complete without a `'sent'` event. */
  readonly #alreadySent = new WeakSet<OutboxJob>();
  #forcing = false;
  #closing: Promise<void> | undefined;
  #sweeper: NodeJS.Timeout | undefined;

  /**
   * Prefer {@link startEmlApiWorker}, which also waits until the worker is connected.
   * @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid
   */
  constructor(options: EmlApiWorkerOptions) {
    super();
    const settings = resolveWorkerOptions(options);
    const { Worker } = loadBullmq();
    this.client = new EmlApiClient(settings.client);
    this.#location = settings;
    this.#logger = settings.logger;
    this.#maxStalls = settings.maxStalls;
    this.#resendWithin = settings.resendWithin;
    this.queueName = settings.queueName;
    this.#redis = openOutboxRedis(options.connection, 'worker');
    this.#redis.redis.on('error', (err: Error) => this.#logger.debug({ error: err.message }, 'Redis error'));
    try {
      this.worker = new Worker<OutboxJobData, OutboxSendResult>(
        settings.queueName,
        (job, token) => this.#track(this.#process(job, token)),
        {
          ...settings.workerOptions,
          connection: this.#redis.redis,
          prefix: settings.prefix,
          concurrency: settings.concurrency,
          limiter: settings.limiter,
          settings: {
            backoffStrategy: (attemptsMade: number, _type?: string, err?: Error, job?: MinimalJob) =>
              outboxBackoffDelay(attemptsMade, job?.opts.backoff as Partial<OutboxBackoffOptions> | undefined, err),
          },
        },
      );
    } catch (err) {
      // BullMQ refuses some workerOptions in its constructor: the connection opened for it
      // would otherwise stay open (and keep the process alive) with no worker to close it.
      if (this.#redis.owned) this.#redis.redis.disconnect();
      void this.client.close();
      throw new EmlApiError('ECONFIG', `workerOptions: ${(err as Error).message}`, { cause: err, permanent: true });
    }
    this.worker.on('error', (err) => this.#reportError(err));
    this.worker.on('stalled', (jobId) =>
      this.#logger.warn(
        { job: jobId },
        'A job was left by a worker that stopped answering: a failed attempt, retried after its backoff',
      ),
    );
    this.worker.on('completed', (job, result) => this.#onSent(job, result));
    this.worker.on('failed', (job, err) => {
      if (job) this.#onFailed(job, err);
    });
    if (settings.cleanupInterval > 0) {
      const sweep = () => {
        sweepStoredContent(this.#redis.redis, this.#location).then(
          (removed) => {
            if (removed > 0) this.#logger.info({ removed }, 'Removed stored content no job needs');
          },
          (err: unknown) => this.#logger.warn({ error: (err as Error).message }, 'Could not sweep stored content'),
        );
      };
      this.#sweeper = setInterval(sweep, settings.cleanupInterval);
      this.#sweeper.unref();
      void this.worker.waitUntilReady().then(sweep, () => undefined);
    }
  }

  /**
   * Stops the worker. By default it takes no new jobs, lets the sends in
   * flight finish, then closes its connections. With `{ force: true }` the
   * sends in flight are aborted and their jobs put back in the queue at once,
   * for another worker.
   *
   * @example
   * process.once('SIGTERM', () => outbox.close());
   */
  close(options: WorkerCloseOptions = {}): Promise<void> {
    if (options.force && !this.#forcing) {
      this.#forcing = true;
      void this.client.close({ abort: true });
      // A graceful close under way waits for BullMQ, which waits for Redis to record the sends
      // in flight: for ever while Redis is unreachable. The forced close bounds that wait.
      if (this.#closing) this.#closing = this.#cutShort(this.#closing);
    }
    this.#closing ??= this.#close();
    return this.#closing;
  }

  /**
   * Ends a graceful close that a forced one overtook: it gets the time a
   * forced close takes, then the connections are dropped (BullMQ's with
   * them; a job it could not put back returns to the queue when its lock
   * expires, as after a crash).
   */
  async #cutShort(graceful: Promise<void>): Promise<void> {
    const ended = await withDeadline(graceful, 2 * HAND_BACK_WAIT).then(
      () => true,
      () => false,
    );
    if (ended) return;
    this.#logger.warn({}, 'Redis does not answer: closing the worker without it');
    await withDeadline(this.worker.disconnect(), QUIT_WAIT).catch(() => undefined);
    await this.client.close({ abort: true });
    await closeOutboxRedis(this.#redis);
  }

  async #close(): Promise<void> {
    if (this.#sweeper) clearInterval(this.#sweeper);
    if (this.#forcing) {
      // Stop taking jobs, then wait (briefly) for the aborted sends to put their jobs back
      // while the worker still holds its connections; jobs fetched meanwhile are put back too.
      await withDeadline(this.worker.pause(true), HAND_BACK_WAIT).catch(() => undefined);
      const until = Date.now() + HAND_BACK_WAIT;
      while (this.#running.size > 0 && Date.now() < until) {
        await withDeadline(Promise.allSettled([...this.#running]), until - Date.now()).catch(() => undefined);
      }
    }
    // With Redis unreachable and no send in flight there is nothing to finish, and BullMQ's
    // graceful close would first wait for its connections to come up: for ever if Redis stays down.
    const nothingToFinish = this.#running.size === 0 && this.#redis.redis.status !== 'ready';
    await this.worker.close(this.#forcing || nothingToFinish);
    await this.client.close({ abort: this.#forcing });
    await closeOutboxRedis(this.#redis);
  }

  #track<T>(run: Promise<T>): Promise<T> {
    this.#running.add(run);
    void run.then(
      () => this.#running.delete(run),
      () => this.#running.delete(run),
    );
    return run;
  }

  async #process(job: OutboxJob, token: string | undefined): Promise<OutboxSendResult> {
    if (this.#forcing) return this.#handBack(job, token);
    let data: OutboxJobData;
    try {
      data = readOutboxJobData(job.data, this.#location.contentKeyPrefix);
    } catch (err) {
      return this.#fail(job, token, err, undefined);
    }
    if (data.sent) {
      // Sent already (a dashboard's "Retry" on a completed job, or a worker that died before completing it):
      // complete again with the service's first answer; posting again could only fail for want of content.
      this.#alreadySent.add(job);
      return data.sent;
    }
    // BullMQ counts stalls (a worker that stopped while it held the job) and moves the job straight back
    // to the queue; the outbox makes each one a failed attempt, retried after its backoff, up to maxStalls.
    const stalled = (job.stalledCounter ?? 0) - (data.stallsSeen ?? 0);
    if (stalled > 0) return this.#failStalled(job, data, stalled);
    if (data.resendUntil !== undefined && Date.now() >= data.resendUntil) return this.#parkAfterWindow(job, data);
    const startedAt = Date.now();
    try {
      const result = await sendOutboxJob(clientInternals(this.client).requester, this.#redis.redis, data);
      await recordSent(this.#redis.redis, this.#jobKey(job), data, result).catch((err: unknown) =>
        // The send stands; without the record a re-run posts again and the service answers from the first send.
        this.#logger.warn({ job: job.id, error: (err as Error).message }, 'Could not record the send on the job'),
      );
      return result;
    } catch (err) {
      return this.#fail(job, token, err, data, startedAt);
    }
  }

  /** Ends a run whose attempt failed: records why on the job and tells BullMQ what to do with it. */
  async #fail(
    job: OutboxJob,
    token: string | undefined,
    err: unknown,
    data: OutboxJobData | undefined,
    startedAt?: number,
  ): Promise<never> {
    if (this.#forcing) return this.#handBack(job, token);
    const action = failureAction(err);
    if (action.kind === 'pause') {
      // BullMQ's rate limit key pauses every worker of the queue; the job goes back without using an attempt.
      await this.worker.rateLimit(action.ms);
      this.#logger.warn({ job: job.id, pauseMs: action.ms }, 'The service is rate limiting: queue paused');
      await this.#record(job, { lastError: outboxJobError(err, job.attemptsMade + 1, false) });
      throw loadBullmq().Worker.RateLimitError();
    }
    const attempt = job.attemptsMade + 1;
    const outcome = failureOutcome(err, attempt, job.opts.attempts ?? 1);
    const reported = explainFailure(err, outcome);
    const permanent = action.kind === 'fail';
    // The service refused these very bytes: nothing can send them, so they leave Redis now, not in 7 days.
    const refused = outcome.kind === 'refused' && data !== undefined;
    const window = data && startedAt !== undefined && mayHaveBeenAccepted(err) ? this.#window(data, startedAt) : {};
    await this.#record(
      job,
      {
        lastError: outboxJobError(reported, attempt, permanent),
        ...window,
        ...(refused ? { contentRemoved: true } : {}),
      },
      { dropContent: refused ? data.contentKey : undefined, retry: outcome.kind === 'retry' },
    );
    throw permanent ? unrecoverable(reported) : reported;
  }

  /**
   * The window of a send that may have been accepted, from its first such
   * attempt (`startedAt` when this is the first): how long the service
   * answers a resend from it, and so until when the job may be sent again.
   */
  #window(data: OutboxJobData, startedAt: number): Pick<OutboxJobData, 'possiblyAcceptedAt' | 'resendUntil'> {
    const possiblyAcceptedAt = data.possiblyAcceptedAt ?? startedAt;
    return { possiblyAcceptedAt, resendUntil: possiblyAcceptedAt + this.#resendWithin };
  }

  /** Parks a job whose send may have been accepted, now that the service may have forgotten its key. */
  async #parkAfterWindow(job: OutboxJob, data: OutboxJobData): Promise<never> {
    const parked = parkedAfterWindow(data.possiblyAcceptedAt ?? data.resendUntil!, String(job.id));
    this.#logger.error({ job: job.id }, parked.message);
    const lastError = { ...outboxJobError(parked, job.attemptsMade + 1, true), parked: 'idempotency-window' as const };
    await this.#record(job, { lastError });
    throw unrecoverable(parked);
  }

  /**
   * Ends a run that found its job stalled: the worker of an earlier run stopped
   * while it sent it. That attempt failed, its outcome unknown: retried after
   * its backoff like any other, or, past `maxStalls`, parked for a person.
   */
  async #failStalled(job: OutboxJob, data: OutboxJobData, stalled: number): Promise<never> {
    const stalls = (data.stalls ?? 0) + stalled;
    // The stalled attempt started after the job was queued and after the attempt before it failed: the
    // later of the two is the earliest it can have been accepted (early is the safe side for the window).
    const earliest = Math.max(job.timestamp, Date.parse(data.lastError?.at ?? '') || 0);
    const counted = { stalls, stallsSeen: job.stalledCounter, ...this.#window(data, earliest) };
    const attempt = job.attemptsMade + 1;
    if (stalls > this.#maxStalls) {
      const parked = parkedAfterStalls(stalls, String(job.id));
      this.#logger.error({ job: job.id, stalls }, parked.message);
      await this.#record(job, {
        ...counted,
        lastError: { ...outboxJobError(parked, attempt, true), parked: 'stalls' },
      });
      throw unrecoverable(parked);
    }
    const err = stallFailure(stalled);
    const outcome = failureOutcome(err, attempt, job.opts.attempts ?? 1);
    const reported = explainFailure(err, outcome);
    await this.#record(
      job,
      { ...counted, lastError: outboxJobError(reported, attempt, false) },
      { retry: outcome.kind === 'retry' },
    );
    throw reported;
  }

  /** The Redis key of a job's hash. */
  #jobKey(job: OutboxJob): string {
    return `${this.#location.prefix}:${this.#location.queueName}:${job.id}`;
  }

  /**
   * Puts a job of a forced close back in the queue at once, instead of waiting
   * for its lock to expire, then tells BullMQ the job was moved (so it neither
   * fails nor completes it). BullMQ releases before 5.x's WaitingError and
   * `moveToWait` leave the job to the lock expiry instead.
   */
  async #handBack(job: OutboxJob, token: string | undefined): Promise<never> {
    const { WaitingError, DelayedError } = loadBullmq() as Omit<BullmqModule, 'WaitingError'> &
      Partial<Pick<BullmqModule, 'WaitingError'>>;
    // Bounded: with Redis unreachable the job cannot be moved, and its lock expiry returns it instead.
    if (typeof job.moveToWait === 'function') {
      await withDeadline(job.moveToWait(token), HAND_BACK_WAIT).catch(() => undefined);
    }
    throw WaitingError ? new WaitingError() : new DelayedError();
  }

  /**
   * Keeps the record of a failed attempt on the job (its error, for `queue
   * status` and dashboards), removes its content when `dropContent` names it,
   * and, when it is to be tried again, gives it the priority of retries,
   * which workers take before new messages.
   */
  async #record(
    job: OutboxJob,
    fields: Partial<OutboxJobData>,
    { dropContent, retry = false }: { dropContent?: string | undefined; retry?: boolean } = {},
  ): Promise<void> {
    try {
      await Promise.all([
        job.updateData({ ...job.data, ...fields }),
        dropContent === undefined ? undefined : this.#redis.redis.del(dropContent),
        // Read by BullMQ when it promotes the job from delayed: priority 0 puts it in the wait list, taken first.
        retry && job.priority !== RETRY_PRIORITY ? job.changePriority({ priority: RETRY_PRIORITY }) : undefined,
      ]);
    } catch (err) {
      this.#logger.warn({ job: job.id, error: (err as Error).message }, 'Could not record the error on the job');
    }
  }

  #onSent(job: OutboxJob, result: OutboxSendResult): void {
    // The content was deleted with the record of the send (recordSent); the sweeper catches what a failed record left.
    if (this.#alreadySent.delete(job)) {
      this.#logger.info(
        { job: job.id, id: result?.id },
        'Queued message was sent already: completed again, nothing posted',
      );
      return;
    }
    this.#logger.info({ job: job.id, id: result?.id, response: result?.response }, 'Queued message sent');
    this.emit('sent', job, result);
  }

  #onFailed(job: OutboxJob, thrown: Error): void {
    const cause = (thrown as { cause?: unknown }).cause;
    const error = cause instanceof EmlApiError ? cause : thrown;
    if (job.finishedOn) {
      this.#logger.error({ job: job.id, code: (error as EmlApiError).code }, `Queued message failed: ${error.message}`);
      this.emit('failed', job, error);
    } else {
      this.#logger.warn({ job: job.id, delayMs: job.delay }, `Queued message will be retried: ${error.message}`);
      this.emit('retrying', job, error, job.delay);
    }
  }

  #reportError(err: Error): void {
    if (this.listenerCount('error') > 0) this.emit('error', err);
    else this.#logger.error({ error: err.message }, 'Outbox worker error');
  }
}

/** BullMQ's error for a job that fails at once, whatever attempts it has left; the outbox's error is its cause. */
function unrecoverable(err: Error): Error {
  const wrapped = new (loadBullmq().UnrecoverableError)(err.message);
  Object.defineProperty(wrapped, 'cause', { value: err, enumerable: false });
  return wrapped;
}

/**
 * Starts a worker of the outbox: it takes the jobs {@link EmlApiQueueTransport}
 * queued and posts each through the service with the job's idempotency key,
 * `concurrency` at a time. Passing failures (unreachable, timeouts, 5xx) are
 * retried on the job's schedule; a 429 pauses every worker for its
 * `Retry-After`; permanent failures (4xx, `EAUTH`, `EMESSAGE`) fail the job at
 * once, keeping the error on it. Resolves once the worker is connected.
 *
 * @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid
 * @example
 * import { startEmlApiWorker } from 'nodemailer-eml-api/queue';
 *
 * const outbox = await startEmlApiWorker({
 *   connection: process.env.REDIS_URL!,
 *   apiKey: process.env.EML_API_KEY!,
 *   baseUrl: 'https://api.mail.example.com',
 *   concurrency: 10,
 *   limiter: { max: 50, duration: 1000 },
 * });
 * process.once('SIGTERM', () => outbox.close());
 */
export async function startEmlApiWorker(options: EmlApiWorkerOptions): Promise<EmlApiWorker> {
  const outbox = new EmlApiWorker(options);
  try {
    await outbox.worker.waitUntilReady();
  } catch (err) {
    await outbox.close({ force: true }).catch(() => undefined);
    throw err;
  }
  return outbox;
}
