import type { JobsOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { loadBullmq, requireQueuePeers, type OutboxRedisClient } from './redis-connection.js';

/*
 * Every use the outbox makes of BullMQ beyond its documented API: test/queue/bullmq-internals.test.ts fails, naming
 * what changed, on a release that breaks one.
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

/** BullMQ 5's `worker.blockingConnection.client`, BullMQ 6's `worker.getBackend().blockingClient`. */
export async function blockingClient(worker: object): Promise<Redis | undefined> {
  const w = worker as {
    getBackend?: () => { blockingClient?: Promise<Redis> };
    blockingConnection?: { client: Promise<Redis> };
  };
  return w.getBackend ? w.getBackend().blockingClient : w.blockingConnection?.client;
}

/**
 * Ends the blocking connection of `worker` at once if it waits to reconnect, failing the wait for jobs it holds. BullMQ's
 * graceful close disconnects it and waits for its end, which ioredis never gives such a connection: it drops the
 * retry timer and stays `reconnecting`. ioredis ends at once only a connection it has not begun (`wait`), which one
 * waiting to reconnect is as much; call this once BullMQ is closing, so that it takes the failed wait for its close.
 */
export async function endReconnectingBlockingConnection(worker: object): Promise<void> {
  const client = await blockingClient(worker).catch(() => undefined);
  if (client?.status !== 'reconnecting') return;
  (client as { status: string }).status = 'wait';
  client.disconnect();
}

/** BullMQ's add of one job: its script's name on the client, and its keys then ARGV. */
export interface AddCommand {
  script: string;
  args: unknown[];
  /** The job's data as JSON, for ARGV[2], when given instead of BullMQ's own (which is then `{}`). */
  data?: string;
}

/**
 * BullMQ's add of a job as one command, built by `Job#addJob` against a client that only records it (nothing is sent).
 * @throws {Error} naming the BullMQ version when it asked for more or less than one add script
 */
export function addCommand(
  queue: Queue,
  job: { name: string; data: unknown; opts: JobsOptions & { jobId: string } },
  json?: string,
): AddCommand {
  const { Job } = loadBullmq();
  // BullMQ's JSON.stringify is slow on long strings (inline content); it checks the data's size only with `sizeLimit`.
  const data = json !== undefined && job.opts.sizeLimit === undefined ? json : undefined;
  const bullJob = new Job(queue, job.name, data === undefined ? job.data : {}, job.opts, job.opts.jobId);
  const seen: AddCommand[] = [];
  // BullMQ 6 calls `runCommand(name, args)` on the client it is given, BullMQ 5 `client[name](args)`.
  const record = (script: string, args: unknown) => {
    seen.push({ script, args: Array.isArray(args) ? args : [args] });
    return recorder;
  };
  const recorder: object = new Proxy(
    {},
    {
      get: (_target, prop) =>
        prop === 'runCommand'
          ? record
          : typeof prop === 'string' && prop !== 'then'
            ? (args: unknown) => record(prop, args)
            : undefined,
    },
  );
  void Promise.resolve(bullJob.addJob(recorder as never)).catch(() => undefined);
  const [command] = seen;
  if (seen.length !== 1 || !ADD_SCRIPT.test(command!.script)) {
    throw changed(`asked for ${seen.map((c) => c.script).join(', ') || 'no command'} to add a job, not one add script`);
  }
  return data === undefined ? command! : { ...command!, data };
}

const combined = new WeakMap<object, Map<string, { name: string; keys: number }>>();

/** Lua of the step after an add, given its own keys and ARGV. */
export interface AddRead {
  /** Run after the add, with the job's data as sent (DATA). */
  lua: string;
  keys: number;
  args: number;
  /** Run before it: an answer other than nil stands for the add's, which is then not run. */
  before?: string;
}

/**
 * Runs `read.before`, `guard`, then BullMQ's add `command`, then `read` (given `readKeys`, `readArgs` and the job's
 * data as sent), in one step, as a script defined on `redis` once; answers `[add's answer, read's answer]` and the
 * data sent. `guard` reads the job's data from ARGV[2] and may `return` a negative code to refuse the add.
 * @throws {Error} naming the BullMQ version when `redis` has no such script
 */
export function runGuardedAdd(
  redis: OutboxRedisClient,
  command: AddCommand,
  guard: string,
  read: AddRead,
  readKeys: readonly string[],
  readArgs: readonly string[],
): { answer: Promise<[unknown, unknown]>; data: string } {
  const { name, keys } = defineGuardedAdd(redis, command.script, guard, read);
  const run = (redis as unknown as Record<string, (...args: unknown[]) => Promise<[unknown, unknown]>>)[name]!;
  const args = [...command.args];
  if (command.data !== undefined) {
    if (args[keys + 1] !== '{}') throw changed("took a job's data elsewhere than ARGV[2] of its add script");
    args[keys + 1] = command.data;
  }
  const data = args[keys + 1];
  if (typeof data !== 'string') throw changed("took a job's data elsewhere than ARGV[2] of its add script");
  const answer = run.call(redis, ...args.slice(0, keys), ...readKeys, ...args.slice(keys), ...readArgs);
  return { answer, data };
}

/** The guarded add's name on `redis` and the keys of BullMQ's script, defined once per client. */
function defineGuardedAdd(
  redis: OutboxRedisClient,
  script: string,
  guard: string,
  read: AddRead,
): { name: string; keys: number } {
  let names = combined.get(redis);
  if (!names) combined.set(redis, (names = new Map()));
  const known = names.get(script);
  if (known) return known;
  const add = bullmqScripts(redis)[script];
  if (!add || typeof add.numberOfKeys !== 'number')
    throw changed(`defines no add script ${script} with its keys counted`);
  const lua = `local function bullmqAdd(KEYS, ARGV)
${guard}
${add.lua}
end
local function read(KEYS, ARGV, DATA)
${read.lua}
end
local function before(KEYS, ARGV)
${read.before ?? 'return nil'}
end
local addKeys, addArgs, readKeys, readArgs = {}, {}, {}, {}
for i = 1, #KEYS do
  if i <= ${add.numberOfKeys} then addKeys[i] = KEYS[i] else readKeys[#readKeys + 1] = KEYS[i] end
end
for i = 1, #ARGV do
  if i <= #ARGV - ${read.args} then addArgs[i] = ARGV[i] else readArgs[#readArgs + 1] = ARGV[i] end
end
local added = before(readKeys, readArgs)
if added == nil then added = bullmqAdd(addKeys, addArgs) end
return { added, read(readKeys, readArgs, addArgs[2]) }
`;
  const name = `emlApiGuarded:${script}`;
  redis.defineCommand(name, { numberOfKeys: add.numberOfKeys + read.keys, lua });
  const defined = { name, keys: add.numberOfKeys };
  names.set(script, defined);
  return defined;
}

/** BullMQ 5 and 6 name it with their version after a colon. */
export const FINISH_SCRIPT = /^moveToFinished(:|$)/;

/** In its keys, where BullMQ's script that finishes a job has the job's hash (its KEYS[12]). */
const FINISHED_JOB_KEY = 11;

/**
 * The job BullMQ's finish took next (in its answer, under the same lock token), and that lock, on the finished job's
 * hash: a resent finish answers it again, whose first answer was lost with the job in it.
 */
const NEXT_JOB = 'emlApiNextJob';
const NEXT_LOCK = 'emlApiNextLock';

/** What runs before BullMQ's finish of one job: its keys and ARGV, and what to do with its answer. */
export interface BeforeFinish {
  keys: readonly string[];
  args: readonly string[];
  answered(answer: unknown): void;
  failed(err: unknown): void;
}

const finishing = new WeakMap<object, (jobKey: string) => BeforeFinish | undefined>();

/**
 * Makes BullMQ's finish of a job (to completed or failed, taking the next) on `redis` run `lua` first, in the same
 * step, when `take(job hash)` gives it keys and ARGV for that job; BullMQ's own script otherwise. `lua` takes
 * `keys` keys and `args` arguments. When it answers `ranAlready`, the finish is a resend of one that ran (its reply
 * lost): BullMQ's is not run again, which would answer that the lock is missing; the finish answers the job the first
 * run took next, while its lock is the one it took it with, else "finished, no next job" (0). Once per client; later
 * calls change nothing.
 * @returns false when BullMQ defines no such script on `redis` (yet): nothing was changed
 */
export function runBeforeFinish(
  redis: OutboxRedisClient,
  lua: { lua: string; keys: number; args: number; ranAlready: number },
  take: (jobKey: string) => BeforeFinish | undefined,
): boolean {
  if (finishing.has(redis)) return true;
  const [name, finish] = Object.entries(bullmqScripts(redis)).find(([n]) => FINISH_SCRIPT.test(n)) ?? [];
  if (name === undefined || typeof finish?.numberOfKeys !== 'number') return false;
  const keys = finish.numberOfKeys;
  const combined = `emlApiBefore:${name}`;
  redis.defineCommand(combined, {
    numberOfKeys: keys + lua.keys,
    lua: `local function before(KEYS, ARGV)
${lua.lua}
end
local function bullmqFinish(KEYS, ARGV)
${finish.lua}
end
local finishKeys, finishArgs, ownKeys, ownArgs = {}, {}, {}, {}
for i = 1, #KEYS do
  if i <= ${keys} then finishKeys[i] = KEYS[i] else ownKeys[#ownKeys + 1] = KEYS[i] end
end
for i = 1, #ARGV do
  if i <= #ARGV - ${lua.args} then finishArgs[i] = ARGV[i] else ownArgs[#ownArgs + 1] = ARGV[i] end
end
local jobKey, jobId = KEYS[${FINISHED_JOB_KEY + 1}], ARGV[1]
-- Another job's hash: the finished one's key with the id swapped; nil should that key not end in its id.
local function keyOf(id)
  if string.sub(jobKey, -#jobId) ~= jobId then return nil end
  return string.sub(jobKey, 1, #jobKey - #jobId) .. id
end
local done = before(ownKeys, ownArgs)
if done == ${lua.ranAlready} then
  local nextId, nextLock = unpack(redis.call('HMGET', jobKey, '${NEXT_JOB}', '${NEXT_LOCK}'))
  local nextKey = nextId and keyOf(nextId)
  if nextKey and redis.call('GET', nextKey .. ':lock') == nextLock then
    return { done, { redis.call('HGETALL', nextKey), nextId, 0, 0 } }
  end
  return { done, 0 }
end
local finished = bullmqFinish(finishKeys, finishArgs)
local nextKey = type(finished) == 'table' and type(finished[2]) == 'string' and keyOf(finished[2])
if nextKey and redis.call('EXISTS', jobKey) == 1 then
  local lock = redis.call('GET', nextKey .. ':lock')
  if lock then redis.call('HSET', jobKey, '${NEXT_JOB}', finished[2], '${NEXT_LOCK}', lock) end
end
return { done, finished }
`,
  });
  const client = redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const original = client[name]!;
  const run = client[combined]!;
  client[name] = function (this: unknown, ...input: unknown[]) {
    // BullMQ 6 passes its keys and ARGV as one array.
    const args = input.length === 1 && Array.isArray(input[0]) ? (input[0] as unknown[]) : input;
    const jobKey = args[FINISHED_JOB_KEY];
    const before = typeof jobKey === 'string' ? take(jobKey) : undefined;
    if (!before) return original.apply(this, input);
    const answer = run.call(redis, ...args.slice(0, keys), ...before.keys, ...args.slice(keys), ...before.args);
    return (answer as Promise<[unknown, unknown]>).then(
      ([done, finished]) => {
        before.answered(done);
        return finished;
      },
      (err: unknown) => {
        before.failed(err);
        throw err;
      },
    );
  };
  finishing.set(redis, take);
  return true;
}

/** The Lua scripts BullMQ defined on the client, by command name. */
function bullmqScripts(redis: OutboxRedisClient): Record<string, { lua: string; numberOfKeys: number | null }> {
  return (redis as unknown as { scriptsSet?: ReturnType<typeof bullmqScripts> }).scriptsSet ?? {};
}

function changed(what: string): Error {
  return new Error(
    `BullMQ ${requireQueuePeers().bullmq} ${what}, which the outbox relies on: install a BullMQ release this version of nodemailer-eml-api supports`,
  );
}
