import { createHash, randomBytes, type Hash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Redis } from 'ioredis';
import { emlBodyFromBuffer, emlBodyFromStream, STREAM_ABOVE } from '../body/eml-upload-body.js';
import type { UploadBody } from '../http/upload-body.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { QueueLocation } from './queue-location.js';

/**
 * Where the outbox keeps the content of queued sends: one Redis string per
 * send, beside (not inside) its BullMQ job, written and read in chunks of
 * {@link CONTENT_CHUNK} bytes. Keys are
 * `{prefix}:{queue}:content:{jobId}:{createdMs}-{random}`: the job id lets the
 * sweeper find keys whose job is gone, and the random part keeps a second
 * enqueue of the same job id from overwriting the first one's bytes.
 *
 * Every write is conditional on the length already stored (a Lua script), so
 * the key only ever holds a prefix of the message: when Redis loses data
 * while a message is written (a restart without AOF, a failover to a lagging
 * replica) and ioredis re-sends the command in flight, the write fails
 * instead of re-creating the key with what came after, and the send is
 * refused. A stored length equal to the message's size therefore means the
 * whole message; the SHA-256 the job carries lets a worker check it besides.
 */

/**
 * Bytes per Redis command when content is written or read: what a producer
 * or a worker holds of a large message at a time.
 * @example
 * const commands = Math.ceil(size / CONTENT_CHUNK); // 25 for a 25 MiB message
 */
export const CONTENT_CHUNK = 1024 * 1024;

/**
 * Where the content keys of a queue start.
 * @example
 * contentKeyPrefix('bull', 'eml-api'); // 'bull:eml-api:content:'
 */
export function contentKeyPrefix(prefix: string, queueName: string): string {
  return `${prefix}:${queueName}:content:`;
}

/**
 * The outbox's own keys of a queue, beside BullMQ's. Their names have a colon
 * after `outbox`, which no job id has (job ids escape ":"), so no job's key
 * can be one of them.
 * @example
 * outboxKeys(resolveQueueLocation('eml-api', 'bull')).contentIndex; // 'bull:eml-api:outbox:content-index'
 */
export function outboxKeys(location: Pick<QueueLocation, 'prefix' | 'queueName'>): {
  /** Sorted set: every content key, scored with when it was written (or last found needed), Redis time in ms. */
  contentIndex: string;
  /** The lock of the one sweeper at work. */
  sweepLock: string;
  /** Set while the last sweep for content written before the index is recent. */
  legacyScan: string;
} {
  const base = `${location.prefix}:${location.queueName}:outbox:`;
  return { contentIndex: `${base}content-index`, sweepLock: `${base}sweep-lock`, legacyScan: `${base}legacy-scan` };
}

/**
 * A new content key for a job.
 * @param now the creation time written in the key @default Date.now()
 * @example
 * newContentKey('bull:eml-api:content:', 'order-1042'); // 'bull:eml-api:content:order-1042:1795453916326-e6f0dafa'
 */
export function newContentKey(keyPrefix: string, jobId: string, now = Date.now()): string {
  return `${keyPrefix}${jobId}:${now}-${randomBytes(4).toString('hex')}`;
}

/**
 * The job id and creation time a content key names, or undefined for a key of another form.
 * @example
 * parseContentKey('bull:eml-api:content:', 'bull:eml-api:content:a:1795453916326-e6f0dafa'); // { jobId: 'a', createdAt: 1795453916326 }
 */
export function parseContentKey(keyPrefix: string, key: string): { jobId: string; createdAt: number } | undefined {
  if (!key.startsWith(keyPrefix)) return undefined;
  const rest = key.slice(keyPrefix.length);
  const colon = rest.lastIndexOf(':');
  const match = /^(\d+)-[0-9a-f]+$/.exec(rest.slice(colon + 1));
  if (colon <= 0 || !match) return undefined;
  return { jobId: rest.slice(0, colon), createdAt: Number(match[1]) };
}

/**
 * What a finished write stored, for the job's data.
 * @example
 * const { size, sha256 } = await store.write(key, content.open(), signal);
 */
export interface WrittenContent {
  /** Bytes stored under the key. */
  size: number;
  /** SHA-256 of the bytes stored under the key, hex. */
  sha256: string;
}

/**
 * Where a job's content is, as its data says: what a worker needs to read
 * and check it. Jobs queued before the SHA-256 was stored have none.
 * @example
 * const body = await store.emlBody({ contentKey, size, sha256 });
 */
export interface StoredContentRef {
  contentKey: string;
  size: number;
  sha256?: string | undefined;
}

/**
 * How a job and its content stood together after the job was added, read in
 * one step: `stored` (the job points at this content, which is whole),
 * `duplicate` (the job is another send's), `lost` (the job or the content is
 * gone or cut: Redis lost data meanwhile).
 * @example
 * if ((await store.confirm(jobKey, key, size)) === 'lost') throw lostError();
 */
export type ContentConfirmation = 'stored' | 'duplicate' | 'lost';

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

/** Removes content and its entry in the index. */
const REMOVE = `
redis.call('ZREM', KEYS[2], KEYS[1])
return redis.call('DEL', KEYS[1])
`;

/**
 * The job's `data` and the stored length of the content, in one step, so
 * that both are seen as they stand together.
 */
const CONFIRM = `
local data = redis.call('HGET', KEYS[1], 'data')
local stored = -1
if redis.call('TYPE', KEYS[2]).ok == 'string' then stored = redis.call('STRLEN', KEYS[2]) end
return { stored, data or '' }
`;

/** The stored length of the content, or -1 when it is not there (gone, or a tombstone). */
const LENGTH = `
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return -1 end
return redis.call('STRLEN', KEYS[1])
`;

/** How long a discarded key stays a tombstone, in ms (1 hour). */
const TOMBSTONE_MS = 60 * 60 * 1000;

interface ContentCommands {
  emlApiWriteAt(key: string, index: string, offset: number, chunk: Buffer): Promise<number>;
  emlApiDiscard(key: string, index: string, ttl: number): Promise<number>;
  emlApiRemove(key: string, index: string): Promise<number>;
  emlApiConfirm(jobKey: string, key: string): Promise<[number, string]>;
  emlApiLength(key: string): Promise<number>;
}

const defined = new WeakSet<Redis>();

/** The outbox's Lua commands on a client (defined once per client; ioredis sends EVALSHA, falling back to EVAL). */
function commands(redis: Redis): Redis & ContentCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('emlApiWriteAt', { numberOfKeys: 2, lua: WRITE_AT });
    redis.defineCommand('emlApiDiscard', { numberOfKeys: 2, lua: DISCARD });
    redis.defineCommand('emlApiRemove', { numberOfKeys: 2, lua: REMOVE });
    redis.defineCommand('emlApiConfirm', { numberOfKeys: 2, lua: CONFIRM });
    redis.defineCommand('emlApiLength', { numberOfKeys: 1, lua: LENGTH });
    defined.add(redis);
  }
  return redis as Redis & ContentCommands;
}

/**
 * The content of a queue's sends in Redis: writing it (producers), reading
 * and checking it (workers), removing it.
 * @example
 * const store = new ContentStore(redis, resolveQueueLocation('eml-api', 'bull'));
 * const key = store.newKey('order-1042');
 * const written = await store.write(key, content.open(), signal);
 */
export class ContentStore {
  readonly #redis: Redis & ContentCommands;
  readonly #location: QueueLocation;
  readonly #index: string;

  constructor(redis: Redis, location: QueueLocation) {
    this.#redis = commands(redis);
    this.#location = location;
    this.#index = outboxKeys(location).contentIndex;
  }

  /** A new content key for a job of this queue. */
  newKey(jobId: string): string {
    return newContentKey(this.#location.contentKeyPrefix, jobId);
  }

  /**
   * Writes content to a new key in chunks, one command at a time (memory
   * holds one chunk whatever the size), each conditional on the length
   * already stored, hashing what it writes. A failed or aborted write
   * discards what it wrote (best effort; the sweeper removes the rest).
   *
   * @param signal stops the writes (a deadline passed): no command is sent after it aborts
   * @throws {EmlApiError} `ECONNECTION` when Redis lost part of the message meanwhile; Redis's own errors
   * @example
   * const { size, sha256 } = await store.write(key, spooled.open());
   */
  async write(key: string, source: Readable | Buffer, signal?: AbortSignal): Promise<WrittenContent> {
    const hash = createHash('sha256');
    let written = 0;
    const put = async (piece: Buffer) => {
      // Checked before every command: nothing is sent once the send was given up.
      signal?.throwIfAborted();
      const stored = await this.#redis.emlApiWriteAt(key, this.#index, written, piece);
      if (stored !== written + piece.length) throw lostWhileWriting(written);
      hash.update(piece);
      written += piece.length;
    };
    try {
      const chunks = Buffer.isBuffer(source) ? [source] : source;
      for await (const part of chunks as AsyncIterable<Buffer | string>) {
        const chunk = typeof part === 'string' ? Buffer.from(part) : part;
        for (let at = 0; at < chunk.length; at += CONTENT_CHUNK) {
          await put(chunk.length <= CONTENT_CHUNK ? chunk : chunk.subarray(at, at + CONTENT_CHUNK));
        }
      }
      if (written === 0) await put(Buffer.alloc(0));
      return { size: written, sha256: hash.digest('hex') };
    } catch (err) {
      await this.discard(key).catch(() => undefined);
      throw err;
    }
  }

  /**
   * Removes content that may still be being written: writes still on their
   * way fail instead of re-creating it.
   * @example
   * await store.discard(contentKey);
   */
  async discard(key: string): Promise<void> {
    await this.#redis.emlApiDiscard(key, this.#index, TOMBSTONE_MS);
  }

  /**
   * Removes the content of a job that no longer needs it (sent, or a duplicate's, fully written).
   * @example
   * await store.remove(job.data.contentKey);
   */
  async remove(key: string): Promise<void> {
    await this.#redis.emlApiRemove(key, this.#index);
  }

  /**
   * Checks, once the job was added, that the job points at this content and
   * that the content is whole, both in one step: what `sendMail` may then
   * acknowledge. Redis may have lost either while they were stored (a restart
   * without AOF, a failover), and a command re-sent after a reconnect would
   * have re-created the job alone.
   *
   * @param size the bytes written
   * @example
   * const state = await store.confirm(jobId, contentKey, written.size);
   */
  async confirm(jobId: string, key: string, size: number): Promise<ContentConfirmation> {
    const jobKey = `${this.#location.prefix}:${this.#location.queueName}:${jobId}`;
    const [stored, data] = await this.#redis.emlApiConfirm(jobKey, key);
    const pointsHere = contentKeyOf(data) === key;
    if (data !== '' && !pointsHere) return 'duplicate';
    return pointsHere && stored === size ? 'stored' : 'lost';
  }

  /**
   * The `/v1/send/eml` request body of stored EML bytes. Small messages are
   * read at once and checked before anything is posted; larger ones are read
   * in chunks on each attempt and encoded as they stream (a worker holds
   * about one chunk per send), hashed as they are read: the last chunk is
   * passed on only once the hash matches, so a request over content that
   * does not match never completes and the service cannot take it.
   *
   * @throws {EmlApiError} `EMESSAGE` (permanent) when the content is missing, cut or changed
   * @example
   * const body = await store.emlBody(job.data);
   * await postEml(call, body, job.data.idempotencyKey);
   */
  async emlBody(ref: StoredContentRef): Promise<UploadBody> {
    await this.#check(ref);
    if (ref.size <= STREAM_ABOVE) return emlBodyFromBuffer(await this.#readWhole(ref), STREAM_ABOVE);
    return emlBodyFromStream(
      ref.size,
      () => Readable.from(this.#readChunks(ref), { objectMode: false }),
      () => Promise.resolve(),
    );
  }

  /**
   * A stored JSON request body (group or tracked send), as text, checked.
   * @throws {EmlApiError} `EMESSAGE` (permanent) when the content is missing, cut or changed
   * @example
   * const json = await store.jsonBody(job.data);
   */
  async jsonBody(ref: StoredContentRef): Promise<string> {
    await this.#check(ref);
    return (await this.#readWhole(ref)).toString('utf8');
  }

  /** Checks that a job's content is all there before it is read. */
  async #check({ contentKey, size }: StoredContentRef): Promise<void> {
    const stored = await this.#redis.emlApiLength(contentKey);
    if (stored === -1 || (stored === 0 && size > 0)) {
      throw new EmlApiError(
        'EMESSAGE',
        `The queued content of this job is missing from Redis (evicted or removed; key ${contentKey}): nothing to send. ` +
          'Redis must run with maxmemory-policy noeviction (see "Durable sending" in the README)',
        { permanent: true },
      );
    }
    if (stored !== size) {
      throw new EmlApiError(
        'EMESSAGE',
        `The queued content of this job is ${stored} bytes in Redis instead of ${size}: it was changed or cut; not sent`,
        { permanent: true },
      );
    }
  }

  async #readWhole(ref: StoredContentRef): Promise<Buffer> {
    const bytes = await this.#redis.getBuffer(ref.contentKey);
    if (!bytes || bytes.length !== ref.size) throw changedWhileReading(ref.contentKey);
    const hash = createHash('sha256').update(bytes);
    verify(hash, ref);
    return bytes;
  }

  async *#readChunks(ref: StoredContentRef): AsyncGenerator<Buffer> {
    const { contentKey: key, size } = ref;
    const hash: Hash = createHash('sha256');
    for (let at = 0; at < size; at += CONTENT_CHUNK) {
      const end = Math.min(size, at + CONTENT_CHUNK);
      const chunk = await this.#redis.getrangeBuffer(key, at, end - 1);
      if (chunk.length !== end - at) throw changedWhileReading(key);
      hash.update(chunk);
      // The last chunk goes out only once the whole content is known to match.
      if (end === size) verify(hash, ref);
      yield chunk;
    }
  }
}

/** Throws when the content read does not match the SHA-256 on the job (jobs queued before it was stored have none). */
function verify(hash: Hash, { contentKey, sha256 }: StoredContentRef): void {
  if (sha256 === undefined) return;
  if (hash.digest('hex') !== sha256) {
    throw new EmlApiError(
      'EMESSAGE',
      `The queued content under ${contentKey} does not match the SHA-256 stored with its job: it was changed in Redis; not sent`,
      { permanent: true },
    );
  }
}

function changedWhileReading(key: string): EmlApiError {
  return new EmlApiError('EMESSAGE', `The queued content under ${key} changed while it was read`, { permanent: true });
}

function lostWhileWriting(offset: number): EmlApiError {
  return new EmlApiError(
    'ECONNECTION',
    `Redis lost part of the message while it was being stored (after ${offset} bytes: it restarted, failed over, ` +
      'or a write was repeated after a reconnect): not queued, nothing will be sent; queue it again',
    { permanent: false, mayHaveBeenAccepted: false },
  );
}

function contentKeyOf(data: string): string | undefined {
  if (data === '') return undefined;
  try {
    const parsed = JSON.parse(data) as { contentKey?: unknown };
    return typeof parsed.contentKey === 'string' ? parsed.contentKey : undefined;
  } catch {
    return undefined;
  }
}
