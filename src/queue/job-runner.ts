import { type OutboxRedisClient, loadBullmq } from './redis-connection.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import {
  readOutboxJobData,
  type OutboxJob,
  type OutboxJobData,
  type OutboxSendResult,
  type OutboxJobError,
} from './outbox-job.js';
import { type QueueLocation, outboxKeys } from './queue-location.js';
import { RETRY_PRIORITY } from './retry-schedule.js';
import { QUEUED_AT } from './add-job.js';
import { isContentMissing, type ContentStore } from './content-store.js';
import { EmlApiError, errorDetails } from '../shared/eml-api-error.js';
import { seconds } from './outbox-admin.js';
import { redisFailure } from './redis-failure.js';
import { sendPath } from '../protocol/api-types.js';
import { MAY_HAVE_BEEN_ACCEPTED, type ServiceResponse } from '../http/request-error.js';

/**
 * What a job runner needs from its worker.
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
  /** Why this worker must not send a job (queued for another account, or in clear on an encrypted queue). */
  foreign: (data: OutboxJobData, queuedAt: () => Promise<number>) => Promise<EmlApiError | undefined>;
}

/**
 * How a worker runs one job of the outbox, and what it records on the job
 * about each attempt: the service's answer (`sent`), the error of a failed
 * attempt, stalls counted as attempts (`stalls`, `stallsSeen`), when an
 * attempt may have been accepted (`possiblyAcceptedAt`, `resendUntil`), and
 * why a job was parked. The worker ({@link EmlApiWorker}) keeps the rest: its
 * connections, events and close.
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
    if (data.contentRemoved) throw unrecoverable(putBackWithoutContent(data));
    // When Redis took the job, read only for a job that names no account or is in clear, where it matters.
    const foreign = await this.#settings.foreign(data, async () =>
      this.#queuedAt(job, await this.#settings.now().catch(() => Date.now())),
    );
    if (foreign) return this.#fail(job, token, foreign, data);
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
    const refused = (outcome.kind === 'refused' || outcome.kind === 'key-used') && data !== undefined;
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
    // Both are Redis times; BullMQ's timestamp (its producer's clock, which may be days off) only stands in
    // for a job added without the outbox's stamp, taken no later than Redis's now.
    const earliest = Math.max(await this.#queuedAt(job, now), Date.parse(data.lastError?.at ?? '') || 0);
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

  /** When Redis took the job (its producer's add stamped it, see add-job.ts); else BullMQ's timestamp, no later than now. */
  async #queuedAt(job: OutboxJob, now: number): Promise<number> {
    const stamped = await this.#settings.redis.hget(this.#keys(job).job, QUEUED_AT).catch(() => null);
    return stamped !== null && Number.isFinite(Number(stamped)) ? Number(stamped) : Math.min(job.timestamp, now);
  }

  /** When an attempt failed, by Redis's clock (this machine's only if Redis cannot be read and never was). */
  async #failedAt(): Promise<Date> {
    return new Date(await this.#settings.now().catch(() => Date.now()));
  }

  /** The Redis keys of a job's records: its hash (its lock beside it) and the queue's content index. */
  #keys(job: OutboxJob): JobRecordKeys {
    const { location } = this.#settings;
    const keys = outboxKeys(location);
    return {
      id: String(job.id),
      job: `${location.prefix}:${location.queueName}:${job.id}`,
      contentIndex: keys.contentIndex,
      parked: keys.parked,
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
        parked: fields.lastError?.parked !== undefined,
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
    options: { dropContent?: boolean; priority?: number | undefined; parked?: boolean } = {},
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

/**
 * Posts one queued send through the client's send path, with the
 * job's idempotency key and exactly the stored bytes, so that a job run
 * again (a retry, or after a worker crashed) is the same request and the
 * service delivers it once.
 *
 * Only the service's answer counts as sent: a 2xx whose body is not JSON
 * with the send's `id` (CONTRACT.md) is an unknown outcome, thrown as a
 * passing `EAPI` that may have been accepted (see {@link unrecognisedAnswer}).
 *
 * @throws {EmlApiError} the client's errors; `EMESSAGE` when the stored content is gone, cut or
 *   does not match its SHA-256; `ECONNECTION` when Redis fails while the content is read; `EAPI`
 *   (not permanent, `mayHaveBeenAccepted`) for a 2xx that is not the service's answer
 */
export async function sendOutboxJob(
  client: EmlApiClient,
  store: ContentStore,
  job: OutboxJobData,
): Promise<OutboxSendResult> {
  const key = job.idempotencyKey;
  // An encrypted job is posted only where, and under the key, its producer sealed it for.
  await readContent(() => store.checkBinding(job));
  // An EML is streamed from Redis into its {"mail": ...} body; a JSON send is its stored request body.
  const body =
    job.kind === 'eml' ? await readContent(() => store.emlBody(job)) : await readContent(() => store.jsonBody(job));
  try {
    const { result } = await client.send({ kind: job.kind, groupId: job.group, body, idempotencyKey: key });
    checkAnswer(job, result);
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

/**
 * The answer of a send, if it is the service's: a 2xx whose body is JSON
 * with the send's `id`. The client (and the direct transport) take any 2xx
 * for success, with a `warning` when the body is not JSON, since the caller
 * sees the result; the outbox deletes the only copy of a message once it
 * counts it sent, so it does that only on an answer it recognises
 * (CONTRACT.md: "strict where a wrong guess would do harm").
 */
function checkAnswer(job: OutboxJobData, result: ServiceResponse & { id: string | undefined }): void {
  if (typeof result.id === 'string' && result.id !== '') return;
  throw unrecognisedAnswer(`POST ${sendPath(job.kind, job.group)}`, result);
}

/**
 * A 2xx that is not the service's answer: an HTML page, a body that is not
 * JSON, JSON without the send's id, an empty body. It may be a web server or
 * single-page app behind a wrong `baseUrl` (then nothing was sent), or a
 * service answering in a form the outbox does not know (then it was): an
 * unknown outcome, retried under the same Idempotency-Key on the job's
 * schedule, its content kept, and parked rather than sent after the
 * service's idempotency window.
 */
function unrecognisedAnswer(command: string, res: ServiceResponse): EmlApiError {
  const body = res.text.trim();
  const what =
    body === ''
      ? 'an empty body'
      : res.data === undefined
        ? body.startsWith('<')
          ? 'an HTML page'
          : 'a body that is not JSON'
        : 'JSON without the id of the send';
  return new EmlApiError(
    'EAPI',
    `${command} answered ${res.response} with ${what}, not the service's answer (JSON with the id of the send): ` +
      'whether the message was taken is unknown, so the outbox does not count it as sent and keeps it; check ' +
      `baseUrl (a web server or single-page app there answers every path); ${MAY_HAVE_BEEN_ACCEPTED}`,
    { responseCode: res.statusCode, response: res.text, command, permanent: false, mayHaveBeenAccepted: true },
  );
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

/**
 * What a worker writes on a job of the outbox besides BullMQ's own moves:
 * that the service accepted its send (`sent`, the content then removed), and
 * the record of a failed attempt (its error, stalls, when it may have been
 * accepted), with the content the service refused removed and the priority
 * of retries. Each write checks, in the same script, that the worker still
 * holds the job's lock (BullMQ keeps the token of the worker running a job
 * under `<job key>:lock`): a worker that lost it (a long GC pause, a frozen
 * VM, a partition from Redis: its lock expired, the job stalled and another
 * worker took it) wrote `sent` and deleted the content under the new owner,
 * whose attempt then failed for want of content and erased `sent` with its
 * own record (review F7). Its writes are now dropped: its send went out under
 * the job's idempotency key, and the owner's, the same request, is answered
 * from it. BullMQ's own moves (complete, fail, move back) check the lock too.
 */

/** The check every write starts with: ARGV[1], the worker's lock token ('' for none), still holds KEYS[2]. */
const OWNED = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
`;

/**
 * In one step: the content deleted with its entry in the queue's content
 * index, and the service's answer into the job's data (only while the job
 * exists: a job removed meanwhile is not brought back as a hash of one
 * field), and the job out of the queue's parked set. KEYS: job hash, its
 * lock, content key, content index, parked set. ARGV: the lock token, the
 * data as JSON, the job id. Answers 0 when the worker no longer holds the job.
 *
 * The deletion comes first: on a full Redis (maxmemory reached, `noeviction`)
 * a script's first write is refused when it is one that needs memory (HSET),
 * and allowed when it frees (DEL); once a script has written, Redis lets the
 * rest run (it cannot stop it halfway). The record first was refused: the
 * backlog of a full Redis drained and freed nothing, and producers stayed
 * refused (review F4).
 */
const RECORD_SENT = `${OWNED}
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], KEYS[3])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'data', ARGV[2]) end
redis.call('ZREM', KEYS[5], ARGV[3])
return 1
`;

/**
 * In one step: the job's data, and, as asked, its content removed (ARGV[3]
 * '1', first: on a full Redis the freeing lets the rest run, see
 * RECORD_SENT) and its priority set (ARGV[4], '' to leave it), and the job
 * into the queue's parked set (ARGV[5] '1', scored with its `processedOn`,
 * which tells this failure from a later one) or out of it. KEYS: job hash,
 * its lock, content key, content index, parked set. ARGV: the lock token,
 * the data as JSON, drop, priority, park, the job id. The job is active (its lock is held), so the priority
 * is only read when BullMQ moves it back to a list: BullMQ's changePriority
 * does no more for an active job. Answers 0 when the worker no longer holds
 * the job, -1 when the job is gone.
 */
const RECORD = `${OWNED}
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[4], KEYS[3])
end
redis.call('HSET', KEYS[1], 'data', ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'priority', ARGV[4]) end
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[5], tonumber(redis.call('HGET', KEYS[1], 'processedOn') or '0') or 0, ARGV[6])
else
  redis.call('ZREM', KEYS[5], ARGV[6])
end
return 1
`;

interface RecordCommands {
  emlApiRecordSent(
    job: string,
    lock: string,
    content: string,
    index: string,
    parked: string,
    token: string,
    data: string,
    jobId: string,
  ): Promise<number>;
  emlApiRecord(
    job: string,
    lock: string,
    content: string,
    index: string,
    parked: string,
    token: string,
    data: string,
    drop: string,
    priority: string,
    park: string,
    jobId: string,
  ): Promise<number>;
}

const defined = new WeakSet<OutboxRedisClient>();

function commands(redis: OutboxRedisClient): OutboxRedisClient & RecordCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiRecordSent', { numberOfKeys: 5, lua: RECORD_SENT });
    redis.defineCommand('emlApiRecord', { numberOfKeys: 5, lua: RECORD });
    defined.add(redis);
  }
  return redis as OutboxRedisClient & RecordCommands;
}

/**
 * The keys of a job's records: its hash, `{prefix}:{queue}:{jobId}` (its lock
 * is beside it), and the queue's content index.
 */
export interface JobRecordKeys {
  /** The job's id. */
  id: string;
  job: string;
  contentIndex: string;
  /** The queue's set of parked jobs. */
  parked: string;
}

/**
 * Records that the service accepted a job's send, before BullMQ completes
 * the job: its answer goes into the job's data (`sent`) and its content is
 * deleted (the key and its index entry; content kept in the job leaves its
 * data), in one step, only while this worker holds the job (`token`). A job
 * run again afterwards (a worker that died before completing it, a
 * dashboard's "Retry" on the completed job) finds `sent` and completes with
 * it, posting nothing, instead of failing for want of its content.
 *
 * The worker sends it without waiting for its answer, and BullMQ's
 * completion follows on the same connection: Redis runs them in that order,
 * and the worker spends one round trip on both instead of two (issue 19,
 * item 3). Each still runs whole or not at all.
 *
 * @param token the worker's lock token of the job (undefined: not checked)
 * @returns false when the worker no longer holds the job: nothing was written
 */
export async function recordSent(
  redis: OutboxRedisClient,
  keys: JobRecordKeys,
  data: OutboxJobData,
  result: OutboxSendResult,
  token: string | undefined,
): Promise<boolean> {
  const { inline: _sent, ...kept } = data;
  const record = JSON.stringify({ ...kept, sent: result });
  const { job, contentIndex, parked } = keys;
  const done = await commands(redis).emlApiRecordSent(
    job,
    `${job}:lock`,
    data.contentKey,
    contentIndex,
    parked,
    token ?? '',
    record,
    keys.id,
  );
  return done === 1;
}

/**
 * Writes a job's data after an attempt (its error, stalls, window), only
 * while this worker holds the job (`token`), in one step with, as asked, the
 * removal of its content under its key (`dropContent`: the service refused
 * it) and a new priority (`priority`: the one of retries).
 *
 * @param token the worker's lock token of the job (undefined: not checked)
 * @returns `recorded`; `not-owner` when the worker no longer holds the job, `gone` when the job is
 *   gone: nothing was written then
 */
export async function recordOnJob(
  redis: OutboxRedisClient,
  keys: JobRecordKeys,
  token: string | undefined,
  data: OutboxJobData,
  {
    dropContent = false,
    priority,
    parked = false,
  }: { dropContent?: boolean; priority?: number | undefined; parked?: boolean } = {},
): Promise<'recorded' | 'not-owner' | 'gone'> {
  const { job, contentIndex } = keys;
  const done = await commands(redis).emlApiRecord(
    job,
    `${job}:lock`,
    data.contentKey,
    contentIndex,
    keys.parked,
    token ?? '',
    JSON.stringify(data),
    dropContent ? '1' : '',
    priority === undefined ? '' : String(priority),
    parked ? '1' : '',
    keys.id,
  );
  return done === 1 ? 'recorded' : done === 0 ? 'not-owner' : 'gone';
}

/**
 * Pause of the queue after a 429 without `Retry-After`, in ms (5 s).
 */
export const DEFAULT_RATE_LIMIT_PAUSE = 5_000;

/**
 * What a worker does with a failed send:
 * - `pause`: the service said 429; the whole queue waits `ms` (its `Retry-After`), the job goes back without using an attempt
 * - `fail`: the same request cannot succeed (4xx, `EAUTH`, `EMESSAGE`...): the job fails at once
 * - `retry`: a passing failure (unreachable, timeout, 5xx): the job is tried again on its schedule
 */
export type FailureAction = { kind: 'pause'; ms: number } | { kind: 'fail' } | { kind: 'retry' };

/**
 * Decides what a worker does with a failed send.
 */
export function failureAction(err: unknown): FailureAction {
  if (!(err instanceof EmlApiError)) return { kind: 'retry' };
  if (err.responseCode === 429) return { kind: 'pause', ms: err.retryAfter ?? DEFAULT_RATE_LIMIT_PAUSE };
  // An abort is the worker's own doing (a forced close), never the message's fault.
  if (err.permanent && err.code !== 'EABORT') return { kind: 'fail' };
  return { kind: 'retry' };
}

/**
 * The record of a failed attempt kept on the job (never the API key: errors never carry it).
 * @param at when it failed @default new Date()
 */
export function outboxJobError(err: unknown, attempt: number, permanent: boolean, at = new Date()): OutboxJobError {
  const e = err instanceof Error ? err : new Error(String(err));
  const api = e instanceof EmlApiError ? e : undefined;
  const own = (e as { code?: unknown }).code;
  const code = api?.code ?? (typeof own === 'string' ? own : 'ERROR');
  return {
    code: code as OutboxJobError['code'],
    message: e.message,
    ...(api?.responseCode === undefined ? {} : { responseCode: api.responseCode }),
    ...(api?.apiCode === undefined ? {} : { apiCode: api.apiCode }),
    permanent,
    attempt,
    at: at.toISOString(),
  };
}

/**
 * What the outbox does with a job after a failed attempt, as what it reports
 * (events, `lastError`, BullMQ's `failedReason`, `eml-api queue status`) says:
 * - `retry`: tried again on the job's schedule
 * - `exhausted`: out of attempts on a passing failure; failed, its content kept to be put back
 * - `refused`: the service refused these very bytes (400, 413, 422): failed, its content removed
 * - `key-used`: the service already accepted another message under the job's idempotency key (422
 *   `idempotency_key_reused`): failed, its content removed; that message was delivered, this one cannot be under the key
 * - `held`: the service refused something a fix elsewhere can cure (a key, a missing group): failed, its content kept
 * - `broken`: the job itself cannot be sent (its content gone, not a job of this outbox): failed
 */
export type FailureOutcome =
  | { kind: 'retry' }
  | { kind: 'exhausted'; attempts: number }
  | { kind: 'refused' }
  | { kind: 'key-used' }
  | { kind: 'held' }
  | { kind: 'broken' };

/** Statuses by which the service refuses the request itself: the same bytes can never be sent. */
const REFUSED_REQUEST = new Set([400, 413, 422]);

/**
 * What became of a job after a failed attempt that {@link failureAction} did not pause on.
 * @param attempt the attempt that failed (1 for the first)
 * @param attempts the job's attempts in all
 */
export function failureOutcome(err: unknown, attempt: number, attempts: number): FailureOutcome {
  if (failureAction(err).kind === 'retry') {
    return attempt >= attempts ? { kind: 'exhausted', attempts: attempt } : { kind: 'retry' };
  }
  if (keyReused(err)) return { kind: 'key-used' };
  if (refusesRequest(err)) return { kind: 'refused' };
  return err instanceof EmlApiError && err.responseCode !== undefined ? { kind: 'held' } : { kind: 'broken' };
}

/**
 * Whether a permanent failure is the service refusing these very bytes (400,
 * 413, 422), which no retry and no fix elsewhere can make succeed: the job's
 * content can go. A refused key (401, 403) or a missing group (404) can be
 * fixed, after which the same request succeeds: their content stays.
 */
export function refusesRequest(err: unknown): boolean {
  return err instanceof EmlApiError && err.permanent && REFUSED_REQUEST.has(err.responseCode ?? 0);
}

/**
 * Whether the service answered that another message was accepted under the
 * send's idempotency key (422 `idempotency_key_reused`).
 */
export function keyReused(err: unknown): boolean {
  return err instanceof EmlApiError && err.responseCode === 422 && err.apiCode === KEY_REUSED;
}

/** The service's code of a key another accepted message used. */
export const KEY_REUSED = 'idempotency_key_reused';

const SENT_AND_RETRIED =
  'the request was sent, so the service may have accepted it; the outbox sends it again with the same Idempotency-Key, which the service answers from the first send';
const SENT = 'the request was sent, so the service may have accepted it';

/**
 * The error of a failed attempt as the outbox reports it: the client's own
 * words about retries ("not retried to avoid sending twice", true of a direct
 * send) replaced by what the outbox does, and that said at the end.
 * `EmlApiError`s stay `EmlApiError`s with the same fields.
 */
export function explainFailure(err: unknown, outcome: FailureOutcome): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  let message = e.message.replace(MAY_HAVE_BEEN_ACCEPTED, outcome.kind === 'retry' ? SENT_AND_RETRIED : SENT);
  if (outcome.kind === 'exhausted') {
    message += `; the outbox gave up after ${outcome.attempts} attempts (its retry schedule): the job failed, its content is kept for eml-api queue retry`;
  } else if (outcome.kind === 'refused') {
    message +=
      '; not retried: the service refused this request, so these bytes can never be sent; its content was removed from Redis (the failed job is kept to be looked at: queue a corrected message with sendMail, under the same idempotencyKey if you like)';
  } else if (outcome.kind === 'key-used') {
    message +=
      '; not retried: the service already accepted another message under this idempotency key (it answers that one, delivered, from its first send), and this one, with other bytes, can never be sent under the key; its content was removed from Redis. To send it too, queue it with sendMail under a new idempotencyKey';
  } else if (outcome.kind === 'held') {
    message +=
      '; not retried until it is put back (eml-api queue retry) once the cause is fixed; its content stays in Redis';
  } else if (outcome.kind === 'broken') {
    message += '; not retried';
  }
  if (message === e.message) return e;
  if (e instanceof EmlApiError) return new EmlApiError(e.code, message, errorDetails(e));
  const plain = new Error(message, { cause: e });
  const code = (e as { code?: unknown }).code;
  if (code !== undefined) Object.assign(plain, { code });
  return plain;
}

/**
 * The failure of an attempt whose worker stopped before it finished (a
 * stall): killed, crashed, out of memory, or cut off from Redis for longer
 * than `lockDuration`. Its send may have reached the service.
 * @param stalls stalls found at once (more than 1 when a worker died before it could count the previous one)
 */
export function stallFailure(stalls: number): EmlApiError {
  const times = stalls === 1 ? '' : ` (${stalls} times)`;
  return new EmlApiError(
    'ECONNECTION',
    `The worker sending this message stopped before it finished${times}: killed, crashed (out of memory?) or cut off from Redis for longer than lockDuration; ${MAY_HAVE_BEEN_ACCEPTED}`,
    { permanent: false, mayHaveBeenAccepted: true },
  );
}

/**
 * The failure of a job put back (a dashboard's Retry, `Queue.retryJobs()`)
 * after the service refused it and its content was removed: nothing to
 * post. Its record (`lastError`, the service's reason) is left as it is.
 */
export function putBackWithoutContent(data: OutboxJobData): EmlApiError {
  const said = data.lastError?.message ?? 'no reason recorded';
  return new EmlApiError(
    'EMESSAGE',
    `Not sent: this job was put back after the service refused it, and its content was removed then; queue a corrected message with sendMail. The service's refusal: ${said}`,
    {
      permanent: true,
      ...(data.lastError?.responseCode === undefined ? {} : { responseCode: data.lastError.responseCode }),
      ...(data.lastError?.apiCode === undefined ? {} : { apiCode: data.lastError.apiCode }),
    },
  );
}

/**
 * Why a job that stalled more than `maxStalls` times while it ran alone is parked.
 * @param stalls stalls in all
 * @param alone of them, stalls while it ran alone in its worker @default stalls
 */
export function parkedAfterStalls(stalls: number, queueId: string, alone = stalls): EmlApiError {
  return new EmlApiError(
    'ECONNECTION',
    `Parked after ${stalls} stalls, ${alone} of them while it was sent alone (nothing else in flight in its worker): each time, the worker sending this message stopped before it finished (killed, crashed, out of memory, or cut off from Redis). A message that crashes workers would crash every one that takes it, so it waits for a person; an attempt may have been delivered. Look at it (eml-api queue status), then put it back with eml-api queue retry ${queueId}`,
    { permanent: true, mayHaveBeenAccepted: true },
  );
}

/**
 * Whether a failed attempt may have been accepted by the service: its outcome
 * is unknown (a timeout or a connection lost after the request was sent, 502,
 * 504), or the service failed after it had the request (a 5xx other than 503,
 * which the contract keeps for "not processed").
 */
export function mayHaveBeenAccepted(err: unknown): boolean {
  if (!(err instanceof EmlApiError)) return false;
  const status = err.responseCode;
  return err.mayHaveBeenAccepted || (status !== undefined && status >= 500 && status !== 503);
}

/**
 * Why a job whose send may have been accepted is not sent again once the
 * service's idempotency window has passed (or is about to).
 * @param possiblyAcceptedAt when the first attempt that may have been accepted started (ms)
 */
export function parkedAfterWindow(possiblyAcceptedAt: number, queueId: string): EmlApiError {
  return new EmlApiError(
    'ETIMEDOUT',
    `Parked: this message may have been delivered (the outcome of an attempt at ${new Date(possiblyAcceptedAt).toISOString()} is unknown) and the service's idempotency window has passed, or is about to, so sending it again could deliver it twice; check before retrying: if it did not arrive, put it back with eml-api queue retry ${queueId}`,
    { permanent: true, mayHaveBeenAccepted: true },
  );
}

/**
 * The failure of a job whose content is gone from Redis after an attempt
 * whose outcome is unknown (a worker that stopped mid-send, a lost answer):
 * that attempt may have delivered the message, so "nothing to send" would
 * mislead; and nothing is left to send again. A `sendMail` with the same
 * idempotency key replaces the job with its new message, which the service
 * refuses under that key (422 `idempotency_key_reused`) if it had accepted
 * the first, within its idempotency window.
 *
 * @param possiblyAcceptedAt when the first such attempt started (ms since the epoch)
 */
export function contentGoneAfterAttempt(possiblyAcceptedAt: number, queueId: string, cause: Error): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The queued content of job ${queueId} is gone from Redis, after an attempt whose outcome is unknown ` +
      `(from ${new Date(possiblyAcceptedAt).toISOString()}: a worker that stopped while sending it, or an answer lost): ` +
      'that attempt may already have delivered the message, and nothing is left to send again. Check whether it ' +
      'arrived; if not, queue it again with the same idempotencyKey (the service refuses a new copy under a key it ' +
      'accepted, within its idempotency window)',
    { permanent: true, mayHaveBeenAccepted: true, cause },
  );
}

/**
 * Quarantine of jobs that have stalled, inside one worker: such a job is
 * sent alone, with nothing else of the worker in flight. A message that
 * crashes the worker sending it (out of memory, a native crash) takes down
 * every send the worker holds, and those stalled jobs used to come back
 * together on the same backoff and keep sharing its crashes, until innocent
 * messages were parked beside it as "crashing workers". Run alone, a stalled
 * job's next crash is its own; the job runner counts toward `maxStalls` only
 * the stalls of runs that were alone (job-runner.ts).
 *
 * A readers-writer lock, fair (first come, first served): ordinary sends
 * share the worker; a stalled job's send waits until the sends in flight
 * have ended, then runs alone; a send that comes after a waiting stalled job
 * waits behind it.
 * - No deadlock: a holder never waits for the gate again, and what holds it
 *   (a send) ends by itself, within the client's `timeouts`.
 * - No starvation: the queue is first in, first out, so a stalled job waits
 *   for the sends ahead of it only, and ordinary sends for the stalled jobs
 *   ahead of them only, each of which ends. A worker busy with stalled jobs
 *   sends one at a time while it has them; other workers (processes) are not
 *   held up.
 * - Jobs waiting here keep their locks: BullMQ renews the lock of every job
 *   a worker has taken, running or not.
 */

/**
 * Admits the sends of one worker: shared, or alone.
 */
export class SoloGate {
  #shared = 0;
  #alone = false;
  readonly #waiting: { alone: boolean; admit: () => void }[] = [];

  /** Sends in flight now (tests, logs). */
  get inFlight(): number {
    return this.#alone ? 1 : this.#shared;
  }

  /**
   * Waits for the send's turn: at once for an ordinary send unless a send
   * alone runs or waits; for a send `alone`, until nothing else is in flight.
   * @returns the function that ends the send's turn (call it once)
   */
  async enter(alone: boolean): Promise<() => void> {
    if (this.#waiting.length === 0 && this.#free(alone)) {
      this.#take(alone);
    } else {
      await new Promise<void>((admit) => this.#waiting.push({ alone, admit }));
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      if (alone) this.#alone = false;
      else this.#shared--;
      this.#admit();
    };
  }

  #free(alone: boolean): boolean {
    return !this.#alone && (!alone || this.#shared === 0);
  }

  #take(alone: boolean): void {
    if (alone) this.#alone = true;
    else this.#shared++;
  }

  /** Admits waiting sends in order: ordinary ones together, up to the next one that runs alone. */
  #admit(): void {
    while (this.#waiting.length > 0 && this.#free(this.#waiting[0]!.alone)) {
      const next = this.#waiting.shift()!;
      this.#take(next.alone);
      next.admit();
      if (next.alone) return;
    }
  }
}
