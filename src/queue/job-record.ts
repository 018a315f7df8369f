import type { EmlApiLogger } from '../shared/options-kit.js';
import type { OutboxRecordJob, OutboxJobRecord, OutboxSendResult } from './outbox-job.js';
import { jobLockKey, outboxKeys, queueKey, type QueueLocation } from './queue-location.js';
import { type LuaCommands, type OutboxRedisClient, withCommands } from './redis-connection.js';
import { RETRY_PRIORITY } from './retry-schedule.js';
import { runBeforeFinish, type BeforeFinish } from './bullmq-internals.js';

/** When Redis took the job (Redis's time, ms): BullMQ's `timestamp` is the producer's clock, which may be days off. */
export const QUEUED_AT = 'emlApiQueuedAt';

/** ARGV[1], the worker's lock token ('' for none), still holds KEYS[2]. */
const OWNED = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
`;

/** The lock token of the run that recorded the job's send, on the job's hash. */
const SENT_BY = 'emlApiSentBy';

/**
 * Deletes the content, records the answer in the job's data, takes the job out of the parked set. KEYS: job hash, its
 * lock, content key, content index, parked set. Deleting first lets a full Redis drain: once a script has written,
 * Redis runs the rest. Answers 2, not 0, when the lock is gone because this very record already ran with BullMQ's
 * completion (ioredis sends a command again when its reply was lost): the job is this run's, completed.
 */
const RECORD_SENT = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  if redis.call('HGET', KEYS[1], '${SENT_BY}') == ARGV[1] then return 2 end
  return 0
end
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], KEYS[3])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'data', ARGV[2], '${SENT_BY}', ARGV[1]) end
redis.call('ZREM', KEYS[5], ARGV[3])
return 1
`;

/**
 * Writes the job's data; as asked, removes its content first (ARGV[3]), sets its priority (ARGV[4], '' to leave it),
 * and parks it scored with `processedOn` (ARGV[5] '1') or unparks it. Answers 0 when the lock is not held, -1: gone.
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

type Keys = [job: string, lock: string, content: string, index: string, parked: string];

interface RecordCommands {
  emlApiRecordSent(...args: [...Keys, token: string, data: string, jobId: string]): Promise<number>;
  emlApiRecord(
    ...args: [...Keys, token: string, data: string, drop: string, priority: string, park: string, jobId: string]
  ): Promise<number>;
}

/** Records of sends waiting to run with BullMQ's completion of their job, by client, then job hash. */
const deferred = new WeakMap<object, Map<string, BeforeFinish>>();

const RECORD_COMMANDS: LuaCommands = {
  emlApiRecordSent: { numberOfKeys: 5, lua: RECORD_SENT },
  emlApiRecord: { numberOfKeys: 5, lua: RECORD },
};

interface RecordOptions {
  /** The service refused the content. */
  dropContent?: boolean;
  /** Retries are taken before new messages. */
  retry?: boolean;
  /** Else it leaves the parked set. */
  parked?: boolean;
}

/**
 * The records a worker keeps on the jobs it runs. Each write checks in the same script that the worker still holds
 * the job's lock: a worker that lost it must not write `sent` or delete the content under the new owner.
 */
export class JobRecords {
  readonly #redis: OutboxRedisClient & RecordCommands;
  readonly #location: QueueLocation;
  readonly #logger: EmlApiLogger;

  constructor(redis: OutboxRedisClient, location: QueueLocation, logger: EmlApiLogger) {
    this.#redis = withCommands<RecordCommands>(redis, RECORD_COMMANDS);
    this.#location = location;
    this.#logger = logger;
  }

  /**
   * Writes a job's data, keeping BullMQ's copy in memory in step; false when the job is gone or another worker has it.
   * @param token the worker's lock token of the job (undefined: not checked)
   */
  async write(
    job: OutboxRecordJob,
    token: string | undefined,
    data: OutboxJobRecord,
    { dropContent = false, retry = false, parked = false }: RecordOptions = {},
  ): Promise<boolean> {
    const priority = retry && job.priority !== RETRY_PRIORITY ? RETRY_PRIORITY : undefined;
    const done = await this.#redis.emlApiRecord(
      ...this.#keys(job, data),
      token ?? '',
      JSON.stringify(data),
      dropContent ? '1' : '',
      priority === undefined ? '' : String(priority),
      parked ? '1' : '',
      String(job.id),
    );
    if (done === 0) this.#warnNotOwner(job, 'its record of the attempt');
    if (done !== 1) return false;
    job.data = data;
    if (priority !== undefined) job.priority = priority;
    return true;
  }

  /** A failure to write is logged: the attempt's outcome stands. */
  async fail(
    job: OutboxRecordJob,
    token: string | undefined,
    fields: Partial<OutboxJobRecord>,
    { dropContent = false, retry = false }: Omit<RecordOptions, 'parked'> = {},
  ): Promise<void> {
    const { inline, ...rest } = { ...job.data, ...fields };
    const data = (dropContent || inline === undefined ? rest : { ...rest, inline }) as OutboxJobRecord;
    try {
      await this.write(job, token, data, {
        parked: fields.lastError?.parked !== undefined,
        dropContent: dropContent && job.data.inline === undefined,
        retry,
      });
    } catch (err) {
      this.#logger.warn({ job: job.id, error: (err as Error).message }, 'Could not record the error on the job');
    }
  }

  /**
   * Records the service's acceptance and deletes the content, in one step. Not awaited: it runs in BullMQ's completion
   * script of the job, before it; or, should that not come within this turn of the event loop, on its own before it.
   */
  sent(job: OutboxRecordJob, token: string | undefined, data: OutboxJobRecord, result: OutboxSendResult): void {
    const { inline: _sent, ...kept } = data;
    const keys = this.#keys(job, data);
    const args = [token ?? '', JSON.stringify({ ...kept, sent: result }), String(job.id)] as const;
    const record: BeforeFinish = {
      keys,
      args,
      answered: (done) => {
        if (done === 0) this.#warnNotOwner(job, 'its record of the send');
      },
      failed: (err) =>
        // The send stands; a re-run posts again and the service answers from the first send.
        this.#logger.warn({ job: job.id, error: (err as Error).message }, 'Could not record the send on the job'),
    };
    const waiting = this.#waiting();
    const [jobKey] = keys;
    if (waiting && !waiting.has(jobKey)) {
      waiting.set(jobKey, record);
      setImmediate(() => {
        if (waiting.get(jobKey) !== record) return;
        waiting.delete(jobKey);
        this.#redis.emlApiRecordSent(...keys, ...args).then(record.answered, record.failed);
      });
      return;
    }
    this.#redis.emlApiRecordSent(...keys, ...args).then(record.answered, record.failed);
  }

  /** Undefined when BullMQ's completion cannot carry them. */
  #waiting(): Map<string, BeforeFinish> | undefined {
    let waiting = deferred.get(this.#redis);
    if (waiting) return waiting;
    waiting = new Map();
    const taken = waiting;
    const take = (jobKey: string) => {
      const record = taken.get(jobKey);
      taken.delete(jobKey);
      return record;
    };
    if (!runBeforeFinish(this.#redis, { lua: RECORD_SENT, keys: 5, args: 3, ranAlready: 2 }, take)) return undefined;
    deferred.set(this.#redis, waiting);
    return waiting;
  }

  /** Stamped by its add; else BullMQ's timestamp, no later than `now`. */
  async queuedAt(job: OutboxRecordJob, now: number): Promise<number> {
    const stamped = await this.#redis.hget(queueKey(this.#location, String(job.id)), QUEUED_AT).catch(() => null);
    return stamped !== null && Number.isFinite(Number(stamped)) ? Number(stamped) : Math.min(job.timestamp, now);
  }

  #keys(job: OutboxRecordJob, data: OutboxJobRecord): Keys {
    const id = String(job.id);
    const { contentIndex, parked } = outboxKeys(this.#location);
    return [queueKey(this.#location, id), jobLockKey(this.#location, id), data.contentKey, contentIndex, parked];
  }

  #warnNotOwner(job: OutboxRecordJob, what: string): void {
    this.#logger.warn(
      { job: job.id },
      `This worker no longer holds the job (its lock expired: it stalled, and another worker took it): ${what} is dropped; ` +
        "the other worker's send, under the same idempotency key, is answered by the service from this one's",
    );
  }
}
