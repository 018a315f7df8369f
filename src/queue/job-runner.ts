import { loadBullmq } from './redis-connection.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import { readOutboxJobData, type OutboxRecordJob, type OutboxJobRecord, type OutboxSendResult } from './outbox-job.js';
import type { ContentStore } from './content-store.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { seconds } from './redis-clock.js';
import { redisFailure } from './redis-failure.js';
import { sendPath } from '../protocol/api-types.js';
import type { JobRecords } from './job-record.js';
import { SoloGate } from './solo-gate.js';
import {
  contentMissing,
  explainFailure,
  failureAction,
  failureOutcome,
  mayHaveBeenAccepted,
  outboxJobError,
  parkedAfterStalls,
  parkedAfterWindow,
  putBackWithoutContent,
  stallFailure,
  unrecognisedAnswer,
} from './failure-policy.js';

/**
 * How a run of a job ended, and what BullMQ is to be told: the result to complete it with, or the error to throw
 * (BullMQ's rate-limit or moved error, or the failure, wrapped in `UnrecoverableError` when the job fails at once).
 */
export type RunOutcome =
  | { kind: 'sent'; result: OutboxSendResult }
  | { kind: 'put-back'; reason: 'rate_limited' | 'handed_back'; thrown: Error }
  | { kind: 'failed'; error: Error; thrown: Error };

interface JobRunnerSettings {
  content: ContentStore;
  records: JobRecords;
  contentKeyPrefix: string;
  logger: EmlApiLogger;
  maxStalls: number;
  /** From a send's first possibly-accepted attempt, how long it may be sent again, in ms. */
  resendWithin: number;
  client: EmlApiClient;
  /** Pauses every worker of the queue (a 429's `Retry-After`), in ms. */
  rateLimit: (ms: number) => Promise<void>;
  maxRetryAfter: number;
  /** Redis's time, in ms: every time written on a job or compared with one. */
  now: () => Promise<number>;
  /** Whether the worker is closing with `{ abort: true }`: its jobs are handed back, not failed. */
  stopping: () => boolean;
  /** Puts a job back in the queue for another worker, after `recordFirst` (which needs the job's lock still). */
  handBack: (job: OutboxRecordJob, token: string | undefined, recordFirst?: () => Promise<void>) => Promise<RunOutcome>;
  /** Why this worker must not send a job (queued for another account, or in clear on an encrypted queue). */
  foreign: (data: OutboxJobRecord, queuedAt: () => Promise<number>) => Promise<EmlApiError | undefined>;
}

/**
 * How a worker runs one job, and what it records on the job of each attempt: the answer, the error, stalls counted as
 * attempts, when an attempt may have been accepted, why it was parked.
 */
export class OutboxJobRunner {
  readonly #settings: JobRunnerSettings;
  /** This worker's sends, shared or alone (a job that has stalled). */
  readonly #gate = new SoloGate();

  constructor(settings: JobRunnerSettings) {
    this.#settings = settings;
  }

  /** Completes a job sent already with its answer, counts a stall, parks a job past `resendUntil`, or posts it. */
  async run(job: OutboxRecordJob, token: string | undefined): Promise<RunOutcome> {
    const { stopping, handBack, records } = this.#settings;
    if (stopping()) return handBack(job, token);
    let data: OutboxJobRecord;
    try {
      data = readOutboxJobData(job.data, this.#settings.contentKeyPrefix);
    } catch (err) {
      return this.#fail(job, token, err, undefined);
    }
    // Sent already (a dashboard's "Retry", a worker that died before completing it): its first answer.
    if (data.sent) return { kind: 'sent', result: data.sent };
    if (data.contentRemoved) return failed(putBackWithoutContent(data), true);
    const foreign = await this.#settings.foreign(data, async () =>
      records.queuedAt(job, await this.#settings.now().catch(() => Date.now())),
    );
    if (foreign) return this.#fail(job, token, foreign, data);
    let now: number;
    try {
      now = await this.#settings.now();
    } catch (err) {
      return this.#fail(job, token, redisFailure(err, 'Could not read the time of Redis', false), data);
    }
    // BullMQ moves a stalled job straight back to the queue; the outbox makes each stall a failed attempt.
    const stalled = (job.stalledCounter ?? 0) - (data.stallsSeen ?? 0);
    if (stalled > 0) return this.#failStalled(job, token, data, stalled, now);
    // A job that has stalled is sent alone: should it crash the worker again, that stall is its own.
    const alone = (data.stalls ?? 0) > 0;
    const leave = await this.#gate.enter(alone);
    try {
      return await this.#send(job, token, data, alone);
    } finally {
      leave();
    }
  }

  async #send(
    job: OutboxRecordJob,
    token: string | undefined,
    data: OutboxJobRecord,
    alone: boolean,
  ): Promise<RunOutcome> {
    const { stopping, handBack, records, now } = this.#settings;
    if (stopping()) return handBack(job, token);
    const startedAt = await now();
    if (data.resendUntil !== undefined && startedAt >= data.resendUntil) return this.#parkAfterWindow(job, token, data);
    try {
      // Marked before it goes out: if the worker dies now, the stall is counted toward maxStalls.
      if (alone && !(await records.write(job, token, { ...job.data, aloneAt: data.stallsSeen ?? 0 }))) {
        throw new Error('This worker no longer holds the job (its lock expired): not sent by it');
      }
      const result = await sendOutboxJob(this.#settings.client, this.#settings.content, data, String(job.id));
      records.sent(job, token, data, result);
      return { kind: 'sent', result };
    } catch (err) {
      return this.#fail(job, token, err, data, startedAt);
    }
  }

  /** Ends a run whose attempt failed: records why on the job and tells BullMQ what to do with it. */
  async #fail(
    job: OutboxRecordJob,
    token: string | undefined,
    err: unknown,
    data: OutboxJobRecord | undefined,
    startedAt?: number,
  ): Promise<RunOutcome> {
    const { records, stopping } = this.#settings;
    if (stopping()) return this.#handBackAborted(job, token, err, data, startedAt);
    const action = failureAction(err);
    this.#warnLongRetryAfter(job, err);
    if (action.kind === 'pause') {
      // The rate limit key pauses every worker; the job goes back without using an attempt.
      const pauseMs = Math.min(action.ms, this.#settings.maxRetryAfter);
      await this.#settings.rateLimit(pauseMs);
      this.#settings.logger.warn({ job: job.id, pauseMs }, 'The service is rate limiting: queue paused');
      const lastError = outboxJobError(err, job.attemptsMade + 1, false, await this.#failedAt());
      await records.fail(job, token, { lastError });
      return { kind: 'put-back', reason: 'rate_limited', thrown: loadBullmq().Worker.RateLimitError() };
    }
    const attempt = job.attemptsMade + 1;
    const outcome = failureOutcome(err, attempt, job.opts.attempts ?? 1);
    const reported = explainFailure(err, outcome);
    const permanent = action.kind === 'fail';
    const at = await this.#failedAt();
    // The service refused these very bytes: nothing can send them, so they leave Redis now, not in 7 days.
    const refused = (outcome.kind === 'refused' || outcome.kind === 'key-used') && data !== undefined;
    const window = data && startedAt !== undefined && mayHaveBeenAccepted(err) ? this.#window(data, startedAt) : {};
    await records.fail(
      job,
      token,
      {
        lastError: outboxJobError(reported, attempt, permanent, at),
        ...window,
        ...(refused ? { contentRemoved: true } : {}),
      },
      { dropContent: refused, retry: outcome.kind === 'retry' },
    );
    return failed(reported, permanent);
  }

  /**
   * Hands back a job whose attempt a forced close aborted. An upload that may have reached the service is recorded and
   * the job goes back at retry priority: resent after the idempotency window, it would be delivered twice.
   */
  async #handBackAborted(
    job: OutboxRecordJob,
    token: string | undefined,
    err: unknown,
    data: OutboxJobRecord | undefined,
    startedAt: number | undefined,
  ): Promise<RunOutcome> {
    if (data === undefined || startedAt === undefined || !mayHaveBeenAccepted(err)) {
      return this.#settings.handBack(job, token);
    }
    return this.#settings.handBack(job, token, async () => {
      const lastError = outboxJobError(err, job.attemptsMade + 1, false, await this.#failedAt());
      await this.#settings.records.fail(job, token, { lastError, ...this.#window(data, startedAt) }, { retry: true });
    });
  }

  #warnLongRetryAfter(job: OutboxRecordJob, err: unknown): void {
    const asked = err instanceof EmlApiError ? err.retryAfter : undefined;
    const max = this.#settings.maxRetryAfter;
    if (asked === undefined || asked <= max) return;
    const what = (err as EmlApiError).responseCode === 429 ? 'every worker waits' : 'the job is tried again in';
    this.#settings.logger.warn(
      { job: job.id, retryAfterMs: asked, maxRetryAfter: max },
      `The service asked (Retry-After) to wait ${seconds(asked)}, more than maxRetryAfter (${seconds(max)}): ${what} ${seconds(max)} at most`,
    );
  }

  /** Until when a send that may have been accepted can be sent again. */
  #window(data: OutboxJobRecord, startedAt: number): Pick<OutboxJobRecord, 'possiblyAcceptedAt' | 'resendUntil'> {
    const possiblyAcceptedAt = data.possiblyAcceptedAt ?? startedAt;
    return { possiblyAcceptedAt, resendUntil: possiblyAcceptedAt + this.#settings.resendWithin };
  }

  /** Parks a job whose send may have been accepted, now that the service may have forgotten its key. */
  async #parkAfterWindow(job: OutboxRecordJob, token: string | undefined, data: OutboxJobRecord): Promise<RunOutcome> {
    const parked = parkedAfterWindow(data.possiblyAcceptedAt ?? data.resendUntil!, String(job.id));
    this.#settings.logger.error({ job: job.id }, parked.message);
    const at = await this.#failedAt();
    const lastError = {
      ...outboxJobError(parked, job.attemptsMade + 1, true, at),
      parked: 'idempotency-window' as const,
    };
    await this.#settings.records.fail(job, token, { lastError });
    return failed(parked, true);
  }

  /** A stalled attempt failed with its outcome unknown: retried after its backoff or, past `maxStalls`, parked. */
  async #failStalled(
    job: OutboxRecordJob,
    token: string | undefined,
    data: OutboxJobRecord,
    stalled: number,
    now: number,
  ): Promise<RunOutcome> {
    const { records, maxStalls, logger } = this.#settings;
    const stalls = (data.stalls ?? 0) + stalled;
    // Only stalls of runs alone count toward parking: beside others, another job's crash may be the cause.
    const suspect = (data.stalls ?? 0) > 0;
    const ranAlone = suspect && data.aloneAt !== undefined && data.aloneAt === (data.stallsSeen ?? 0);
    const aloneStalls = (suspect ? (data.aloneStalls ?? 0) : 0) + (ranAlone ? 1 : 0);
    // The later of queueing and the last failure is the earliest it can have been accepted (early is the safe side).
    const earliest = Math.max(await records.queuedAt(job, now), Date.parse(data.lastError?.at ?? '') || 0);
    const counted = { stalls, aloneStalls, stallsSeen: job.stalledCounter, ...this.#window(data, earliest) };
    const attempt = job.attemptsMade + 1;
    const at = new Date(now);
    if (aloneStalls > maxStalls) {
      const parked = parkedAfterStalls(stalls, String(job.id), aloneStalls);
      logger.error({ job: job.id, stalls, aloneStalls }, parked.message);
      await records.fail(job, token, {
        ...counted,
        lastError: { ...outboxJobError(parked, attempt, true, at), parked: 'stalls' },
      });
      return failed(parked, true);
    }
    const err = stallFailure(stalled);
    const outcome = failureOutcome(err, attempt, job.opts.attempts ?? 1);
    const reported = explainFailure(err, outcome);
    await records.fail(
      job,
      token,
      { ...counted, lastError: outboxJobError(reported, attempt, false, at) },
      { retry: outcome.kind === 'retry' },
    );
    return failed(reported, false);
  }

  /** When an attempt failed, by Redis's clock (this machine's only if Redis cannot be read and never was). */
  async #failedAt(): Promise<Date> {
    return new Date(await this.#settings.now().catch(() => Date.now()));
  }
}

/** BullMQ fails a `permanent` error's job at once (`UnrecoverableError`, the error as its cause), else retries it. */
function failed(error: Error, permanent: boolean): RunOutcome {
  if (!permanent) return { kind: 'failed', error, thrown: error };
  const thrown = new (loadBullmq().UnrecoverableError)(error.message);
  Object.defineProperty(thrown, 'cause', { value: error, enumerable: false });
  return { kind: 'failed', error, thrown };
}

/**
 * Posts one queued send with the job's idempotency key and exactly the stored bytes: a job run again is the same
 * request, which the service delivers once.
 */
async function sendOutboxJob(
  client: EmlApiClient,
  store: ContentStore,
  job: OutboxJobRecord,
  queueId: string,
): Promise<OutboxSendResult> {
  const key = job.idempotencyKey;
  // An encrypted job is posted only where, and under the key, its producer sealed it for.
  await readContent(() => store.checkBinding(job));
  const body =
    job.kind === 'eml' ? await readContent(() => store.emlBody(job)) : await readContent(() => store.jsonBody(job));
  if (body === undefined) throw contentMissing(job, queueId);
  try {
    const { result } = await client.send({ kind: job.kind, groupId: job.group, body, idempotencyKey: key });
    if (typeof result.id !== 'string' || result.id === '') {
      throw unrecognisedAnswer(`POST ${sendPath(job.kind, job.group)}`, result);
    }
    return clean({
      response: result.response,
      id: result.id,
      messageId: 'messageId' in result ? result.messageId : undefined,
      recipients: 'recipients' in result ? result.recipients : undefined,
      failed: 'failed' in result ? result.failed : undefined,
      idempotencyKey: key,
    });
  } finally {
    if (typeof body !== 'string') await body.dispose();
  }
}

async function readContent<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    throw redisFailure(err, 'Could not read the queued content from Redis', false);
  }
}

/** Without undefined fields: the result is stored as JSON on the job. */
function clean(result: { [K in keyof OutboxSendResult]: OutboxSendResult[K] | undefined }): OutboxSendResult {
  return Object.fromEntries(Object.entries(result).filter(([, v]) => v !== undefined)) as unknown as OutboxSendResult;
}
