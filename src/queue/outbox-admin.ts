import type { Queue } from 'bullmq';
import {
  recordQueue,
  type OutboxJobRecord,
  type OutboxJobData,
  type OutboxSendResult,
  type OutboxJobError,
} from './outbox-job.js';
import {
  resolveQueueLocation,
  outboxKeys,
  parseContentKey,
  queueKey,
  queueLocationOf,
  type QueueLocation,
} from './queue-location.js';
import {
  loadBullmq,
  closeOutboxRedis,
  openOutboxRedis,
  type OutboxRedisClient,
  type RedisConnectionInput,
  withDeadline,
  escapeGlob,
  scannableServers,
} from './redis-connection.js';
import { connectionLost, redisFailure, trackConnectionErrors, watchRefusal } from './redis-failure.js';
import { queueClient } from './bullmq-internals.js';
import { queueRedisTime } from './redis-clock.js';
import type { SendKind } from '../protocol/api-types.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';

/**
 * The outbox's BullMQ queue opened for administration, without a producer.
 * @example
 * const admin = await openOutboxQueue({ connection: process.env.REDIS_URL! });
 */
export interface OutboxQueue {
  readonly queue: Queue<OutboxJobData, OutboxSendResult>;
  /** Host and port of Redis (never its password). */
  readonly where: string;
  close(): Promise<void>;
}

/**
 * Opens the outbox's queue and checks that Redis answers.
 * @param options `connection`; `queueName` @default 'eml-api'; `prefix` @default 'bull'
 * @param timeout how long Redis may take to answer, in ms @default 10000
 * @throws {EmlApiError} `ECONFIG` for a bad option or a refused connection; `ECONNECTION` or `ETIMEDOUT` otherwise
 * @example
 * const { queue, close } = await openOutboxQueue({ connection: 'redis://127.0.0.1:6379', queueName: 'mail' });
 */
export async function openOutboxQueue(
  options: { connection: RedisConnectionInput; queueName?: string; prefix?: string },
  timeout = 10_000,
): Promise<OutboxQueue> {
  const location = resolveQueueLocation(options.queueName, options.prefix);
  const { Queue } = loadBullmq();
  const client = openOutboxRedis(options.connection, 'producer', location);
  client.redis.on('error', () => undefined);
  trackConnectionErrors(client.redis);
  // A cluster client retries a refused password silently, leaving the PING waiting.
  const refusal = watchRefusal(client.redis, client.where);
  try {
    await Promise.race([withDeadline(client.redis.ping(), timeout), refusal.refused]);
  } catch (err) {
    if (client.owned) client.redis.disconnect();
    throw redisFailure(err, `Could not reach Redis at ${client.where}`, false, undefined, client);
  } finally {
    refusal.stop();
  }
  // Administration reads: a queue name with a typo must not leave a queue's keys behind.
  const queue = new Queue<OutboxJobData, OutboxSendResult>(location.queueName, {
    connection: client.redis,
    prefix: location.prefix,
    skipMetasUpdate: true,
  });
  queue.on('error', () => undefined);
  return {
    queue,
    where: client.where,
    close: async () => {
      await queue.close().catch(() => undefined);
      await closeOutboxRedis(client);
    },
  };
}

/** A lost connection said with where and why, not ioredis's "max retries per request"; other errors as they are. */
export function outboxQueueFailure({ queue, where }: OutboxQueue, err: unknown): unknown {
  if (!connectionLost(err)) return err;
  const redis = queue.opts.connection as OutboxRedisClient;
  return redisFailure(err, `Could not reach Redis at ${where}`, false, undefined, { redis, where });
}

/** Whether Redis holds the queue: its meta key (which producers and workers write) or any job. */
export async function outboxQueueExists(queue: Queue): Promise<boolean> {
  const redis = await queueClient(queue);
  if ((await redis.exists(queueKey(queueLocationOf(queue), 'meta'))) > 0) return true;
  return Object.values(await jobCounts(queue)).some((n) => n > 0);
}

/**
 * The job states {@link readOutboxStatus} counts, as BullMQ names them.
 * @example
 * for (const state of OUTBOX_STATES) console.log(state, status.counts[state]);
 */
export const OUTBOX_STATES = [
  'waiting',
  'prioritized',
  'delayed',
  'active',
  'waiting-children',
  'failed',
  'completed',
] as const;

type OutboxState = (typeof OUTBOX_STATES)[number];

async function jobCounts(queue: Queue): Promise<Record<OutboxState, number>> {
  const raw = await queue.getJobCounts(...OUTBOX_STATES);
  return Object.fromEntries(OUTBOX_STATES.map((s) => [s, raw[s] ?? 0])) as Record<OutboxState, number>;
}

/**
 * A send that failed for good, with its error as the worker recorded it.
 * @example
 * for (const f of status.failed) console.log(f.queueId, f.error.code, f.error.message);
 */
export interface OutboxFailedSend {
  /** The job id. */
  queueId: string;
  kind: SendKind | undefined;
  group: string | undefined;
  /** Empty when `encrypted`: the envelope is sealed with the content's key. */
  envelope: MailEnvelope | undefined;
  messageId: string | undefined;
  /** Whether the job's content and envelope are encrypted (the producer's `encryption` option). */
  encrypted: boolean;
  /** Attempts made. */
  attempts: number;
  /** When it failed for good. */
  failedAt: Date | undefined;
  /** From the job's data, else BullMQ's `failedReason`. */
  error: Pick<OutboxJobError, 'message'> & Partial<OutboxJobError>;
}

/**
 * Jobs by state, and the newest failed sends.
 * @example
 * const status = await readOutboxStatus(transport.queue);
 * console.log(status.counts.waiting, status.counts.failed);
 */
export interface OutboxStatus {
  counts: Record<(typeof OUTBOX_STATES)[number], number>;
  /** Workers take no jobs (`queue.pause()`). */
  paused: boolean;
  /** How long every worker still waits because the service answered 429, in ms. */
  rateLimitedMs: number;
  /** The newest failed sends, up to the limit asked for. */
  failed: OutboxFailedSend[];
}

/**
 * Reads how many jobs are in each state and the newest failed sends (`eml-api queue status`).
 * @param options `limit`: failed sends to list, newest first @default 20
 * @example
 * const { counts, failed } = await readOutboxStatus(transport.queue, { limit: 5 });
 */
export async function readOutboxStatus(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  { limit = 20 }: { limit?: number } = {},
): Promise<OutboxStatus> {
  const [counts, paused, rateLimitedMs] = await Promise.all([
    jobCounts(queue),
    queue.isPaused(),
    // The limiter key counts BullMQ's sends too: only values from PAUSE_MARK up are a 429's pause.
    queue.getRateLimitTtl(PAUSE_MARK),
  ]);
  const ids = limit > 0 ? await queue.getRanges(['failed'], 0, limit - 1) : [];
  const read = await Promise.all(
    ids.map(async (id): Promise<OutboxFailedSend | undefined> => {
      const job = await readJob(recordQueue(queue), id);
      if (job === undefined) return undefined;
      if (job instanceof SyntaxError) {
        const message = `This job cannot be read: ${UNREADABLE} (${job.message}); look at it with a Redis client (HGETALL ${queueKey(queueLocationOf(queue), id)}), or remove it with eml-api queue purge ${id}`;
        const none = { kind: undefined, group: undefined, envelope: undefined, messageId: undefined };
        return { queueId: id, ...none, encrypted: false, attempts: 0, failedAt: undefined, error: { message } };
      }
      const data = (job.data ?? {}) as Partial<OutboxJobRecord>;
      return {
        queueId: String(job.id),
        kind: data.kind,
        group: data.group,
        envelope: data.envelope,
        messageId: data.messageId,
        encrypted: data.encryption !== undefined,
        attempts: job.attemptsMade,
        failedAt: job.finishedOn ? new Date(job.finishedOn) : undefined,
        error: data.lastError ?? { message: job.failedReason ?? 'unknown error' },
      };
    }),
  );
  const failed = read.filter((send): send is OutboxFailedSend => send !== undefined);
  return { counts, paused, rateLimitedMs: Math.max(0, rateLimitedMs), failed };
}

const UNREADABLE = 'its data in Redis is not valid JSON (cut, or written by something else than the outbox)';

/** A job, the parse error when its hash is not JSON (one such job must not stop reading the queue), or undefined. */
async function readJob(
  queue: Queue<OutboxJobRecord, OutboxSendResult>,
  id: string,
): Promise<Awaited<ReturnType<typeof queue.getJob>> | SyntaxError> {
  try {
    return await queue.getJob(id);
  } catch (err) {
    if (err instanceof SyntaxError) return err;
    throw err;
  }
}

/** Unparks a job if its entry is still the run that parked it. KEYS: the parked set. ARGV: job id, `processedOn`. */
const UNPARK = `
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
`;

const CONTENT_REMOVED = 'its content was removed when the service refused it; queue a corrected message with sendMail';
const KEY_USED =
  'the service had already accepted another message under its idempotency key (422 idempotency_key_reused), and its content was removed; queue it with sendMail under a new idempotencyKey if it must go too';
const NO_LONGER_FAILED =
  'no longer failed: put back meanwhile by someone else (another eml-api queue retry, a dashboard, a sendMail with its idempotencyKey)';
const MAY_HAVE_BEEN_DELIVERED =
  "it may have been delivered and the service's idempotency window has passed: check, then put it back by naming it";

/**
 * Puts failed sends back with a fresh retry schedule (`eml-api queue retry`), each once. Skipped, with the reason:
 * jobs whose content was removed, jobs put back by someone else meanwhile, and, unless named, jobs past their
 * idempotency window (naming one is a person's word that it was not delivered).
 * @param options `ids`: the jobs to put back @default every failed job
 * @returns the job ids put back, those named that were not failed jobs, and those left with the reason
 * @example
 * const { retried, skipped } = await retryFailedSends(transport.queue); // all of them
 */
export async function retryFailedSends(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  { ids }: { ids?: readonly string[] } = {},
): Promise<{ retried: string[]; notFailed: string[]; skipped: { queueId: string; reason: string }[] }> {
  const retried: string[] = [];
  const notFailed: string[] = [];
  const skipped: { queueId: string; reason: string }[] = [];
  let now: number | undefined;
  const retry = async (id: string) => {
    const job = await readJob(recordQueue(queue), id);
    if (job instanceof SyntaxError) {
      if (!(await queue.getJobState(id).then((state) => state === 'failed'))) return false;
      skipped.push({
        queueId: id,
        reason: `${UNREADABLE}: look at it with a Redis client, or remove it with eml-api queue purge`,
      });
      return true;
    }
    if (!job || !(await job.isFailed())) return false;
    const data = (job.data ?? {}) as Partial<OutboxJobRecord>;
    if (data.contentRemoved) {
      const keyUsed = data.lastError?.apiCode === 'idempotency_key_reused';
      skipped.push({ queueId: id, reason: keyUsed ? KEY_USED : CONTENT_REMOVED });
      return true;
    }
    // Workers wrote resendUntil by Redis's clock.
    const pastWindow = data.resendUntil !== undefined && data.resendUntil <= (now ??= await queueRedisTime(queue));
    if (pastWindow && !ids) {
      skipped.push({ queueId: id, reason: MAY_HAVE_BEEN_DELIVERED });
      return true;
    }
    if (data.stalls || pastWindow) {
      const { possiblyAcceptedAt: _at, resendUntil: _until, ...rest } = data;
      await job.updateData({ ...(pastWindow ? rest : data), stalls: 0, aloneStalls: 0 } as OutboxJobRecord);
    }
    const parkedRun = String(job.processedOn ?? '');
    try {
      await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    } catch (err) {
      if (await job.isFailed()) throw err;
      skipped.push({ queueId: id, reason: NO_LONGER_FAILED });
      return true;
    }
    retried.push(id);
    const redis = await queueClient(queue);
    await redis.eval(UNPARK, 1, outboxKeys(queueLocationOf(queue)).parked, id, parkedRun).catch(() => undefined);
    return true;
  };
  if (ids) {
    for (const id of ids) if (!(await retry(id))) notFailed.push(id);
    return { retried, notFailed, skipped };
  }
  // Read before any is put back: one a worker fails again at once must not be found again, and sent again.
  const failed = await queue.getRanges(['failed'], 0, -1, true);
  for (const id of new Set(failed)) await retry(id);
  return { retried, notFailed, skipped };
}

/**
 * What {@link purgeOutbox} removed, and left.
 * @example
 * const { jobs, content, busy } = await purgeOutbox(queue);
 */
export interface OutboxPurgeResult {
  /** Jobs removed. */
  jobs: number;
  /** Stored messages removed (with the whole queue, orphans included). */
  content: number;
  /** Jobs left because a worker is sending them (with the whole queue, nothing was then removed). */
  busy: string[];
  /** Named jobs that do not exist. */
  notFound: string[];
  /** Redis Cluster masters down, and so not scanned for stored messages, with why. */
  skippedNodes?: string[];
}

const BATCH = 500;

/**
 * Removes queued mail now: the named jobs with their stored messages, or the whole queue with every outbox key (BullMQ
 * removals leave stored messages until a sweep). Stop the producers first: a message queued meanwhile may be kept.
 * @example
 * await purgeOutbox(admin.queue, { ids: ['order-1042'] });
 */
export async function purgeOutbox(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  {
    ids,
    force = false,
  }: {
    /** The jobs to remove, with their content. @default undefined (the whole queue) */
    ids?: readonly string[];
    /**
     * Purge the whole queue even while jobs are being sent (their workers then record sends on jobs that are gone).
     * Named jobs being sent are always left: BullMQ does not remove a locked job.
     * @default false
     */
    force?: boolean;
  } = {},
): Promise<OutboxPurgeResult> {
  const redis = await queueClient(queue);
  const location = queueLocationOf(queue);
  if (ids) return purgeJobs(recordQueue(queue), redis, location, ids);
  if (!force) {
    const active = await queue.getActive();
    if (active.length > 0) return { jobs: 0, content: 0, busy: active.map((job) => String(job.id)), notFound: [] };
  }
  const counts = await jobCounts(queue);
  await queue.obliterate({ force: true });
  // obliterate leaves the limiter key: a 429's pause would outlive the queue.
  await redis.del(queueKey(location, 'limiter'));
  // Those the index names, then any other (a tombstone, one removed by hand).
  let content = 0;
  const index = outboxKeys(location).contentIndex;
  for (;;) {
    const keys = await redis.zrange(index, 0, BATCH - 1);
    if (keys.length === 0) break;
    content += await redis.del(...keys);
    await redis.zrem(index, ...keys);
  }
  const skipped = new Map<string, string>();
  const skip = (node: string, why: string) => skipped.set(node, why);
  // Another queue's prefix may nest in this one's.
  const ours = (key: string) => parseContentKey(location.contentKeyPrefix, key) !== undefined;
  content += await deleteMatching(redis, `${location.contentKeyPrefix}*`, ours, skip);
  for (const key of Object.values(outboxKeys(location))) await redis.del(key);
  const jobs = Object.values(counts).reduce((sum, n) => sum + n, 0);
  if (skipped.size > 0) {
    const skippedNodes = [...skipped].map(([node, why]) => `${node}: ${why}`);
    return { jobs, content, busy: [], notFound: [], skippedNodes };
  }
  return { jobs, content, busy: [], notFound: [] };
}

async function purgeJobs(
  queue: Queue<OutboxJobRecord, OutboxSendResult>,
  redis: OutboxRedisClient,
  location: QueueLocation,
  ids: readonly string[],
): Promise<OutboxPurgeResult> {
  const result: OutboxPurgeResult = { jobs: 0, content: 0, busy: [], notFound: [] };
  const index = outboxKeys(location).contentIndex;
  for (const id of ids) {
    const job = await queue.getJob(id);
    if (!job) {
      result.notFound.push(id);
      continue;
    }
    const contentKey = (job.data as Partial<OutboxJobRecord> | undefined)?.contentKey;
    if ((await queue.remove(id)) !== 1) {
      result.busy.push(id);
      continue;
    }
    result.jobs++;
    await redis.zrem(outboxKeys(location).parked, id);
    // A forged job must not make this delete another key.
    if (typeof contentKey === 'string' && contentKey.startsWith(location.contentKeyPrefix)) {
      const [[, deleted]] = (await redis.multi().del(contentKey).zrem(index, contentKey).exec()) as [[unknown, number]];
      result.content += deleted;
    }
  }
  return result;
}

/**
 * Deletes by SCAN every key matching `pattern` that `ours` accepts. A cluster's SCAN sees one node,
 * so every master that answers is scanned; those down go to `skipped`.
 */
async function deleteMatching(
  redis: OutboxRedisClient,
  pattern: string,
  ours: (key: string) => boolean,
  skipped: (node: string, why: string) => void,
): Promise<number> {
  let deleted = 0;
  for (const server of await scannableServers(redis, skipped)) {
    let cursor = '0';
    do {
      const [next, found] = await server.scan(cursor, 'MATCH', escapeGlob(pattern), 'COUNT', BATCH);
      cursor = next;
      const keys = found.filter(ours);
      if (keys.length > 0) deleted += await redis.del(...keys);
    } while (cursor !== '0');
  }
  return deleted;
}

/**
 * The live state of the outbox (`eml-api queue watch`, the worker's gauges).
 * @example
 * const { counts, oldestWaitingSeconds, sentLastMinute } = await readOutboxSnapshot(transport.queue);
 */
export interface OutboxSnapshot {
  /** Jobs by state, as {@link readOutboxStatus} counts them. */
  counts: Record<(typeof OUTBOX_STATES)[number], number>;
  /** Whether the queue is paused (`queue.pause()`). */
  paused: boolean;
  /** Seconds since the job next in line was queued; 0 when nothing waits. Growing: the workers do not keep up. */
  oldestWaitingSeconds: number;
  /** Failed jobs parked for a person; one put back other than by `eml-api queue retry` counts until the next sweep. */
  parked: number;
  /** Completed within the last minute. */
  sentLastMinute: number;
  /** Jobs failed for good within the last minute. */
  failedLastMinute: number;
}

/**
 * Reads the outbox's live state in a few commands whose cost does not grow with the queue.
 * @param now the time ages and the last minute are counted from (ms) @default Date.now()
 * @example
 * if ((await readOutboxSnapshot(transport.queue)).oldestWaitingSeconds > 600) alert('the outbox is 10 minutes behind');
 */
export async function readOutboxSnapshot(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  now = Date.now(),
): Promise<OutboxSnapshot> {
  const redis = await queueClient(queue);
  const location = queueLocationOf(queue);
  const [counts, paused, nextRetry, nextNew, parked, sent, failed] = await Promise.all([
    jobCounts(queue),
    queue.isPaused(),
    // Workers take the wait list from its right end, and the prioritized set from its lowest score.
    redis.lindex(queueKey(location, 'wait'), -1),
    redis.zrange(queueKey(location, 'prioritized'), 0, 0),
    redis.zcard(outboxKeys(location).parked),
    redis.zcount(queueKey(location, 'completed'), now - 60_000, '+inf'),
    redis.zcount(queueKey(location, 'failed'), now - 60_000, '+inf'),
  ]);
  const heads = [nextRetry, nextNew[0]].filter((id): id is string => typeof id === 'string');
  const queuedAt = await Promise.all(heads.map((id) => redis.hget(queueKey(location, id), 'timestamp')));
  const oldest = Math.min(...queuedAt.map((t) => Number(t)).filter((t) => Number.isFinite(t) && t > 0), now);
  return {
    counts,
    paused,
    oldestWaitingSeconds: Math.max(0, now - oldest) / 1000,
    parked: Number(parked),
    sentLastMinute: sent,
    failedLastMinute: failed,
  };
}

/** Values of BullMQ's limiter key from this one up are a 429's queue-wide pause; below, the limiter's count. */
export const PAUSE_MARK = 1e15;

/** A pause set meanwhile by another worker is judged as it stands. KEYS: limiter key. ARGV: PAUSE_MARK, maxMs. */
const CAP_PAUSE = `
local value = tonumber(redis.call('GET', KEYS[1]) or '0')
if not value or value < tonumber(ARGV[1]) then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left <= tonumber(ARGV[2]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return left
`;

/** Cuts a pause longer than `maxMs` to `maxMs`; resolves with its length before the cut (ms), 0 when not cut. */
export async function capRateLimitPause(redis: OutboxRedisClient, limiterKey: string, maxMs: number): Promise<number> {
  return (await redis.eval(CAP_PAUSE, 1, limiterKey, PAUSE_MARK, maxMs)) as number;
}
