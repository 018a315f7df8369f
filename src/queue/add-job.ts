import type { JobsOptions, Queue } from 'bullmq';
import type { ChainableCommander } from 'ioredis';
import type { OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { loadBullmq, requireQueuePeers } from './queue-peers.js';
import type { OutboxRedisClient } from './redis-connection.js';

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
 * @example
 * const { data, failedAt } = (await addJob(queue, redis, job)).state;
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
}

/**
 * The outcome of {@link addJob}.
 * @example
 * const added: AddedJob = await addJob(queue, redis, { name: 'eml', data, opts, contentKey });
 */
export interface AddedJob {
  state: AddedState;
  /** Replicas that confirmed every write of this connection so far (`WAIT`), when asked. */
  replicas?: number;
}

/**
 * KEYS: job hash, failed set, content key. ARGV: job id. The job's data,
 * failed score and `finishedOn`, and the stored length of the content, as
 * they stand together.
 */
const ADDED = `
local data = redis.call('HGET', KEYS[1], 'data')
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
 * @example
 * if (!whole && !finishedByWorker(added.state)) throw lost();
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
 * @example
 * if (err instanceof AfterTheAdd) throw redisFailure(err.cause, doing, true, send);
 */
export class AfterTheAdd extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'AfterTheAdd';
  }
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
 * @example
 * const { state } = await addJob(queue, redis, { name: 'eml', data, opts, contentKey, replicas: { count: 1, timeoutMs: 500 } });
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
  // From here to the last command of this add, nothing awaits: the add's commands stay together on a
  // pipeline other adds of this turn share.
  const batch = openBatch(client);
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
  if (job.replicas) pipeline.wait(job.replicas.count, job.replicas.timeoutMs);
  const results = await batch.results;
  const [addError, addResult] = results[added] ?? [new Error('the add was not run')];
  if (addError) throw addError;
  if (typeof addResult === 'number' && addResult < 0) {
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
  };
  if (!job.replicas) return { state };
  const [waitError, replicas] = results[added + 2]!;
  if (waitError) throw new AfterTheAdd(waitError);
  return { state, replicas: Number(replicas) };
}

type PipelineClient = { pipeline(): ChainableCommander & AddedCommands };

/** The adds of one turn of the event loop on one client, sent as one pipeline. */
interface AddBatch {
  readonly pipeline: ChainableCommander & AddedCommands;
  /** The pipeline's results, once it ran. */
  readonly results: Promise<[Error | null, unknown][]>;
  /** Stops the batch: its pipeline is never sent, and every add on it fails with `err`. */
  refuse(err: Error): void;
}

const openBatches = new WeakMap<object, AddBatch>();

/**
 * The pipeline the adds of this turn of the event loop share on `client`
 * (a new one for the first): sent once the turn's I/O callbacks have run
 * (`setImmediate`), so that messages that arrived together, on many SMTP
 * connections of the relay or from many `sendMail` calls, cost one pipeline
 * and one write to Redis instead of one each. ioredis builds a pipeline by
 * copying every script defined on the client (BullMQ's 60-odd and ours):
 * about as much CPU as the rest of an add. Each add keeps its own commands
 * together and in order (add, read, `WAIT`), and reads only its own answers:
 * Redis runs a pipeline's commands one after the other, as it ran one
 * pipeline per add after another, with other clients' commands possibly in
 * between, then as now.
 */
function openBatch(client: PipelineClient): AddBatch {
  const open = openBatches.get(client);
  if (open) return open;
  const pipeline = client.pipeline();
  let refused: Error | undefined;
  let settle!: (run: Promise<[Error | null, unknown][]>) => void;
  const results = new Promise<[Error | null, unknown][]>((resolve) => (settle = resolve));
  // Each add awaits these; an add refused before they came has thrown already.
  results.catch(() => undefined);
  const batch: AddBatch = {
    pipeline,
    results,
    refuse(err) {
      refused ??= err;
      if (openBatches.get(client) === batch) openBatches.delete(client);
    },
  };
  openBatches.set(client, batch);
  setImmediate(() => {
    if (openBatches.get(client) === batch) openBatches.delete(client);
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
 * @example
 * const confirmed = await waitForReplicas(redis, queue.toKey(jobId), { count: 1, timeoutMs: 500 });
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
