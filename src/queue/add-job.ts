import type { JobsOptions, Queue } from 'bullmq';
import type { ChainableCommander } from 'ioredis';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { loadBullmq, requireQueuePeers, type OutboxRedisClient } from './redis-connection.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { CONTENT_CHUNK } from './content-store.js';
import { RECORD_OVERHEAD } from './content-cipher.js';

/**
 * Adding a queued send's job, in one round trip: BullMQ's own add script,
 * then, in the same pipeline on the same connection (so Redis runs them one
 * after the other, and nothing of another client between them can matter to
 * what is read), a script that reads what the job id now holds and how much
 * of the content is stored, and, when replicas must confirm, `WAIT`. It used
 * to be three round trips (the add, a read of the job to tell a duplicate,
 * a check of the job and the content together): the producer's Redis time
 * per message, and so its enqueue rate, is mostly round trips. The adds of
 * one turn of the event loop share that pipeline (see `openBatch`), each
 * with its commands together.
 */

/**
 * What Redis held for the job id right after the add, and of the content.
 */
export interface AddedState {
  /** The job's data (JSON), `null` when no job has the id (removed meanwhile). */
  data: string | null;
  /** The job's score in the failed set, `null` when it has not failed. */
  failedAt: string | null;
  /** The job's `finishedOn`, `null` when it has not finished. */
  finishedOn: string | null;
  /** Bytes stored under the content key, -1 when it is not there (inline content has none). */
  storedLength: number;
  /** Whether the add was refused because the content it points at was not whole in Redis (see ADD_GUARD). */
  refused: boolean;
}

/**
 * The outcome of {@link addJob}.
 */
export interface AddedJob {
  state: AddedState;
  /** Replicas that confirmed every write of this connection so far (`WAIT`), when asked. */
  replicas?: number;
}

/**
 * The field of a job's hash that holds when Redis took the job (Redis's time, ms), beside BullMQ's own.
 */
export const QUEUED_AT = 'emlApiQueuedAt';

/**
 * KEYS: job hash, failed set, content key. ARGV: job id. The job's data,
 * failed score and `finishedOn`, and the stored length of the content, as
 * they stand together. A job that has no {@link QUEUED_AT} yet gets Redis's
 * time now (the add just made it; a duplicate keeps its own): BullMQ's
 * `timestamp` is its producer's clock, which may be days off. A full Redis
 * refuses that write, not the read.
 */
const ADDED = `
local data = redis.call('HGET', KEYS[1], 'data')
if data then
  local now = redis.call('TIME')
  redis.pcall('HSETNX', KEYS[1], '${QUEUED_AT}', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
end
local failed = redis.call('ZSCORE', KEYS[2], ARGV[1])
local finished = redis.call('HGET', KEYS[1], 'finishedOn')
local stored = -1
if redis.call('TYPE', KEYS[3]).ok == 'string' then stored = redis.call('STRLEN', KEYS[3]) end
return { data or '', failed or '', finished or '', stored }
`;

/**
 * Whether a worker has already taken the job and finished with its content,
 * read from the state right after the add: it recorded the send (`sent`,
 * written in the same step as the content's removal, see job-record.ts),
 * removed content the service refused (`contentRemoved`), or completed the
 * job. Content missing then was removed by that worker, not lost by Redis:
 * the job stays and the send was queued (review F3: a fast worker's job was
 * removed as lost, and `sendMail` rejected "nothing will be sent" for a
 * message that was delivered).
 */
export function finishedByWorker(state: AddedState): boolean {
  if (state.finishedOn !== null && state.failedAt === null) return true;
  if (state.data === null) return false;
  try {
    const data = JSON.parse(state.data) as Partial<OutboxJobData>;
    return data.sent !== undefined || data.contentRemoved === true;
  } catch {
    return false;
  }
}

/**
 * A failure after the add ran: the job may be stored (the read or `WAIT`
 * after it failed, or gave an answer that cannot be read), so it is never
 * taken for a refusal of the add.
 */
export class AfterTheAdd extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'AfterTheAdd';
  }
}

/**
 * What BullMQ's add answers, under {@link ADD_GUARD}, for a job whose content is not whole in Redis.
 */
const CONTENT_NOT_WHOLE = -1000;

/**
 * Put before BullMQ's own add scripts on a producer's client: a job of the
 * outbox whose content is beside it (its data names a `contentKey`, and has
 * no `inline` content) is added only while that content is whole in Redis,
 * checked in the same step as the add. An add can run long after its
 * producer gave up on it and said so (ioredis sends a command again on a new
 * connection once Redis answers; a paused machine sends it when it wakes):
 * by then the sweeper may have freed the content, and the job would point at
 * nothing. BullMQ passes the job's data as JSON in ARGV[2] to every add
 * script; anything else is left to BullMQ.
 */
const ADD_GUARD = `
do
  local d = ARGV[2]
  if type(d) == 'string' and string.find(d, '"contentKey":"', 1, true) and not string.find(d, '"inline":"', 1, true) then
    local ok, j = pcall(cjson.decode, d)
    if ok and type(j) == 'table' and type(j['contentKey']) == 'string' and type(j['size']) == 'number' and j['inline'] == nil then
      local want = j['size']
      if type(j['encryption']) == 'table' then want = want + math.max(1, math.ceil(want / ${CONTENT_CHUNK})) * ${RECORD_OVERHEAD} end
      if redis.call('TYPE', j['contentKey']).ok ~= 'string' or redis.call('STRLEN', j['contentKey']) ~= want then
        return ${CONTENT_NOT_WHOLE}
      end
    end
  end
end
`;

/** BullMQ's scripts that add a job (named with BullMQ's version since BullMQ 5.x). */
const ADD_SCRIPT = /^add(Standard|Prioritized|Delayed)Job(:|$)/;

const guarded = new WeakSet<object>();

/**
 * Puts {@link ADD_GUARD} before BullMQ's add scripts defined on `redis`
 * (once BullMQ has defined them: the queue's client has resolved), so that
 * the pipelines made from it add with the guard.
 */
function guardAdds(redis: OutboxRedisClient): void {
  if (guarded.has(redis)) return;
  const scripts = (redis as unknown as { scriptsSet?: Record<string, { lua: string; numberOfKeys: number | null }> })
    .scriptsSet;
  for (const [name, script] of Object.entries(scripts ?? {})) {
    if (!ADD_SCRIPT.test(name) || script.lua.startsWith(ADD_GUARD)) continue;
    redis.defineCommand(name, { numberOfKeys: script.numberOfKeys ?? undefined, lua: ADD_GUARD + script.lua });
  }
  guarded.add(redis);
}

type AddedCommands = {
  emlApiAdded(jobKey: string, failedKey: string, contentKey: string, jobId: string): ChainableCommander;
};

const defined = new WeakSet<OutboxRedisClient>();

/**
 * Adds the job (BullMQ ignores it when a job has the id already) and reads,
 * in the same round trip, what the id holds then and the content's stored
 * length; with `replicas`, also waits (`WAIT`) for that many replicas to
 * confirm every write made so far on this connection, the content's included.
 *
 * @param redis the client the queue was made with (the pipeline goes through it)
 * @throws Redis's errors, the add's own (a reply error: it never ran, see redis-failure.ts) or
 *   {@link AfterTheAdd} (the job may be stored); BullMQ's refusal of the job
 */
export async function addJob(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  redis: OutboxRedisClient,
  job: {
    name: string;
    data: OutboxJobData;
    opts: JobsOptions & { jobId: string };
    contentKey: string;
    replicas?: { count: number; timeoutMs: number } | undefined;
  },
): Promise<AddedJob> {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiAdded', { numberOfKeys: 3, lua: ADDED });
    defined.add(redis);
  }
  // BullMQ's own client for the queue: the one given, with BullMQ's scripts loaded on it (BullMQ 6 keeps it
  // on the queue's backend, BullMQ 5 on the queue).
  const holder = queue as unknown as { backend?: { client?: Promise<unknown> }; client?: Promise<unknown> };
  const client = (await (holder.backend?.client ?? holder.client)) as PipelineClient;
  guardAdds(redis);
  // From here to the last command of this add, nothing awaits: the add's commands stay together on a
  // pipeline other adds of this turn share.
  // One pipeline per queue: on a cluster, another queue on the same client may live on another master.
  const batch = openBatch(client, queue.toKey(''));
  const { pipeline } = batch;
  const { Job } = loadBullmq();
  const { jobId } = job.opts;
  const bullJob = new Job<OutboxJobData, OutboxSendResult>(queue, job.name, job.data, job.opts, jobId);
  // Queues BullMQ's add script on the pipeline at once (its returned promise carries nothing more: the
  // add's answer comes with the pipeline's). BullMQ's addBulk relies on the same.
  const before = pipeline.length;
  void Promise.resolve(bullJob.addJob(pipeline as never)).catch(() => undefined);
  if (pipeline.length !== before + 1) {
    const err = new Error(
      `BullMQ ${loadBullmqVersion()} queued ${pipeline.length - before} commands to add a job, not one`,
    );
    // Nothing of this pipeline is sent: the adds queued on it before are refused too (never run).
    batch.refuse(err);
    throw err;
  }
  const added = before;
  pipeline.emlApiAdded(queue.toKey(jobId), queue.toKey('failed'), job.contentKey, jobId);
  const results = await batch.results;
  const [addError, addResult] = results[added] ?? [new Error('the add was not run')];
  if (addError) throw addError;
  const refused = addResult === CONTENT_NOT_WHOLE;
  if (typeof addResult === 'number' && addResult < 0 && !refused) {
    throw new Error(`BullMQ refused the job (code ${addResult})`);
  }
  const [readError, read] = results[added + 1]!;
  if (readError) throw new AfterTheAdd(readError);
  const [data, failedAt, finishedOn, storedLength] = read as [string, string, string, number];
  const state = {
    data: data === '' ? null : data,
    failedAt: failedAt === '' ? null : failedAt,
    finishedOn: finishedOn === '' ? null : finishedOn,
    storedLength: Number(storedLength),
    refused,
  };
  if (!job.replicas) return { state };
  // WAIT once the pipeline has answered, not inside it: ioredis sends a script Redis did not have
  // (NOSCRIPT, after a failover or SCRIPT FLUSH) again after the pipeline, so a WAIT inside it could
  // confirm the writes made before the job. One WAIT serves every add of the batch.
  try {
    return { state, replicas: await batch.confirmations(job.replicas, queue.toKey(jobId)) };
  } catch (err) {
    throw new AfterTheAdd(err);
  }
}

type PipelineClient = { pipeline(): ChainableCommander & AddedCommands };

/** The adds of one turn of the event loop to one queue on one client, sent as one pipeline. */
interface AddBatch {
  readonly pipeline: ChainableCommander & AddedCommands;
  /** The pipeline's results, once it ran. */
  readonly results: Promise<[Error | null, unknown][]>;
  /** Stops the batch: its pipeline is never sent, and every add on it fails with `err`. */
  refuse(err: Error): void;
  /**
   * Replicas that confirmed every write of the batch (one `WAIT` after its pipeline answered, shared by
   * the adds that ask with the same settings).
   * @param routeKey a key of the queue, so that on a cluster the `WAIT` goes to the queue's master
   */
  confirmations(replicas: { count: number; timeoutMs: number }, routeKey: string): Promise<number>;
}

/** The open batch of each queue (by its key prefix) on each client. */
const openBatches = new WeakMap<object, Map<string, AddBatch>>();

/**
 * The pipeline the adds of this turn of the event loop share on `client`
 * (a new one for the first): sent once the turn's I/O callbacks have run
 * (`setImmediate`), so that messages that arrived together, on many SMTP
 * connections of the relay or from many `sendMail` calls, cost one pipeline
 * and one write to Redis instead of one each. ioredis builds a pipeline by
 * copying every script defined on the client (BullMQ's 60-odd and ours):
 * about as much CPU as the rest of an add. Each add keeps its own commands
 * together and in order (add, read), and reads only its own answers:
 * Redis runs a pipeline's commands one after the other, as it ran one
 * pipeline per add after another, with other clients' commands possibly in
 * between, then as now.
 */
function openBatch(client: PipelineClient, queueKey: string): AddBatch {
  let open = openBatches.get(client);
  if (!open) openBatches.set(client, (open = new Map()));
  const batches = open;
  const existing = batches.get(queueKey);
  if (existing) return existing;
  const pipeline = client.pipeline();
  let refused: Error | undefined;
  let settle!: (run: Promise<[Error | null, unknown][]>) => void;
  const results = new Promise<[Error | null, unknown][]>((resolve) => (settle = resolve));
  // Each add awaits these; an add refused before they came has thrown already.
  results.catch(() => undefined);
  const close = () => {
    if (batches.get(queueKey) === batch) batches.delete(queueKey);
  };
  const waits = new Map<string, Promise<number>>();
  const batch: AddBatch = {
    pipeline,
    results,
    refuse(err) {
      refused ??= err;
      close();
    },
    confirmations(replicas, routeKey) {
      const key = `${replicas.count}/${replicas.timeoutMs}`;
      let wait = waits.get(key);
      if (!wait) {
        wait = waitForReplicas(client as unknown as OutboxRedisClient, routeKey, replicas);
        waits.set(key, wait);
      }
      return wait;
    },
  };
  batches.set(queueKey, batch);
  setImmediate(() => {
    close();
    settle(
      refused
        ? Promise.reject(refused)
        : (pipeline.exec() as Promise<[Error | null, unknown][] | null>).then((r) => r ?? []),
    );
  });
  return batch;
}

function loadBullmqVersion(): string {
  return requireQueuePeers().bullmq;
}

/**
 * `WAIT count timeoutMs` on the connection that wrote the job: replicas that
 * confirmed every write made on it so far. Sent with a read of `routeKey` in
 * one pipeline, so that on a cluster it goes to the master of the queue's
 * slot, over the connection the writes went through (`WAIT` alone names no
 * key, and would go to any node).
 *
 * @returns how many replicas confirmed
 */
export async function waitForReplicas(
  redis: OutboxRedisClient,
  routeKey: string,
  replicas: { count: number; timeoutMs: number },
): Promise<number> {
  const results = (await redis.pipeline().exists(routeKey).wait(replicas.count, replicas.timeoutMs).exec()) ?? [];
  const [err, confirmed] = results[1] ?? [new Error('WAIT was not run')];
  if (err) throw err;
  return Number(confirmed);
}

/**
 * What a `sendMail` whose idempotency key already had a job does: the job
 * id is the key, so BullMQ keeps the job it has and ignores the new one; the
 * producer then looks at that job.
 *
 * - waiting, delayed, active or sent: a duplicate; the new content is dropped
 *   and the info describes the job queued first (as before).
 * - failed, and the service cannot hold its key (no attempt of it may have
 *   been accepted): **replaced** by the new message, put back with a fresh
 *   schedule. The caller may have corrected it; and a new body under a key
 *   the service never accepted is a new send to it.
 * - failed, and an attempt may have been accepted (within the window):
 *   **retried**, put back with its own bytes. The service replays the key's
 *   first answer for those, and refuses a new body under it (422
 *   `idempotency_key_reused`; a rebuilt message has a new Date and
 *   Message-ID).
 * - failed and parked for a person (stalls, or past the idempotency window):
 *   not touched; `sendMail` rejects saying why.
 *
 * The change of a failed job is a compare-and-set of its data in one Lua
 * script (still failed, data as read), which also marks the data with the
 * failure it takes over (`putBackFrom`: the job's `finishedOn`); then the job
 * is put back (BullMQ's `job.retry`). Of producers racing, one replaces or
 * puts back the job; the others find its data changed, or, looking between
 * the two steps, the failure taken over already, and answer duplicate.
 */

/**
 * How a `sendMail` was settled against the job its idempotency key names.
 */
export type DuplicateSettlement =
  | { kind: 'new' }
  | { kind: 'duplicate'; data: OutboxJobData }
  | { kind: 'retried'; data: OutboxJobData }
  | { kind: 'replaced'; removeContent: string | undefined }
  | { kind: 'lost' }
  | { kind: 'gone' };

/**
 * KEYS: job hash, failed set, the new content's key. ARGV: job id, data as
 * read, new data, the stored length the new content must have ('' when
 * there is none to check: content in the job, or a put-back).
 * Sets the data only while the job is failed and its data is as read, and
 * only over new content that is whole: checked in the same step, since once
 * the job is put back a worker may send it and delete its content at once
 * (a check after it took that for content Redis lost: review F3). Answers -1
 * when the new content is not whole (Redis lost it), 0 when another producer
 * changed the job, 1 when it set the data, and 1 too when the data is already
 * exactly the new data: ioredis sends a command again after reconnecting when
 * its reply was lost, and that second run must not take the first one's
 * change for another producer's (the producer would then remove its own
 * content, which the job points at: review F1). The new data is this
 * producer's alone: it names the content key of this `sendMail`
 * (`contentKey`, or `putBackBy` for a put-back).
 */
const SET_IF_UNCHANGED = `
local data = redis.call('HGET', KEYS[1], 'data')
if data == ARGV[3] then return 1 end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
if data ~= ARGV[2] then return 0 end
if ARGV[4] ~= '' then
  if redis.call('TYPE', KEYS[3]).ok ~= 'string' then return -1 end
  if redis.call('STRLEN', KEYS[3]) ~= tonumber(ARGV[4]) then return -1 end
end
redis.call('HSET', KEYS[1], 'data', ARGV[3])
return 1
`;

/**
 * Settles a `sendMail` whose job was just added (or ignored by BullMQ as a
 * duplicate id) with `ours` as its data, from what the id held right after
 * the add (read in the same round trip, see add-job.ts). Returns `gone` when
 * no job has the id any more (removed between the add and the look): add it
 * again; `lost` when this content is not whole (Redis lost it, or the
 * sweeper freed it once the send was given up): the add was refused, or a
 * failed job would have been replaced by it; the job is left as it was.
 * Only a failed job takes more round trips.
 *
 * @param storedLength the stored length `ours` has under its content key (none: content in the job)
 * @param now the producer's clock, for a job's `resendUntil` @default Date.now()
 * @throws {EmlApiError} `EMESSAGE` (permanent, with `idempotencyKey` and `queueId`) when the job was parked for a person
 */
export async function settleDuplicate(
  queue: Queue<OutboxJobData, OutboxSendResult>,
  redis: OutboxRedisClient,
  jobId: string,
  ours: OutboxJobData,
  added: AddedState,
  storedLength: number | undefined,
  now = Date.now(),
): Promise<DuplicateSettlement> {
  const jobKey = queue.toKey(jobId);
  const failedKey = queue.toKey('failed');
  const { data: raw, failedAt, finishedOn: finished } = added;
  // Refused for want of this content, whole: no job points at it but one an earlier run of this add made.
  if (added.refused && (raw === null || (JSON.parse(raw) as OutboxJobData).contentKey !== ours.contentKey)) {
    return { kind: 'lost' };
  }
  if (raw === null) return { kind: 'gone' };
  const stored = JSON.parse(raw) as OutboxJobData;
  if (stored.contentKey === ours.contentKey) return { kind: 'new' };
  if (failedAt === null) return { kind: 'duplicate', data: stored };
  const finishedOn = Number(finished);
  if (stored.putBackFrom === finishedOn) {
    // Another producer took this very failure over and is putting the job back (or died doing it): help it.
    if ((await putBack(queue, jobId)) === 'gone') return { kind: 'gone' };
    return { kind: 'duplicate', data: stored };
  }

  const parked = stored.lastError?.parked ?? (stored.resendUntil !== undefined && stored.resendUntil <= now);
  if (parked) throw parkedJobError(stored, jobId);
  // The service holds the key with another message it accepted: any message under it gets 422 again.
  if (stored.lastError?.apiCode === 'idempotency_key_reused') throw keyUsedError(stored, jobId);
  // The service may hold the key with the job's own bytes: those go again, and only those.
  const retry =
    stored.possiblyAcceptedAt !== undefined &&
    !stored.contentRemoved &&
    (stored.inline !== undefined || (await redis.exists(stored.contentKey)) === 1);
  // A replacement keeps the job, BullMQ's stall counter included: it takes the count of the stalls already
  // seen too, or its first run would find stalls it never had (review F13 a).
  const seen = stored.stallsSeen === undefined ? {} : { stallsSeen: stored.stallsSeen };
  // Each producer's change is its own (putBackBy, or its content key): the compare-and-set can tell it.
  const next: OutboxJobData = {
    ...(retry ? { ...stored, stalls: 0, putBackBy: ours.contentKey } : { ...ours, ...seen }),
    putBackFrom: finishedOn,
  };
  const whole = retry || storedLength === undefined ? '' : String(storedLength);
  const set = await redis.eval(
    SET_IF_UNCHANGED,
    3,
    jobKey,
    failedKey,
    ours.contentKey,
    jobId,
    raw,
    JSON.stringify(next),
    whole,
  );
  if (set === -1) return { kind: 'lost' };
  if (set !== 1) {
    // Another producer changed it first. Should it have died before putting the job back, do it for it.
    const job = await queue.getJob(jobId);
    if (!job) return { kind: 'gone' };
    if ((await job.isFailed()) && (await putBack(queue, jobId)) === 'gone') return { kind: 'gone' };
    return { kind: 'duplicate', data: job.data };
  }
  // Put back after the data is set: a worker never takes it with the data it failed with.
  if ((await putBack(queue, jobId)) === 'gone') return { kind: 'gone' };
  if (retry) return { kind: 'retried', data: next };
  // Ours is the job's data now; the info describes it.
  return {
    kind: 'replaced',
    removeContent: stored.contentRemoved || stored.inline !== undefined ? undefined : stored.contentKey,
  };
}

/**
 * A failed job whose data a `sendMail` set (or found set by another producer)
 * could not be put back in the queue: Redis did not answer, or refused. It
 * may be back or still failed; a `sendMail` with the same key finishes the
 * put-back (it finds the failure taken over, see `putBackFrom`).
 */
export class PutBackFailed extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'PutBackFailed';
  }
}

/**
 * Puts a failed job back with a fresh schedule: `back` once it is out of the
 * failed set (put back now, or a moment before by another producer), `gone`
 * when no job has the id any more (removed meanwhile).
 * @throws {PutBackFailed} when Redis did not take the change (the job may be failed still)
 */
async function putBack(queue: Queue<OutboxJobData, OutboxSendResult>, jobId: string): Promise<'back' | 'gone'> {
  let job: Awaited<ReturnType<typeof queue.getJob>>;
  try {
    job = await queue.getJob(jobId);
    if (!job) return 'gone';
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    return 'back';
  } catch (err) {
    // BullMQ refuses a job that is not failed: put back by another producer meanwhile, unless it is gone.
    let state: string;
    try {
      state = await queue.getJobState(jobId);
    } catch {
      throw new PutBackFailed(err);
    }
    if (state === 'failed') throw new PutBackFailed(err);
    return state === 'unknown' ? 'gone' : 'back';
  }
}

function keyUsedError(stored: OutboxJobData, jobId: string): EmlApiError {
  return new EmlApiError(
    'EMESSAGE',
    `The message queued under this idempotencyKey (job ${jobId}) failed because the service had already accepted ` +
      'another message under this idempotencyKey (422 idempotency_key_reused), which it delivered: the key is spent. ' +
      'Not queued; to send another message, give it a new idempotencyKey',
    { permanent: true, idempotencyKey: stored.idempotencyKey, queueId: jobId },
  );
}

function parkedJobError(stored: OutboxJobData, jobId: string): EmlApiError {
  const why =
    stored.lastError?.parked === 'stalls'
      ? 'it stalled again and again (each time, the worker sending it stopped before it finished: a message that crashes workers?), and an attempt may have been delivered'
      : "it may have been delivered (an attempt's outcome is unknown) and the service's idempotency window has passed, so sending it again could deliver it twice";
  return new EmlApiError(
    'EMESSAGE',
    `The message queued under this idempotencyKey (job ${jobId}) failed and was parked for a person: ${why}. Not queued again; check whether it arrived, then put it back with eml-api queue retry ${jobId}`,
    { permanent: true, idempotencyKey: stored.idempotencyKey, queueId: jobId },
  );
}
