import type { OutboxRedisClient } from './redis-connection.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import type { EmlApiLogger } from '../shared/logger.js';
import {
  contentGoneAfterAttempt,
  explainFailure,
  failureAction,
  failureOutcome,
  mayHaveBeenAccepted,
  outboxJobError,
  parkedAfterStalls,
  parkedAfterWindow,
  stallFailure,
} from './job-failure.js';
import { recordOnJob, recordSent, type JobRecordKeys } from './job-record.js';
import { readOutboxJobData, type OutboxJob, type OutboxJobData, type OutboxSendResult } from './outbox-job.js';
import type { QueueLocation } from './queue-location.js';
import { loadBullmq } from './queue-peers.js';
import { RETRY_PRIORITY } from './retry-schedule.js';
import { sendOutboxJob } from './send-outbox-job.js';
import { isContentMissing, type ContentStore } from './content-store.js';
import { outboxKeys } from './content-keys.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { seconds } from './rate-limit-pause.js';
import { redisFailure } from './redis-failure.js';
import { SoloGate } from './solo-gate.js';

/**
 * What a job runner needs from its worker.
 * @example
 * const runner = new OutboxJobRunner({ redis, location, logger, maxStalls: 5, resendWithin: 23 * 3_600_000, ... });
 */
export interface JobRunnerSettings {
  /** The worker's Redis connection. */
  redis: OutboxRedisClient;
  /** Where the queue's content is, read and removed. */
  content: ContentStore;
  location: QueueLocation;
  logger: EmlApiLogger;
  /** Stalls a job may have and be retried. */
  maxStalls: number;
  /** From a send's first possibly-accepted attempt, how long it may be sent again, in ms. */
  resendWithin: number;
  /** The worker's client (one attempt per job run). */
  client: EmlApiClient;
  /** Pauses every worker of the queue (a 429's `Retry-After`), in ms. */
  rateLimit: (ms: number) => Promise<void>;
  /** The longest `Retry-After` honoured (a 429's pause, a 5xx's wait), in ms. */
  maxRetryAfter: number;
  /** Redis's time, in ms (a {@link RedisClock}): every time written on a job or compared with one. */
  now: () => Promise<number>;
  /** Whether the worker is closing with `{ abort: true }`: its jobs are handed back, not failed. */
  stopping: () => boolean;
  /** Puts a job back in the queue for another worker and tells BullMQ so (never returns). */
  handBack: (job: OutboxJob, token: string | undefined) => Promise<never>;
}

/**
 * How a worker runs one job of the outbox, and what it records on the job
 * about each attempt: the service's answer (`sent`), the error of a failed
 * attempt, stalls counted as attempts (`stalls`, `stallsSeen`), when an
 * attempt may have been accepted (`possiblyAcceptedAt`, `resendUntil`), and
 * why a job was parked. The worker ({@link EmlApiWorker}) keeps the rest: its
 * connections, events and close.
 *
 * @example
 * const result = await runner.run(job, token);
 */
export class OutboxJobRunner {
  readonly #settings: JobRunnerSettings;
  /** Jobs run again after they were sent: they complete without a `'sent'` event. */
  readonly #alreadySent = new WeakSet<OutboxJob>();
  /** This worker's sends, shared or alone (a job that has stalled). */
  readonly #gate = new SoloGate();

  constructor(settings: JobRunnerSettings) {
    this.#settings = settings;
  }

  /**
   * Whether `job` completed as one sent already (posting nothing); asked once, when it completes.
   * @example
   * if (!runner.takeAlreadySent(job)) this.emit('sent', job, result);
   */
  takeAlreadySent(job: OutboxJob): boolean {
    return this.#alreadySent.delete(job);
  }

  /**
   * Runs one job: completes a job sent already with its first answer, counts
   * a stall, parks a job past its `resendUntil`, or posts it and records the
   * outcome. Resolves with the result BullMQ completes the job with; throws
   * what BullMQ should do otherwise (retry, fail at once, rate limit, moved).
   */
  async run(job: OutboxJob, token: string | undefined): Promise<OutboxSendResult> {
    const { stopping, handBack } = this.#settings;
    if (stopping()) return handBack(job, token);
    let data: OutboxJobData;
    try {
      data = readOutboxJobData(job.data, this.#settings.location.contentKeyPrefix);
    } catch (err) {
      return this.#fail(job, token, err, undefined);
    }
    if (data.sent) {
      // Sent already (a dashboard's "Retry" on a completed job, or a worker that died before completing it):
      // complete again with the service's first answer; posting again could only fail for want of content.
      this.#alreadySent.add(job);
      return data.sent;
    }
    // Redis's time, not this machine's: resendUntil was written by another worker, maybe on another clock.
    // Read once it can be read, it is carried forward and never fails again (redis-clock.ts).
    let now: number;
    try {
      now = await this.#settings.now();
    } catch (err) {
      return this.#fail(job, token, redisFailure(err, 'Could not read the time of Redis', false), data);
    }
    // BullMQ counts stalls (a worker that stopped while it held the job) and moves the job straight back
    // to the queue; the outbox makes each one a failed attempt, retried after its backoff, up to maxStalls.
    const stalled = (job.stalledCounter ?? 0) - (data.stallsSeen ?? 0);
    if (stalled > 0) return this.#failStalled(job, token, data, stalled, now);
    // A job that has stalled is sent alone in this worker (solo-gate.ts): should it crash the worker
    // again, no other send goes down with it, and that stall is its own.
    const alone = (data.stalls ?? 0) > 0;
    const leave = await this.#gate.enter(alone);
    try {
      return await this.#send(job, token, data, alone);
    } finally {
      leave();
    }
  }

  /** Posts a job (its turn at the gate taken) and records the outcome. */
  async #send(
    job: OutboxJob,
    token: string | undefined,
    data: OutboxJobData,
    alone: boolean,
  ): Promise<OutboxSendResult> {
    if (this.#settings.stopping()) return this.#settings.handBack(job, token);
    const startedAt = await this.#settings.now();
    if (data.resendUntil !== undefined && startedAt >= data.resendUntil) return this.#parkAfterWindow(job, token, data);
    try {
      // Marked before it goes out: if the worker dies now, the stall is counted toward maxStalls.
      if (alone && !(await this.#write(job, token, { ...job.data, aloneAt: data.stallsSeen ?? 0 }))) {
        throw new Error('This worker no longer holds the job (its lock expired): not sent by it');
      }
      const result = await sendOutboxJob(this.#settings.client, this.#settings.content, data);
      // Not awaited: BullMQ's completion follows it on the same connection, in the same round trip.
      recordSent(this.#settings.redis, this.#keys(job), data, result, token).then(
        (owned) => {
          if (!owned) this.#warnNotOwner(job, 'its record of the send');
        },
        (err: unknown) =>
          // The send stands; without the record a re-run posts again and the service answers from the first send.
          this.#settings.logger.warn(
            { job: job.id, error: (err as Error).message },
            'Could not record the send on the job',
          ),
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
    if (this.#settings.stopping()) return this.#handBackAborted(job, token, err, data, startedAt);
    // Content gone after a stall or a lost answer: that attempt may have delivered it; say so (issue 21, item 5).
    if (data?.possiblyAcceptedAt !== undefined && isContentMissing(err)) {
      err = contentGoneAfterAttempt(data.possiblyAcceptedAt, String(job.id), err as Error);
    }
    const action = failureAction(err);
    this.#warnLongRetryAfter(job, err);
    if (action.kind === 'pause') {
      // BullMQ's rate limit key pauses every worker of the queue; the job goes back without using an attempt.
      // Never for longer than maxRetryAfter: one answer asking for a year would stop all sending for a year.
      const pauseMs = Math.min(action.ms, this.#settings.maxRetryAfter);
      await this.#settings.rateLimit(pauseMs);
      this.#settings.logger.warn({ job: job.id, pauseMs }, 'The service is rate limiting: queue paused');
      const lastError = outboxJobError(err, job.attemptsMade + 1, false, await this.#failedAt());
      await this.#record(job, token, { lastError });
      throw loadBullmq().Worker.RateLimitError();
    }
    const attempt = job.attemptsMade + 1;
    const outcome = failureOutcome(err, attempt, job.opts.attempts ?? 1);
    const reported = explainFailure(err, outcome);
    const permanent = action.kind === 'fail';
    const at = await this.#failedAt();
    // The service refused these very bytes: nothing can send them, so they leave Redis now, not in 7 days.
    const refused = outcome.kind === 'refused' && data !== undefined;
    const window = data && startedAt !== undefined && mayHaveBeenAccepted(err) ? this.#window(data, startedAt) : {};
    await this.#record(
      job,
      token,
      {
        lastError: outboxJobError(reported, attempt, permanent, at),
        ...window,
        ...(refused ? { contentRemoved: true } : {}),
      },
      { dropContent: refused ? data : undefined, retry: outcome.kind === 'retry' },
    );
    throw permanent ? unrecoverable(reported) : reported;
  }

  /**
   * Hands back a job whose attempt a forced close aborted. When its upload
   * may have reached the service (the request was sent; or a 5xx...), that
   * is recorded as for any such attempt (`possiblyAcceptedAt`, `resendUntil`,
   * by Redis's clock), with the error, and the job goes back at the priority
   * of retries, ahead of the backlog: handed back unmarked and behind every
   * new message, it was later sent again after the service's idempotency
   * window, and delivered twice (review F6).
   */
  async #handBackAborted(
    job: OutboxJob,
    token: string | undefined,
    err: unknown,
    data: OutboxJobData | undefined,
    startedAt: number | undefined,
  ): Promise<never> {
    if (data !== undefined && startedAt !== undefined && mayHaveBeenAccepted(err)) {
      const lastError = outboxJobError(err, job.attemptsMade + 1, false, await this.#failedAt());
      await this.#record(job, token, { lastError, ...this.#window(data, startedAt) }, { retry: true });
    }
    return this.#settings.handBack(job, token);
  }

  /** Says so when the service asked to wait longer than the worker will (its `Retry-After` over `maxRetryAfter`). */
  #warnLongRetryAfter(job: OutboxJob, err: unknown): void {
    const asked = err instanceof EmlApiError ? err.retryAfter : undefined;
    const max = this.#settings.maxRetryAfter;
    if (asked === undefined || asked <= max) return;
    const what = (err as EmlApiError).responseCode === 429 ? 'every worker waits' : 'the job is tried again in';
    this.#settings.logger.warn(
      { job: job.id, retryAfterMs: asked, maxRetryAfter: max },
      `The service asked (Retry-After) to wait ${seconds(asked)}, more than maxRetryAfter (${seconds(max)}): ${what} ${seconds(max)} at most`,
    );
  }

  /**
   * The window of a send that may have been accepted, from its first such
   * attempt (`startedAt` when this is the first): how long the service
   * answers a resend from it, and so until when the job may be sent again.
   */
  #window(data: OutboxJobData, startedAt: number): Pick<OutboxJobData, 'possiblyAcceptedAt' | 'resendUntil'> {
    const possiblyAcceptedAt = data.possiblyAcceptedAt ?? startedAt;
    return { possiblyAcceptedAt, resendUntil: possiblyAcceptedAt + this.#settings.resendWithin };
  }

  /** Parks a job whose send may have been accepted, now that the service may have forgotten its key. */
  async #parkAfterWindow(job: OutboxJob, token: string | undefined, data: OutboxJobData): Promise<never> {
    const parked = parkedAfterWindow(data.possiblyAcceptedAt ?? data.resendUntil!, String(job.id));
    this.#settings.logger.error({ job: job.id }, parked.message);
    const at = await this.#failedAt();
    const lastError = {
      ...outboxJobError(parked, job.attemptsMade + 1, true, at),
      parked: 'idempotency-window' as const,
    };
    await this.#record(job, token, { lastError });
    throw unrecoverable(parked);
  }

  /**
   * Ends a run that found its job stalled: the worker of an earlier run stopped
   * while it sent it. That attempt failed, its outcome unknown: retried after
   * its backoff like any other, or, past `maxStalls`, parked for a person.
   */
  async #failStalled(
    job: OutboxJob,
    token: string | undefined,
    data: OutboxJobData,
    stalled: number,
    now: number,
  ): Promise<never> {
    const stalls = (data.stalls ?? 0) + stalled;
    // Only the stalls of runs alone count toward parking: a send beside others may have stalled for
    // another job's crash. A run alone since the last count marked the job with the count (aloneAt);
    // a job put back (stalls 0 again) starts counting afresh.
    const suspect = (data.stalls ?? 0) > 0;
    const ranAlone = suspect && data.aloneAt !== undefined && data.aloneAt === (data.stallsSeen ?? 0);
    const aloneStalls = (suspect ? (data.aloneStalls ?? 0) : 0) + (ranAlone ? 1 : 0);
    // The stalled attempt started after the job was queued and after the attempt before it failed: the
    // later of the two is the earliest it can have been accepted (early is the safe side for the window).
    // The attempt before failed at a Redis time; the job was queued at its producer's (BullMQ's timestamp),
    // which is taken no later than now by Redis's clock: a producer clock ahead moves the window by the
    // time from the attempt's start to now at most (a lock's expiry and a stall check), not by its skew.
    const earliest = Math.max(Math.min(job.timestamp, now), Date.parse(data.lastError?.at ?? '') || 0);
    const counted = { stalls, aloneStalls, stallsSeen: job.stalledCounter, ...this.#window(data, earliest) };
    const attempt = job.attemptsMade + 1;
    const at = new Date(now);
    if (aloneStalls > this.#settings.maxStalls) {
      const parked = parkedAfterStalls(stalls, String(job.id), aloneStalls);
      this.#settings.logger.error({ job: job.id, stalls, aloneStalls }, parked.message);
      await this.#record(job, token, {
        ...counted,
        lastError: { ...outboxJobError(parked, attempt, true, at), parked: 'stalls' },
      });
      throw unrecoverable(parked);
    }
    const err = stallFailure(stalled);
    const outcome = failureOutcome(err, attempt, job.opts.attempts ?? 1);
    const reported = explainFailure(err, outcome);
    await this.#record(
      job,
      token,
      { ...counted, lastError: outboxJobError(reported, attempt, false, at) },
      { retry: outcome.kind === 'retry' },
    );
    throw reported;
  }

  /** When an attempt failed, by Redis's clock (this machine's only if Redis cannot be read and never was). */
  async #failedAt(): Promise<Date> {
    return new Date(await this.#settings.now().catch(() => Date.now()));
  }

  /** The Redis keys of a job's records: its hash (its lock beside it) and the queue's content index. */
  #keys(job: OutboxJob): JobRecordKeys {
    const { location } = this.#settings;
    return {
      job: `${location.prefix}:${location.queueName}:${job.id}`,
      contentIndex: outboxKeys(location).contentIndex,
    };
  }

  /**
   * Keeps the record of a failed attempt on the job (its error, for `queue
   * status` and dashboards), removes the content of the job `dropContent` gives (its key, or its `inline` field),
   * and, when it is to be tried again, gives it the priority of retries,
   * which workers take before new messages: in one step, only while this
   * worker holds the job (job-record.ts).
   */
  async #record(
    job: OutboxJob,
    token: string | undefined,
    fields: Partial<OutboxJobData>,
    { dropContent, retry = false }: { dropContent?: OutboxJobData | undefined; retry?: boolean } = {},
  ): Promise<void> {
    const { inline, ...rest } = { ...job.data, ...fields };
    // Content kept in the job leaves with its data; content beside it, with its key.
    const updated = dropContent ? rest : { ...rest, ...(inline === undefined ? {} : { inline }) };
    try {
      await this.#write(job, token, updated as OutboxJobData, {
        dropContent: dropContent !== undefined && dropContent.inline === undefined,
        // Read by BullMQ when it promotes the job from delayed: priority 0 puts it in the wait list, taken first.
        priority: retry && job.priority !== RETRY_PRIORITY ? RETRY_PRIORITY : undefined,
      });
    } catch (err) {
      this.#settings.logger.warn(
        { job: job.id, error: (err as Error).message },
        'Could not record the error on the job',
      );
    }
  }

  /**
   * Writes a job's data (and what `options` asks) while this worker holds the
   * job, keeping BullMQ's copy in memory in step; warns and returns false when
   * it no longer does.
   */
  async #write(
    job: OutboxJob,
    token: string | undefined,
    data: OutboxJobData,
    options: { dropContent?: boolean; priority?: number | undefined } = {},
  ): Promise<boolean> {
    const outcome = await recordOnJob(this.#settings.redis, this.#keys(job), token, data, options);
    if (outcome === 'not-owner') {
      this.#warnNotOwner(job, 'its record of the attempt');
      return false;
    }
    if (outcome === 'gone') return false;
    job.data = data;
    if (options.priority !== undefined) job.priority = options.priority;
    return true;
  }

  /** Says that a write was dropped because another worker holds the job now. */
  #warnNotOwner(job: OutboxJob, what: string): void {
    this.#settings.logger.warn(
      { job: job.id },
      `This worker no longer holds the job (its lock expired: it stalled, and another worker took it): ${what} is dropped; ` +
        "the other worker's send, under the same idempotency key, is answered by the service from this one's",
    );
  }
}

/** BullMQ's error for a job that fails at once, whatever attempts it has left; the outbox's error is its cause. */
function unrecoverable(err: Error): Error {
  const wrapped = new (loadBullmq().UnrecoverableError)(err.message);
  Object.defineProperty(wrapped, 'cause', { value: err, enumerable: false });
  return wrapped;
}
