import { EventEmitter } from 'node:events';
import type { MinimalJob, Worker } from 'bullmq';
import { refuseUnknownKeys, type EmlApiLogger } from '../shared/options-kit.js';
import { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { ContentStore } from './content-store.js';
import { sweepStoredContent } from './content-sweeper.js';
import { OutboxJobRunner, type RunOutcome } from './job-runner.js';
import { JobRecords } from './job-record.js';
import type { OutboxJob, OutboxRecordJob, OutboxJobRecord, OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { queueKey, type QueueLocation } from './queue-location.js';
import {
  loadBullmq,
  type BullmqModule,
  closeOutboxRedis,
  openOutboxRedis,
  type OutboxRedis,
  outboxWaits,
  resolvesWithin,
  withDeadline,
} from './redis-connection.js';
import {
  connectionLost,
  lastConnectionError,
  redisErrorText,
  trackConnectionErrors,
  unreachable,
  watchRefusal,
  withoutArguments,
} from './redis-failure.js';
import { resolveWorkerOptions, type OutboxWorkerOptions } from './worker-options.js';
import { compareKeyChecks, redisPassword, RedisSettingsWatch } from './redis-settings.js';
import { checkWorkerOwner, foreignJob, keyFingerprint, type QueueOwner } from './queue-owner.js';
import { capRateLimitPause } from './outbox-admin.js';
import { endReconnectingBlockingConnection } from './bullmq-internals.js';
import { RedisClock, redisTime, seconds } from './redis-clock.js';
import { OUTBOX_BACKOFF_TYPE, outboxBackoffDelay, type OutboxBackoffOptions } from './retry-schedule.js';
import { WorkerTelemetry } from './worker-telemetry.js';
import type { ReadinessCheck } from '../observability/ops-server.js';

export type { OutboxJob } from './outbox-job.js';

const WORKER_CLOSE_OPTIONS = ['abort'] as const satisfies readonly (keyof NonNullable<
  Parameters<OutboxWorker['close']>[0]
>)[];

/**
 * The events of an {@link OutboxWorker} and their listeners' arguments.
 * @example
 * outbox.on('retrying', (job, err, delayMs) => log.warn({ job: job.id, code: err.code, delayMs }, err.message));
 */
export interface OutboxWorkerEvents {
  /** The service accepted a send. */
  sent: [job: OutboxJob, result: OutboxSendResult];
  /** A send failed for a passing reason and will be tried again in `delayMs`. */
  retrying: [job: OutboxJob, error: EmlApiError, delayMs: number];
  /** A send failed for good (a permanent error, or out of attempts). */
  failed: [job: OutboxJob, error: EmlApiError];
  /** The worker itself failed (Redis unreachable...); logged when nobody listens. */
  error: [error: Error];
  /** Redis keeps queued mail unsafely or its settings cannot be read, or a long queue pause was cut; also logged. */
  warning: [message: string];
}

/**
 * The event methods of {@link OutboxWorker}, typed by {@link OutboxWorkerEvents}.
 * @example
 * outbox.on('failed', (job, err) => log.error({ job: job.id, code: err.code }, err.message));
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- EventEmitter implements them
export interface OutboxWorker {
  on<E extends keyof OutboxWorkerEvents>(event: E, listener: (...args: OutboxWorkerEvents[E]) => void): this;
  once<E extends keyof OutboxWorkerEvents>(event: E, listener: (...args: OutboxWorkerEvents[E]) => void): this;
  off<E extends keyof OutboxWorkerEvents>(event: E, listener: (...args: OutboxWorkerEvents[E]) => void): this;
  addListener<E extends keyof OutboxWorkerEvents>(event: E, listener: (...args: OutboxWorkerEvents[E]) => void): this;
  removeListener<E extends keyof OutboxWorkerEvents>(
    event: E,
    listener: (...args: OutboxWorkerEvents[E]) => void,
  ): this;
  prependListener<E extends keyof OutboxWorkerEvents>(
    event: E,
    listener: (...args: OutboxWorkerEvents[E]) => void,
  ): this;
  prependOnceListener<E extends keyof OutboxWorkerEvents>(
    event: E,
    listener: (...args: OutboxWorkerEvents[E]) => void,
  ): this;
  emit<E extends keyof OutboxWorkerEvents>(event: E, ...args: OutboxWorkerEvents[E]): boolean;
}

/**
 * A running outbox worker: takes jobs from the queue and posts them through the service with each job's idempotency
 * key. Made by {@link startOutboxWorker}; events: {@link OutboxWorkerEvents}.
 * @example
 * const outbox = await startOutboxWorker({ connection, apiKey, baseUrl });
 * outbox.on('sent', (job, result) => metrics.increment('mail.sent'));
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- typed events (interface above)
export class OutboxWorker extends EventEmitter {
  /** The BullMQ worker (pause, resume, events). */
  readonly worker: Worker<OutboxJobData, OutboxSendResult>;
  /** The API client the worker sends through. */
  readonly client: EmlApiClient;
  /** Name of the queue. */
  readonly queueName: string;
  /**
   * Resolves once the worker is connected and Redis keeps what is queued; rejects (`ECONFIG`, the worker then closed)
   * when Redis evicts keys.
   * @example
   * await outbox.started; // settled once startOutboxWorker resolves
   */
  readonly started: Promise<void>;
  readonly #redis: OutboxRedis;
  readonly #content: ContentStore;
  readonly #location: QueueLocation;
  readonly #logger: EmlApiLogger;
  readonly #runner: OutboxJobRunner;
  readonly #maxRetryAfter: number;
  readonly #checks = startChecks();
  readonly #clock: RedisClock;
  readonly #watch: RedisSettingsWatch;
  readonly #keyPrint: string | undefined;
  readonly #waitForRedis: boolean;
  #connectionToldAt = Number.NEGATIVE_INFINITY;
  readonly #keysTold = new Set<string>();
  #owner: QueueOwner | undefined;
  readonly #running = new Set<Promise<unknown>>();
  /** Jobs sent or failed whose outcome BullMQ is still recording (its finish follows the processor). */
  readonly #finishing = new Set<string>();
  readonly #telemetry: WorkerTelemetry;
  #refusals: { refused: Promise<never>; stop(): void }[] = [];
  #forcing = false;
  #handedBack = 0;
  #closing: Promise<void> | undefined;
  /** Aborted by close(): a start still waiting for Redis stops waiting. */
  readonly #closeCalled = new AbortController();
  #sweeper: NodeJS.Timeout | undefined;
  #clockWatch: NodeJS.Timeout | undefined;

  /**
   * Workers are started with {@link startOutboxWorker}, which also waits until the worker is connected.
   * @internal The package's CLI and tests make one directly, to stop it before it has connected.
   * @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid
   */
  constructor(options: OutboxWorkerOptions) {
    super();
    const { http, metrics, ...workerOptions } = options;
    const settings = resolveWorkerOptions(workerOptions);
    const { Worker } = loadBullmq();
    this.client = new EmlApiClient(settings.client);
    this.#location = settings;
    this.#logger = settings.logger;
    this.queueName = settings.queueName;
    this.#maxRetryAfter = settings.maxRetryAfter;
    try {
      this.#telemetry = new WorkerTelemetry({
        http,
        metrics,
        events: this,
        client: this.client,
        redis: () => this.#redis.redis,
        location: settings,
        activeJobs: () => this.#running.size,
        clock: () => this.#clock.problem(),
        stuck: () =>
          this.#closing === undefined && !this.worker.isRunning() ? 'the BullMQ worker stopped taking jobs' : undefined,
        secrets: [options.apiKey, redisPassword(options.connection)].filter((x): x is string => Boolean(x)),
      });
    } catch (err) {
      void this.client.close();
      throw err;
    }
    this.#redis = openOutboxRedis(options.connection, 'worker', settings);
    this.#waitForRedis = settings.waitForRedis;
    const apiKey = settings.client.apiKey;
    this.#keyPrint = typeof apiKey === 'string' && apiKey !== '' ? keyFingerprint(apiKey) : undefined;
    this.#content = new ContentStore(this.#redis.redis, settings, settings.keyring);
    this.#clock = new RedisClock(() => redisTime(this.#redis.redis));
    const me = { account: settings.account, decrypts: settings.keyring !== undefined };
    this.#runner = new OutboxJobRunner({
      content: this.#content,
      records: new JobRecords(this.#redis.redis, settings, this.#logger),
      contentKeyPrefix: settings.contentKeyPrefix,
      logger: this.#logger,
      maxStalls: settings.maxStalls,
      resendWithin: settings.resendWithin,
      client: this.client,
      rateLimit: (ms) => this.worker.rateLimit(ms),
      maxRetryAfter: settings.maxRetryAfter,
      now: () => this.#clock.now(),
      stopping: () => this.#forcing,
      handBack: (job, token, recordFirst) => this.#handBack(job, token, recordFirst),
      foreign: (data, queuedAt) => foreignJob(data, queuedAt, me, this.#owner),
    });
    this.#redis.redis.on('error', (err: Error) => this.#logger.debug({ error: redisErrorText(err) }, 'Redis error'));
    this.#refusals.push(watchRefusal(this.#redis.redis, this.#redis.where));
    trackConnectionErrors(this.#redis.redis);
    const keyring = settings.keyring;
    this.#watch = new RedisSettingsWatch(this.#redis, {
      durability: 'warn',
      location: settings,
      reports: {
        warn: (message) => this.#warn(message),
        // What Redis holds is safer sent than kept in a Redis that may drop it.
        wrong: (message) => {
          this.#logger.error({}, `${message}. Sending goes on; fix it, or queued mail may be lost`);
          this.emit('warning', message);
        },
        fixed: (message) => this.#logger.info({}, message),
      },
      more: async () => {
        // Other bytes under a key id the producers use would fail every job they encrypted.
        if (keyring) await compareKeyChecks(this.#redis.redis, this.#location, keyring);
        const { owner, otherKeys } = await checkWorkerOwner(this.#redis.redis, this.#location, {
          account: settings.account,
          key: this.#keyPrint,
        });
        this.#owner = owner;
        for (const key of otherKeys.filter((k) => !this.#keysTold.has(k))) {
          this.#keysTold.add(key);
          this.#warn(
            `Workers with another API key (fingerprint ${key}) send from queue "${settings.queueName}": if it is ` +
              "another account's (another app on this Redis with the same queue), each sends the other's mail " +
              'through its own account: give each app its own queueName (or prefix). If it is a key of the same ' +
              'account (rotated), name the account on every producer and worker of the queue (account, ' +
              'EML_API_ACCOUNT), and keys rotate without this warning',
          );
        }
      },
    });
    try {
      this.worker = new Worker<OutboxJobData, OutboxSendResult>(
        settings.queueName,
        async (job, token) => {
          const outcome = await this.#track(this.#telemetry.run(job, () => this.#runChecked(job, token)));
          if (outcome.kind !== 'put-back') this.#finishing.add(job.id!);
          if (outcome.kind === 'sent') return outcome.result;
          throw outcome.thrown;
        },
        {
          ...settings.workerOptions,
          connection: this.#redis.redis,
          prefix: settings.prefix,
          concurrency: settings.concurrency,
          limiter: settings.rateLimit,
          settings: {
            // BullMQ asks by the type stored on each job; -1 fails a job that is not the outbox's.
            backoffStrategy: (attemptsMade: number, type?: string, err?: Error, job?: MinimalJob) =>
              type === OUTBOX_BACKOFF_TYPE
                ? outboxBackoffDelay(
                    attemptsMade,
                    job?.opts.backoff as Partial<OutboxBackoffOptions> | undefined,
                    err,
                    Math.random,
                    settings.maxRetryAfter,
                  )
                : -1,
          },
        },
      );
    } catch (err) {
      // Else it keeps the process alive with no worker to close it.
      if (this.#redis.owned) this.#redis.redis.disconnect();
      void this.client.close();
      throw new EmlApiError('ECONFIG', `workerOptions: ${(err as Error).message}`, { cause: err, permanent: true });
    }
    this.worker.on('error', (err) => this.#reportError(err));
    // Its blocking connection is a copy of the client.
    this.#refusals.push(watchRefusal(this.worker, this.#redis.where));
    this.worker.on('stalled', (jobId) =>
      this.#logger.warn(
        { job: jobId },
        'A job was left by a worker that stopped answering: a failed attempt, retried after its backoff',
      ),
    );
    this.worker.on('completed', (job, result) => {
      this.#finishing.delete(job.id!);
      this.#onSent(job, result);
    });
    this.worker.on('failed', (job, err) => {
      if (!job) return;
      this.#finishing.delete(job.id!);
      this.#onFailed(job, err);
    });
    this.started = this.#start();
    if (settings.cleanupInterval > 0) {
      const sweep = () => {
        sweepStoredContent(this.#redis.redis, this.#location).then(
          (removed) => {
            if (removed > 0) this.#logger.info({ removed }, 'Removed stored content no job needs');
          },
          (err: unknown) => this.#logger.warn({ error: (err as Error).message }, 'Could not sweep stored content'),
        );
      };
      // A worker refused at start must not hold the sweep's lock.
      void this.started.then(
        () => {
          if (this.#closing) return;
          this.#sweeper = setInterval(sweep, settings.cleanupInterval);
          this.#sweeper.unref();
          sweep();
        },
        () => undefined,
      );
    }
    this.started.catch((err: Error) => {
      if (!this.#closeCalled.signal.aborted) this.#logger.error({ error: err.message }, 'Outbox worker not started');
    });
  }

  /** Evicting keys is a refusal: the worker closes, handing back any job it took meanwhile. */
  async #start(): Promise<void> {
    // A wrong password keeps the clients retrying for ever.
    const refusal = Promise.race(this.#refusals.map((r) => r.refused));
    refusal.catch(() => undefined);
    const unlessRefused = <T>(step: Promise<T>) => Promise.race([step, refusal]);
    try {
      await unlessRefused(this.#connected());
      await unlessRefused(this.#watch.check());
      await this.#capPause();
      await this.#clock.sync();
      const off = this.#clock.problem();
      if (off) throw new EmlApiError('ECONFIG', off, { permanent: true });
      this.#checks.pass();
      this.#watch.start();
      await this.#telemetry.start();
    } catch (err) {
      // A refusal closes gracefully, so fetched jobs go back now rather than at lock expiry; a failing Redis at once.
      this.#checks.fail();
      if (this.#closeCalled.signal.aborted) throw err;
      const refused = err instanceof EmlApiError && err.code === 'ECONFIG';
      await this.close(refused ? {} : { abort: true }).catch(() => undefined);
      throw err;
    }
  }

  /** Resolves once BullMQ's connections are ready, telling why Redis cannot be reached meanwhile. */
  async #connected(): Promise<void> {
    const { redis, where } = this.#redis;
    const connectMs = this.client.settings.timeouts.connect;
    const since = performance.now();
    const waitFor = this.#waitForRedis
      ? 'waiting for it (waitForRedis)'
      : `giving up after ${seconds(connectMs)} (timeouts.connect)`;
    const why = () => {
      const err = lastConnectionError(redis);
      return err ? unreachable(where, err) : `it has not answered yet (${seconds(performance.now() - since)})`;
    };
    const say = () => this.#warn(`Cannot reach Redis at ${where}: ${why()}; ${waitFor}`);
    let said = false;
    const first = () => {
      if (said) return;
      said = true;
      say();
    };
    redis.on('error', first);
    let ticks = 0;
    const again = setInterval(() => {
      ticks++;
      if (ticks <= 30 || ticks % 30 === 0) {
        said = true;
        say();
      }
    }, 2_000);
    let deadline: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_resolve, reject) => {
      if (this.#waitForRedis) return;
      const message = () =>
        `Could not reach Redis at ${where} within ${seconds(connectMs)} (timeouts.connect): ${why()}. To wait for ` +
        'Redis instead, start the worker with waitForRedis: true (eml-api worker --wait-for-redis)';
      deadline = setTimeout(
        () =>
          reject(new EmlApiError('ECONNECTION', message(), { permanent: false, cause: lastConnectionError(redis) })),
        connectMs,
      );
    });
    late.catch(() => undefined);
    const closeCalled = this.#closeCalled.signal;
    let onClose: (() => void) | undefined;
    const closed = new Promise<never>((_resolve, reject) => {
      onClose = () => reject(new EmlApiError('EABORT', 'the worker was closed before Redis answered'));
      if (closeCalled.aborted) onClose();
      else closeCalled.addEventListener('abort', onClose, { once: true });
    });
    closed.catch(() => undefined);
    try {
      await Promise.race([this.worker.waitUntilReady(), late, closed]);
    } finally {
      closeCalled.removeEventListener('abort', onClose!);
      redis.off('error', first);
      clearInterval(again);
      clearTimeout(deadline);
    }
  }

  /** BullMQ hands over jobs as soon as it is connected, and a worker refused at start must not have run any. */
  async #runChecked(job: OutboxJob, token: string | undefined): Promise<RunOutcome> {
    if (!(await this.#checks.passed)) return this.#handBack(job, token);
    // The monotonic clock misses a suspended machine.
    await this.#clock.now().catch(() => undefined);
    if (this.#clock.problem() !== undefined) {
      this.#stopForClock();
      return this.#handBack(job, token);
    }
    return this.#runner.run(job as OutboxRecordJob, token);
  }

  #stopForClock(): void {
    if (this.#clockWatch || this.#closing) return;
    const problem = this.#clock.problem()!;
    this.#logger.error({}, problem);
    this.emit('warning', problem);
    void this.worker.pause(true).catch(() => undefined);
    this.#clockWatch = setInterval(() => void this.#clockBack(), CLOCK_CHECK_MS);
    this.#clockWatch.unref();
  }

  async #clockBack(): Promise<void> {
    await this.#clock.now().catch(() => undefined);
    if (this.#clock.problem() !== undefined || !this.#clockWatch) return;
    clearInterval(this.#clockWatch);
    this.#clockWatch = undefined;
    if (this.#closing) return;
    this.#logger.info({}, "This machine's clock agrees with Redis's again: taking jobs");
    void this.worker.resume();
  }

  /** A pause longer than this worker's `maxRetryAfter` (set by another worker or by hand) would hold every worker. */
  async #capPause(): Promise<void> {
    const max = this.#maxRetryAfter;
    const was = await capRateLimitPause(this.#redis.redis, queueKey(this.#location, 'limiter'), max);
    if (was === 0) return;
    const message = `Every worker of the queue was paused for ${seconds(was)} more (a Retry-After not capped when it was set): cut to ${seconds(max)} (maxRetryAfter)`;
    this.#logger.warn({ pauseMs: was, maxRetryAfter: max }, message);
    this.emit('warning', message);
  }

  /**
   * Stops the worker: by default it lets the sends in flight finish; with `{ abort: true }` they are aborted and their
   * jobs put back at once.
   * @example
   * process.once('SIGTERM', () => outbox.close());
   */
  close(
    options: {
      /**
       * Abort the sends in flight and put their jobs straight back for another worker (the idempotency key makes a
       * resend deliver once), instead of letting them finish.
       * @default false
       */
      abort?: boolean;
    } = {},
  ): Promise<void> {
    try {
      refuseUnknownKeys(options ?? {}, WORKER_CLOSE_OPTIONS, 'close.');
    } catch (err) {
      return Promise.reject(err);
    }
    this.#telemetry.stopping();
    this.#closeCalled.abort();
    if (options.abort && !this.#forcing) {
      this.#forcing = true;
      void this.client.close({ abort: true });
      // A graceful close waits for Redis to record the sends in flight: for ever while it is unreachable.
      if (this.#closing) this.#closing = this.#cutShort(this.#closing);
    }
    this.#closing ??= this.#close();
    return this.#closing;
  }

  /** After a forced close's time the connections are dropped; a job not put back returns when its lock expires. */
  async #cutShort(graceful: Promise<void>): Promise<void> {
    if (await resolvesWithin(graceful, 2 * outboxWaits.handBack)) return;
    this.#logger.warn({}, 'Redis does not answer: closing the worker without it');
    await withDeadline(this.worker.disconnect(), outboxWaits.quit).catch(() => undefined);
    await this.client.close({ abort: true });
    await this.#telemetry.close();
    await closeOutboxRedis(this.#redis);
  }

  async #close(): Promise<void> {
    if (this.#sweeper) clearInterval(this.#sweeper);
    if (this.#clockWatch) clearInterval(this.#clockWatch);
    this.#watch.stop();
    for (const refusal of this.#refusals) refusal.stop();
    if (this.#forcing) {
      await withDeadline(this.worker.pause(true), outboxWaits.handBack).catch(() => undefined);
      const until = Date.now() + outboxWaits.handBack;
      while (this.#running.size > 0 && Date.now() < until) {
        await withDeadline(Promise.allSettled([...this.#running]), until - Date.now()).catch(() => undefined);
      }
    }
    // BullMQ's graceful close would first wait for its connections: for ever if Redis stays down.
    const nothingToFinish = this.#running.size + this.#finishing.size === 0 && this.#redis.redis.status !== 'ready';
    const force = this.#forcing || nothingToFinish;
    const closing = this.worker.close(force);
    if (force) await closing;
    else {
      await endReconnectingBlockingConnection(this.worker);
      // BullMQ's graceful close also waits for what it asked Redis (a finish that takes the next job, a fetch).
      if (!(await this.#whileRedisAnswers(closing))) {
        this.#logger.warn({}, 'Redis does not answer: closing the worker without it');
        await withDeadline(this.worker.disconnect(), outboxWaits.quit).catch(() => undefined);
      }
    }
    await this.client.close({ abort: this.#forcing });
    await this.#telemetry.close();
    await closeOutboxRedis(this.#redis);
  }

  /** Waits for `done`; false once Redis leaves a PING unanswered with no send of its own in flight or being recorded. */
  async #whileRedisAnswers(done: Promise<unknown>): Promise<boolean> {
    const { quit } = outboxWaits;
    while (!(await resolvesWithin(done, quit))) {
      const inFlight = this.#running.size + this.#finishing.size;
      if (inFlight === 0 && !(await resolvesWithin(this.#redis.redis.ping(), quit))) return false;
    }
    return true;
  }

  /**
   * The worker's health and metrics port (the `http` option), once started.
   * @example
   * const outbox = await startOutboxWorker({ connection, apiKey, baseUrl, http: { port: 0 } });
   * console.log(`http://${outbox.http!.host}:${outbox.http!.port}/readyz`);
   */
  get http(): { readonly port: number; readonly host: string } | undefined {
    const endpoint = this.#telemetry.endpoint;
    return endpoint && { port: endpoint.port, host: endpoint.host };
  }

  /**
   * What `/readyz` checks for this worker.
   * @internal `eml-api worker --processes` serves one port for all processes.
   */
  get readinessChecks(): ReadinessCheck[] {
    return this.#telemetry.checks(true);
  }

  /**
   * Jobs this worker put back unsent by a forced close; `eml-api worker`'s exit code tells it.
   * @example
   * await outbox.close({ abort: true });
   * if (outbox.handedBack > 0) console.log(`${outbox.handedBack} job(s) left to other workers`);
   */
  get handedBack(): number {
    return this.#handedBack;
  }

  /**
   * Jobs this worker is sending now.
   * @example
   * console.log(`${outbox.activeJobs} send(s) in flight`);
   */
  get activeJobs(): number {
    return this.#running.size;
  }

  #track<T>(run: Promise<T>): Promise<T> {
    this.#running.add(run);
    void run.then(
      () => this.#running.delete(run),
      () => this.#running.delete(run),
    );
    return run;
  }

  /**
   * Puts a job back at once instead of at lock expiry; BullMQ 5 lacks `WaitingError`. Only a forced close's count: a
   * job taken while the checks or the clock stop this worker's sends was never begun. Counted before `recordFirst`,
   * which waits for a Redis that may not answer before the close gives up on it.
   */
  async #handBack(job: OutboxJob, token: string | undefined, recordFirst?: () => Promise<void>): Promise<RunOutcome> {
    if (this.#forcing) this.#handedBack++;
    await recordFirst?.();
    const { WaitingError, DelayedError } = loadBullmq() as Omit<BullmqModule, 'WaitingError'> &
      Partial<Pick<BullmqModule, 'WaitingError'>>;
    // With Redis unreachable the job cannot be moved, and its lock expiry returns it instead.
    if (typeof job.moveToWait === 'function') {
      await withDeadline(job.moveToWait(token), outboxWaits.handBack).catch(() => undefined);
    }
    return { kind: 'put-back', reason: 'handed_back', thrown: WaitingError ? new WaitingError() : new DelayedError() };
  }

  #onSent(job: OutboxJob, result: OutboxSendResult): void {
    if ((job.data as Partial<OutboxJobRecord> | undefined)?.sent !== undefined) {
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
    const error = (cause instanceof EmlApiError ? cause : thrown) as EmlApiError;
    if (job.finishedOn) {
      this.#logger.error({ job: job.id, code: error.code }, `Queued message failed: ${error.message}`);
      this.emit('failed', job, error);
      return;
    }
    const message = `Queued message will be retried: ${error.message}`;
    // Every job fails so while the worker points at a wrong host.
    if (answeredByNotTheService(error)) {
      this.#logger.error({ job: job.id, code: error.code, responseCode: error.responseCode }, message);
    } else this.#logger.warn({ job: job.id, delayMs: job.delay }, message);
    this.emit('retrying', job, error, job.delay);
  }

  #warn(message: string): void {
    this.#logger.warn({}, message);
    this.emit('warning', message);
  }

  #reportError(err: Error): void {
    let reported = err;
    if (connectionLost(err)) {
      // Each reconnect fails with one (while starting, the start's warnings say it).
      const now = performance.now();
      if (this.#checks.settled === undefined || now - this.#connectionToldAt < CONNECTION_ERROR_EVERY_MS) return;
      this.#connectionToldAt = now;
      reported = new EmlApiError(
        'ECONNECTION',
        `Lost Redis at ${this.#redis.where}: ${unreachable(this.#redis.where, err)}; the worker waits for it`,
        { permanent: false, cause: err },
      );
    }
    // ioredis's errors carry command arguments, which may hold a job's data.
    if (this.listenerCount('error') > 0) this.emit('error', withoutArguments(reported));
    else this.#logger.error({ error: redisErrorText(reported) }, 'Outbox worker error');
  }
}

const CLOCK_CHECK_MS = 1_000;

const CONNECTION_ERROR_EVERY_MS = 30_000;

/** Whether the start's checks passed; `settled` is undefined until they end. */
function startChecks() {
  let settle!: (passed: boolean) => void;
  let settled: boolean | undefined;
  const passed = new Promise<boolean>((resolve) => (settle = resolve));
  return {
    passed,
    get settled() {
      return settled;
    },
    pass: () => settle((settled = true)),
    fail: () => settle((settled = false)),
  };
}

/** A failed attempt answered with a 2xx is not the service's answer (a wrong baseUrl?). */
function answeredByNotTheService(error: Error): boolean {
  const status = error instanceof EmlApiError ? error.responseCode : undefined;
  return status !== undefined && status >= 200 && status < 300;
}

/**
 * Starts an outbox worker and resolves once it is connected and Redis is checked: it posts each queued job with its
 * idempotency key, `concurrency` at a time. Passing failures retry on the job's schedule; a 429 pauses every worker;
 * permanent ones fail the job. A `maxmemory-policy` other than `noeviction` is refused; no append-only file warns.
 * `signal` stops a start that waits for Redis (`EABORT`).
 * @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid (or an `encryption` key differs from the
 *   producers' under its id), or naming the Redis setting (and the command that fixes it) when Redis would lose mail
 * @example
 * const outbox = await startOutboxWorker({ connection: process.env.REDIS_URL!, apiKey, baseUrl, concurrency: 10 });
 * process.once('SIGTERM', () => outbox.close());
 */
export async function startOutboxWorker(
  options: OutboxWorkerOptions,
  { signal }: { signal?: AbortSignal } = {},
): Promise<OutboxWorker> {
  signal?.throwIfAborted();
  const outbox = new OutboxWorker(options);
  // Until it resolves the worker is not the caller's to close: the signal stops a start that waits for Redis.
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () =>
      reject(new EmlApiError('EABORT', 'the worker was stopped (signal) before it started', { cause: signal?.reason }));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => undefined);
  try {
    await Promise.race([outbox.started, aborted]);
  } catch (err) {
    await outbox.close({ abort: true }).catch(() => undefined);
    throw err;
  } finally {
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
  return outbox;
}
