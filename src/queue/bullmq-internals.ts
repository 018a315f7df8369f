import type { JobsOptions, Queue } from 'bullmq';
import type { ChainableCommander } from 'ioredis';
import { loadBullmq, requireQueuePeers, type OutboxRedisClient } from './redis-connection.js';

/*
 * Every use the outbox makes of BullMQ beyond its documented API; test/queue/bullmq-internals.test.ts
 * fails, naming what changed, on a release that breaks one: its key names, its add scripts (named
 * `addStandardJob`... on the ioredis client, the job's data as JSON in ARGV[2]), and `Job#addJob(client)`
 * queueing exactly one command on a pipeline given as its client (BullMQ's own `addBulk` relies on it).
 */

/** BullMQ's own keys of a queue (`{prefix}:{queue}:{name}`, its `QueueKeys`). */
export const BULLMQ_KEY_NAMES: ReadonlySet<string> = new Set([
  'active',
  'wait',
  'waiting-children',
  'paused',
  'id',
  'delayed',
  'prioritized',
  'stalled-check',
  'completed',
  'failed',
  'stalled',
  'repeat',
  'limiter',
  'meta',
  'events',
  'pc',
  'marker',
  'de',
]);

/** BullMQ 5 and 6 name them with their version after a colon. */
export const ADD_SCRIPT = /^add(Standard|Prioritized|Delayed)Job(:|$)/;

/** BullMQ 5's `queue.client`, BullMQ 6's `queue.getBackend().client`. */
export async function queueClient(queue: object): Promise<OutboxRedisClient> {
  const q = queue as { getBackend?: () => { client: Promise<OutboxRedisClient> }; client?: Promise<OutboxRedisClient> };
  return (await (q.getBackend ? q.getBackend().client : q.client))!;
}

const guarded = new WeakSet<object>();

/**
 * Puts `lua` before each of BullMQ's add scripts on `redis` (once the queue's client has resolved), in the same step
 * as the add; `lua` reads the job's data from ARGV[2] and may `return` a negative code to refuse the add.
 * @throws {Error} naming the BullMQ version when it defines no add script the outbox knows
 */
export function guardAddScripts(redis: OutboxRedisClient, lua: string): void {
  if (guarded.has(redis)) return;
  const scripts = (redis as unknown as { scriptsSet?: Record<string, { lua: string; numberOfKeys: number | null }> })
    .scriptsSet;
  const adds = Object.entries(scripts ?? {}).filter(([name]) => ADD_SCRIPT.test(name));
  if (adds.length === 0)
    throw changed('defines no add script named addStandardJob, addPrioritizedJob or addDelayedJob');
  for (const [name, script] of adds) {
    if (script.lua.startsWith(lua)) continue;
    redis.defineCommand(name, { numberOfKeys: script.numberOfKeys ?? undefined, lua: lua + script.lua });
  }
  guarded.add(redis);
}

/**
 * Queues BullMQ's add of a job on `pipeline` as one command, answered with the pipeline: the job id,
 * or a negative code. Nothing awaits, so the caller's commands that follow stay next to it.
 * @throws {Error} naming the BullMQ version when it queued more or less than one command
 */
export function queueAdd(
  queue: Queue,
  pipeline: ChainableCommander,
  job: { name: string; data: unknown; opts: JobsOptions & { jobId: string } },
): void {
  const { Job } = loadBullmq();
  const bullJob = new Job(queue, job.name, job.data, job.opts, job.opts.jobId);
  const before = pipeline.length;
  void Promise.resolve(bullJob.addJob(pipeline as never)).catch(() => undefined);
  if (pipeline.length !== before + 1)
    throw changed(`queued ${pipeline.length - before} commands to add a job, not one`);
}

function changed(what: string): Error {
  return new Error(
    `BullMQ ${requireQueuePeers().bullmq} ${what}, which the outbox relies on: install a BullMQ release this version of nodemailer-eml-api supports`,
  );
}
