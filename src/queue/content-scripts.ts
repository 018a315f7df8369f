import type { OutboxRedisClient } from './redis-connection.js';

/**
 * The atomic Redis operations on stored content, as Lua scripts defined on
 * each client the outbox uses (ioredis sends EVALSHA, falling back to EVAL
 * after a restart emptied Redis's script cache). Atomic because Redis may
 * lose data between two commands (a restart without AOF, a failover) and
 * ioredis re-sends a command whose answer was lost: each write checks, in
 * the same step, that it goes where the stored length says.
 */

/**
 * Writes a chunk only where the stored length says it goes. At offset 0 the
 * key must not exist (or hold exactly this chunk: the same write, repeated
 * after its answer was lost); further on, the string must be exactly
 * `offset` bytes long (or `offset` plus this chunk, likewise). Anything else,
 * a key gone or cut because Redis lost data, answers -1 and writes nothing.
 * The first write also enters the key in the queue's content index, at
 * Redis's own time (see content-sweeper.ts).
 */
const WRITE_AT = `
local kind = redis.call('TYPE', KEYS[1]).ok
local offset = tonumber(ARGV[1])
local length = string.len(ARGV[2])
if kind == 'none' then
  if offset ~= 0 then return -1 end
  redis.call('SET', KEYS[1], ARGV[2])
  local now = redis.call('TIME')
  redis.call('ZADD', KEYS[2], tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000), KEYS[1])
  return length
end
if kind ~= 'string' then return -1 end
local stored = redis.call('STRLEN', KEYS[1])
if stored == offset + length then return stored end
if stored ~= offset or offset == 0 then return -1 end
return redis.call('APPEND', KEYS[1], ARGV[2])
`;

/**
 * Removes content so that no write still on its way can bring it back: the
 * key becomes a small hash (a tombstone) for an hour, on which every write of
 * {@link WRITE_AT} fails. Used when a store fails or times out, when commands
 * may still be queued in the client.
 */
const DISCARD = `
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'discarded', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
`;

/**
 * After an add that failed without running (or may not have run): whether
 * the job points at this content after all (1), and if not (0), the content
 * removed as {@link DISCARD} does, so that no job can send it later. KEYS:
 * job hash, content key, content index. ARGV: the tombstone's lifetime in ms.
 */
const WITHDRAW = `
local data = redis.call('HGET', KEYS[1], 'data')
if data then
  local ok, job = pcall(cjson.decode, data)
  if ok and type(job) == 'table' and job['contentKey'] == KEYS[2] then return 1 end
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'discarded', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], KEYS[2])
return 0
`;

/**
 * Removes content a `sendMail` stored and does not need after all (its send
 * was a duplicate, or it put a failed job back with that job's own bytes),
 * or the content of a job it replaced, unless the job points at it: the
 * check and the removal in one step, so that no misjudged outcome (a reply
 * lost and a command re-run, another producer's change) can remove the
 * content of a job that will be sent (review F1). KEYS: job hash, content
 * key, content index. Answers 1 when it removed the content, 0 when it kept it.
 */
const RELEASE = `
local data = redis.call('HGET', KEYS[1], 'data')
if data then
  local ok, job = pcall(cjson.decode, data)
  if ok and type(job) == 'table' and job['contentKey'] == KEYS[2] then return 0 end
end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], KEYS[2])
return 1
`;

/** The stored length of the content, or -1 when it is not there (gone, or a tombstone). */
const LENGTH = `
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return -1 end
return redis.call('STRLEN', KEYS[1])
`;

/**
 * How long a discarded key stays a tombstone, in ms (1 hour).
 * @example
 * await contentCommands(redis).emlApiDiscard(key, index, TOMBSTONE_MS);
 */
export const TOMBSTONE_MS = 60 * 60 * 1000;

/**
 * The commands {@link contentCommands} adds to a client.
 * @example
 * const stored: number = await contentCommands(redis).emlApiLength(key);
 */
export interface ContentCommands {
  emlApiWriteAt(key: string, index: string, offset: number, chunk: Buffer): Promise<number>;
  emlApiDiscard(key: string, index: string, ttl: number): Promise<number>;
  emlApiLength(key: string): Promise<number>;
  emlApiWithdraw(jobKey: string, key: string, index: string, ttl: number): Promise<number>;
  emlApiRelease(jobKey: string, key: string, index: string): Promise<number>;
}

const defined = new WeakSet<OutboxRedisClient>();

/**
 * The client with the outbox's content commands (defined once per client).
 * @example
 * await contentCommands(redis).emlApiDiscard(contentKey, index, TOMBSTONE_MS);
 */
export function contentCommands(redis: OutboxRedisClient): OutboxRedisClient & ContentCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiWriteAt', { numberOfKeys: 2, lua: WRITE_AT });
    redis.defineCommand('emlApiDiscard', { numberOfKeys: 2, lua: DISCARD });
    redis.defineCommand('emlApiLength', { numberOfKeys: 1, lua: LENGTH });
    redis.defineCommand('emlApiWithdraw', { numberOfKeys: 3, lua: WITHDRAW });
    redis.defineCommand('emlApiRelease', { numberOfKeys: 3, lua: RELEASE });
    defined.add(redis);
  }
  return redis as OutboxRedisClient & ContentCommands;
}
