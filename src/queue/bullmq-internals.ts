import type { JobsOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { loadBullmq, requireQueuePeers, type OutboxRedisClient } from './redis-connection.js';
import { hasLoneSurrogate } from '../protocol/message-format.js';

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

/** A job to add: `options` (BullMQ's, without `jobId`) are read once per object, and must not change after. */
export interface JobToAdd {
  name: string;
  data: unknown;
  options: JobsOptions;
  jobId: string;
}

/**
 * BullMQ's add of a job as one command, built by `Job#addJob` against a client that only records it (nothing is sent).
 * With `json`, the command of a queue, job name and options is built by BullMQ once and then reused, with each job's
 * id and timestamp put in (see {@link AddTemplate}).
 * @throws {Error} naming the BullMQ version when it asked for more or less than one add script
 */
export function addCommand(queue: Queue, job: JobToAdd, json?: string): AddCommand {
  // BullMQ's JSON.stringify is slow on long strings (inline content); it checks the data's size only with `sizeLimit`.
  if (json === undefined || job.options.sizeLimit !== undefined) return recordAdd(queue, job).command;
  const template = addTemplate(queue, job);
  const header = stringHeaderSize(job.jobId);
  const now = Date.now();
  const fit = fits(job.jobId, now);
  if (template?.checked.has(header) && fit) {
    return { script: template.script, args: template.fill(job.jobId, now), data: json };
  }
  const own = recordAdd(queue, { ...job, data: {} });
  // An id of a length not seen yet has a MessagePack header of another size: checked against BullMQ's own once (with
  // an id and time the template can take: another would forget it for every add after).
  if (template && fit && fits(job.jobId, own.timestamp)) {
    if (sameCommand(template.fill(job.jobId, own.timestamp), own.command.args)) template.checked.add(header);
    else forget(queue, job);
  }
  return { ...own.command, data: json };
}

/**
 * Whether a template gives BullMQ's command for this id and time, which the checks (one per size of the id's header)
 * cannot tell: msgpackr packs a lone surrogate as 3 bytes of its own (Buffer's UTF-8 writes U+FFFD), and a time that
 * fits 32 bits as an integer (the template has a float 64); BullMQ refuses an integer id and most with ':'.
 */
function fits(jobId: string, now: number): boolean {
  return (
    now >>> 0 !== now &&
    now >> 0 !== now &&
    !hasLoneSurrogate(jobId) &&
    !jobId.includes(':') &&
    `${parseInt(jobId, 10)}` !== jobId
  );
}

/** BullMQ's add of `job`, recorded, and the timestamp its Job took. */
function recordAdd(queue: Queue, job: JobToAdd): { command: AddCommand; timestamp: number } {
  const { Job } = loadBullmq();
  const opts = { ...job.options, jobId: job.jobId };
  const bullJob = new Job(queue, job.name, job.data, opts, job.jobId);
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
  return { command: command!, timestamp: bullJob.timestamp };
}

/**
 * The add command of one queue, job name and options (data `{}`), with the places of the job's id and timestamp in
 * its MessagePack arguments. Building a BullMQ Job and packing its arguments for every job cost the relay more CPU
 * than the rest of its Redis write.
 */
interface AddTemplate {
  script: string;
  fill(jobId: string, timestamp: number): unknown[];
  /** The sizes of the id's MessagePack header the template was checked with against BullMQ's command. */
  checked: Set<number>;
}

/** Per queue, per options object, per job name; null where BullMQ builds every add. */
const templates = new WeakMap<object, WeakMap<object, Map<string, AddTemplate | null>>>();

function templatesOf(queue: Queue, job: JobToAdd): Map<string, AddTemplate | null> {
  let byOptions = templates.get(queue);
  if (!byOptions) templates.set(queue, (byOptions = new WeakMap()));
  let byName = byOptions.get(job.options);
  if (!byName) byOptions.set(job.options, (byName = new Map()));
  return byName;
}

/** A template that did not give BullMQ's command: BullMQ builds every add of its kind from now on. */
function forget(queue: Queue, job: JobToAdd): void {
  templatesOf(queue, job).set(job.name, null);
}

/**
 * The template of `job`'s add, made once; null when BullMQ's command does not come out the same from it (a BullMQ
 * that packs the id or time otherwise, options that vary with them).
 */
function addTemplate(queue: Queue, job: JobToAdd): AddTemplate | null {
  const known = templatesOf(queue, job);
  const found = known.get(job.name);
  if (found !== undefined) return found;
  const build = (jobId: string) => recordAdd(queue, { ...job, data: {}, jobId });
  // Two ids of different lengths: a template filled with the second must give BullMQ's own command for it.
  const first = build('emlApiTemplateId');
  const second = build('emlApiTemplateIdCheck');
  const template = makeTemplate(first.command, 'emlApiTemplateId', first.timestamp);
  const made =
    template && sameCommand(template.fill('emlApiTemplateIdCheck', second.timestamp), second.command.args)
      ? template
      : null;
  made?.checked.add(stringHeaderSize('emlApiTemplateIdCheck'));
  known.set(job.name, made);
  return made;
}

/** A part of an argument: bytes kept, or where the id or the timestamp goes. */
type Piece = Buffer | 'id' | 'time';

function makeTemplate(command: AddCommand, jobId: string, timestamp: number): AddTemplate | null {
  const id = packedString(jobId);
  const time = Buffer.alloc(TIME_BYTES);
  writeTime(time, 0, timestamp);
  let times = 0;
  const parts = command.args.map((arg): Piece[] | undefined => {
    if (typeof arg === 'string') return arg.includes(jobId) ? [] : undefined;
    if (!Buffer.isBuffer(arg)) return undefined;
    const pieces: Piece[] = [];
    let from = 0;
    for (;;) {
      const atId = arg.indexOf(id, from);
      const atTime = arg.indexOf(time, from);
      const at = atId === -1 ? atTime : atTime === -1 ? atId : Math.min(atId, atTime);
      if (at === -1) break;
      pieces.push(arg.subarray(from, at), at === atId ? 'id' : 'time');
      if (at !== atId) times++;
      from = at + (at === atId ? id.length : time.length);
    }
    if (pieces.length === 0) return undefined;
    pieces.push(arg.subarray(from));
    return pieces;
  });
  // An id in a string argument (a key) cannot be told from the rest; the time must be in one place.
  if (parts.some((p) => p?.length === 0) || times !== 1) return null;
  const fillArg = (pieces: Piece[], jobId: string, timestamp: number): Buffer => {
    const idBytes = Buffer.byteLength(jobId);
    let size = 0;
    for (const piece of pieces) {
      size += piece === 'id' ? stringHeaderSize(jobId) + idBytes : piece === 'time' ? TIME_BYTES : piece.length;
    }
    const out = Buffer.allocUnsafe(size);
    let at = 0;
    for (const piece of pieces) {
      if (piece === 'id') at = writeString(out, at, jobId, idBytes);
      else if (piece === 'time') at = writeTime(out, at, timestamp);
      else at += piece.copy(out, at);
    }
    return out;
  };
  return {
    script: command.script,
    checked: new Set(),
    fill: (jobId, timestamp) => command.args.map((arg, i) => (parts[i] ? fillArg(parts[i], jobId, timestamp) : arg)),
  };
}

function sameCommand(a: unknown[], b: unknown[]): boolean {
  return (
    a.length === b.length &&
    a.every((x, i) => (Buffer.isBuffer(x) && Buffer.isBuffer(b[i]) ? x.equals(b[i] as Buffer) : x === b[i]))
  );
}

/** The size of the header MessagePack writes before a string of this many UTF-8 bytes (str 8/16/32). */
function stringHeaderSize(value: string, bytes = Buffer.byteLength(value)): number {
  return bytes < 32 ? 1 : bytes < 0x100 ? 2 : bytes < 0x10000 ? 3 : 5;
}

function writeString(out: Buffer, at: number, value: string, bytes: number): number {
  const header = stringHeaderSize(value, bytes);
  if (header === 1) out[at] = 0xa0 | bytes;
  else if (header === 2) out.writeUInt16BE(0xd900 | bytes, at);
  else if (header === 3) {
    out[at] = 0xda;
    out.writeUInt16BE(bytes, at + 1);
  } else {
    out[at] = 0xdb;
    out.writeUInt32BE(bytes, at + 1);
  }
  return at + header + out.write(value, at + header, 'utf8');
}

function packedString(value: string): Buffer {
  const bytes = Buffer.byteLength(value);
  const out = Buffer.alloc(stringHeaderSize(value, bytes) + bytes);
  writeString(out, 0, value, bytes);
  return out;
}

/** MessagePack writes a time in ms (a number past 32 bits) as float 64. */
const TIME_BYTES = 9;

function writeTime(out: Buffer, at: number, ms: number): number {
  out[at] = 0xcb;
  out.writeDoubleBE(ms, at + 1);
  return at + TIME_BYTES;
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
    // As bytes: ioredis measures and copies a string argument three times over when others are Buffers.
    args[keys + 1] = Buffer.from(command.data);
  }
  const data = command.data ?? args[keys + 1];
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
