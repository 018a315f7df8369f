import { createHash, type Hash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { SendKind } from '../protocol/api-types.js';
import { type LuaCommands, type OutboxRedisClient, withCommands } from './redis-connection.js';
import { emlBodyFromBuffer, emlBodyFromStream, STREAM_ABOVE } from '../body/eml-upload-body.js';
import type { UploadBody } from '../http/exchange.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { MailEnvelope } from '../transport/nodemailer-types.js';
import { NO_KEYS, recordAad, type OutboxKeyring, encryptedSize, RECORD_OVERHEAD } from './content-cipher.js';
import { newContentKey, outboxKeys, parseContentKey, queueKey, type QueueLocation } from './queue-location.js';
import { keyVerdict } from './redis-settings.js';
import { DECODE_JOB_DATA, type OutboxJobRecord, outboxJobId } from './outbox-job.js';

/*
 * Content is one Redis string beside its job (or, when small, in the job), written in chunks, each write conditional on
 * the length stored: when Redis loses data mid-write and ioredis resends a command, the write fails instead.
 */

export interface WrittenContent {
  /** Before encryption. */
  size: number;
  /** With encryption, the records' nonces and tags added. */
  stored: number;
  /** Hex SHA-256 of the bytes stored (the ciphertext, when encrypted). */
  sha256: string;
  keyId?: string;
}

export interface StoredContentRef {
  contentKey: string;
  /** Base64, when kept in the job. */
  inline?: string | undefined;
  /** Before encryption. */
  size: number;
  sha256: string;
  encryption?: { keyId: string } | undefined;
}

/**
 * The content of a queue's sends in Redis. With a keyring it is stored encrypted (AES-256-GCM) in one record per
 * chunk, each bound to the key, its position and the message's size, and its tag checked before any of it goes out.
 */
export class ContentStore {
  readonly #redis: OutboxRedisClient & ContentCommands;
  readonly #location: QueueLocation;
  readonly #index: string;
  readonly #keyring: OutboxKeyring | undefined;

  constructor(redis: OutboxRedisClient, location: QueueLocation, keyring?: OutboxKeyring) {
    this.#redis = contentCommands(redis);
    this.#location = location;
    this.#index = outboxKeys(location).contentIndex;
    this.#keyring = keyring;
  }

  newKey(jobId: string): string {
    return newContentKey(this.#location.contentKeyPrefix, jobId);
  }

  /**
   * Writes content to a new key in chunks, hashing it; a failed or aborted write discards what it wrote.
   * @param options `holdMs`: how long the producer may still add the job (the sweeper leaves the content until then)
   */
  async write(
    key: string,
    source: Readable | Buffer,
    { size, holdMs, signal }: { size: number; holdMs: number; signal?: AbortSignal | undefined },
  ): Promise<WrittenContent> {
    const hash = createHash('sha256');
    let written = 0;
    let plain = 0;
    const put = async (piece: Buffer) => {
      signal?.throwIfAborted();
      const stored = await this.#redis.emlApiWriteAt(key, this.#index, written, piece, holdMs);
      if (stored !== written + piece.length) throw lostWhileWriting(written);
      hash.update(piece);
      written += piece.length;
    };
    try {
      const keyId = this.#keyring?.keyId;
      if (keyId !== undefined) {
        // A reader finds each record where its position says.
        let index = 0;
        for await (const chunk of exactChunks(source)) {
          plain += chunk.length;
          if (plain > size) throw notTheSize(size);
          await put(this.#keyring!.seal(chunk, recordAad(key, index++, size)));
        }
        if (plain !== size) throw notTheSize(size);
        return { size, stored: written, sha256: hash.digest('hex'), keyId };
      }
      for await (const part of pieces(source)) {
        if (written + part.length > size) throw notTheSize(size);
        for (let at = 0; at < part.length; at += CONTENT_CHUNK) {
          await put(part.length <= CONTENT_CHUNK ? part : part.subarray(at, at + CONTENT_CHUNK));
        }
      }
      if (written !== size) throw notTheSize(size);
      if (written === 0) await put(Buffer.alloc(0));
      return { size: written, stored: written, sha256: hash.digest('hex') };
    } catch (err) {
      await this.discard(key).catch(() => undefined);
      throw err;
    }
  }

  /** Prepares small content to go in the job itself: read whole, encrypted as one record, hashed. */
  async sealInline(
    key: string,
    source: Readable | Buffer,
    { size }: { size: number },
  ): Promise<WrittenContent & { inline: string }> {
    let plain = source as Buffer;
    if (!Buffer.isBuffer(source)) {
      const parts: Buffer[] = [];
      for await (const part of pieces(source)) parts.push(part);
      plain = Buffer.concat(parts);
    }
    if (plain.length !== size) throw notTheSize(size);
    const keyId = this.#keyring?.keyId;
    const stored = keyId === undefined ? plain : this.#keyring!.seal(plain, recordAad(key, 0, size));
    const sha256 = createHash('sha256').update(stored).digest('hex');
    return {
      size: plain.length,
      stored: stored.length,
      sha256,
      ...(keyId === undefined ? {} : { keyId }),
      inline: stored.toString('base64'),
    };
  }

  /** Counting this store's encryption overhead. */
  fitsInline(size: number): boolean {
    return storedLength({ size, encryption: this.#keyring?.keyId }) <= INLINE_MAX_BYTES;
  }

  /** When encrypted, the envelope and Message-ID are sealed too: in clear they name every recipient, Bcc too. */
  jobFields(
    contentKey: string,
    written: WrittenContent,
    clear: { envelope: MailEnvelope; messageId: string; kind?: SendKind; group?: string | undefined },
  ): Partial<OutboxJobRecord> {
    if (written.keyId === undefined) return { sha256: written.sha256 };
    // Kind and group are sealed so a job changed in Redis is not posted; the content key binds the idempotency key.
    const meta = JSON.stringify({
      envelope: clear.envelope,
      messageId: clear.messageId,
      ...(clear.kind === undefined ? {} : { kind: clear.kind, group: clear.group ?? null }),
    });
    return {
      sha256: written.sha256,
      encryption: {
        keyId: written.keyId,
        meta: this.#keyring!.seal(Buffer.from(meta), recordAad(contentKey, 'meta', written.size)).toString('base64'),
      },
      envelope: { from: false, to: [] },
      messageId: '',
    };
  }

  /** Decrypted when this store holds the key. */
  reveal<T extends Pick<OutboxJobRecord, 'contentKey' | 'size' | 'envelope' | 'messageId' | 'encryption'>>(data: T): T {
    if (data.encryption === undefined) return data;
    try {
      const aad = recordAad(data.contentKey, 'meta', data.size);
      const sealed = Buffer.from(data.encryption.meta, 'base64');
      const meta = (this.#keyring ?? NO_KEYS).open(data.encryption.keyId, sealed, aad, 'envelope');
      const { envelope, messageId } = JSON.parse(meta.toString('utf8')) as Pick<T, 'envelope' | 'messageId'>;
      return { ...data, envelope, messageId };
    } catch {
      return data;
    }
  }

  /**
   * Checks that an encrypted job's kind, group and idempotency key are what its producer sealed: whoever can write to
   * Redis could otherwise send it to another group or again under another key.
   */
  async checkBinding(data: OutboxJobRecord): Promise<void> {
    if (data.encryption === undefined) return;
    const changed = (what: string) =>
      new EmlApiError(
        'EMESSAGE',
        `The data of this job was changed in Redis: ${what} is not what its encrypted content was queued with; not sent`,
        { permanent: true },
      );
    if (parseContentKey(this.#location.contentKeyPrefix, data.contentKey)?.jobId !== outboxJobId(data.idempotencyKey)) {
      throw changed('its idempotencyKey');
    }
    const sealed = Buffer.from(data.encryption.meta, 'base64');
    const aad = recordAad(data.contentKey, 'meta', data.size);
    const plain = (this.#keyring ?? NO_KEYS).tryOpen(data.encryption.keyId, sealed, aad);
    if (plain === undefined) throw await this.#undecryptable(data, true, 'envelope');
    const meta = JSON.parse(plain.toString('utf8')) as { kind?: unknown; group?: unknown };
    if (meta.kind !== data.kind) throw changed(`its kind (${data.kind})`);
    if ((meta.group ?? undefined) !== data.group) throw changed(`its group (${String(data.group)})`);
  }

  /** Leaves a tombstone: writes on their way fail instead of re-creating the content. */
  async discard(key: string): Promise<void> {
    await this.#redis.emlApiDiscard(key, this.#index, TOMBSTONE_MS);
  }

  /**
   * After an add that may not have run.
   * @param stored whether the content went to `key` (else it is in the job, and nothing is written: no tombstone)
   */
  async withdraw(jobId: string, key: string, stored: boolean): Promise<'queued' | 'withdrawn'> {
    const answer = await this.#redis.emlApiWithdraw(
      this.#jobKey(jobId),
      key,
      this.#index,
      TOMBSTONE_MS,
      stored ? '' : '1',
    );
    return answer === 1 ? 'queued' : 'withdrawn';
  }

  #jobKey(jobId: string): string {
    return queueKey(this.#location, jobId);
  }

  /** Checked in the same step as the job's pointer. */
  async release(jobId: string, key: string): Promise<'removed' | 'kept'> {
    return (await this.#redis.emlApiRelease(this.#jobKey(jobId), key, this.#index)) === 1 ? 'removed' : 'kept';
  }

  /** Large messages stream and are hashed as read: the last chunk goes out only once the hash matches. */
  async emlBody(ref: StoredContentRef): Promise<UploadBody | undefined> {
    if (ref.size <= STREAM_ABOVE || ref.inline !== undefined) {
      const bytes = await this.#readWhole(ref);
      return bytes && emlBodyFromBuffer(bytes, STREAM_ABOVE);
    }
    if (this.#checkLength(ref, await this.#redis.emlApiLength(ref.contentKey)) === 'missing') return undefined;
    return emlBodyFromStream(
      ref.size,
      () => Readable.from(this.#readChunks(ref), { objectMode: false }),
      () => Promise.resolve(),
    );
  }

  async jsonBody(ref: StoredContentRef): Promise<string | undefined> {
    return (await this.#readWhole(ref))?.toString('utf8');
  }

  /** @param stored its length in Redis, -1 when not there */
  #checkLength(ref: StoredContentRef, stored: number): 'whole' | 'missing' {
    const size = storedLength(ref);
    if (stored === -1 || (stored === 0 && size > 0)) return 'missing';
    if (stored !== size) {
      throw new EmlApiError(
        'EMESSAGE',
        `The queued content of this job is ${stored} bytes in Redis instead of ${size}: it was changed or cut; not sent`,
        { permanent: true },
      );
    }
    return 'whole';
  }

  /** In the job, or in one round trip; length and hash checked, then decrypted. */
  async #readWhole(ref: StoredContentRef): Promise<Buffer | undefined> {
    // A tombstone answers WRONGTYPE.
    const found =
      ref.inline !== undefined
        ? Buffer.from(ref.inline, 'base64')
        : await this.#redis.getBuffer(ref.contentKey).catch((err: unknown) => {
            if (err instanceof Error && err.name === 'ReplyError' && err.message.startsWith('WRONGTYPE')) return null;
            throw err;
          });
    if (found === null || this.#checkLength(ref, found.length) === 'missing') return undefined;
    verify(createHash('sha256').update(found), ref);
    if (ref.encryption === undefined) return found;
    const plain: Buffer[] = [];
    for (const { index, start, end } of records(ref.size)) {
      const record = this.#open(ref, index, found.subarray(start, end));
      // The bytes are as stored (SHA-256 matched): the key is the likely culprit.
      if (record === undefined) throw await this.#undecryptable(ref, true);
      plain.push(record);
    }
    return Buffer.concat(plain, ref.size);
  }

  async *#readChunks(ref: StoredContentRef): AsyncGenerator<Buffer> {
    const { contentKey: key } = ref;
    const stored = storedLength(ref);
    const hash: Hash = createHash('sha256');
    const spans = ref.encryption === undefined ? plainSpans(ref.size) : records(ref.size);
    for (const { index, start, end } of spans) {
      const chunk = await this.#redis.getrangeBuffer(key, start, end - 1);
      if (chunk.length !== end - start) throw changedWhileReading(key);
      hash.update(chunk);
      if (end === stored) verify(hash, ref);
      if (ref.encryption === undefined) {
        yield chunk;
        continue;
      }
      const record = this.#open(ref, index, chunk);
      if (record === undefined) {
        // Whether the bytes are as stored is known once all are hashed.
        for (const rest of spans.filter((span) => span.start >= end)) {
          hash.update(await this.#redis.getrangeBuffer(key, rest.start, rest.end - 1));
        }
        throw await this.#undecryptable(ref, hash.digest('hex') === ref.sha256);
      }
      yield record;
    }
  }

  /** `undefined` when the tag does not match. */
  #open(ref: StoredContentRef, index: number, record: Buffer): Buffer | undefined {
    const aad = recordAad(ref.contentKey, index, ref.size);
    return (this.#keyring ?? NO_KEYS).tryOpen(ref.encryption!.keyId, record, aad);
  }

  /**
   * Content changed in Redis (permanent) when its SHA-256 does not match or Redis confirms our key is the producers';
   * otherwise our key is likely wrong, and the job is retried for another worker.
   * @param asStored whether the bytes read match the SHA-256 on the job (an envelope has none: true)
   */
  async #undecryptable(
    ref: StoredContentRef,
    asStored: boolean,
    what: 'content' | 'envelope' = 'content',
  ): Promise<EmlApiError> {
    const keyId = ref.encryption!.keyId;
    const verdict = asStored ? await keyVerdict(this.#redis, this.#location, this.#keyring ?? NO_KEYS, keyId) : 'right';
    const subject = what === 'content' ? `queued content under ${ref.contentKey}` : 'sealed envelope of this job';
    if (verdict === 'right') {
      const why = !asStored
        ? 'and does not match the SHA-256 stored with its job: it was changed in Redis'
        : `which Redis confirms is the producers' (its check value matches): it was changed in Redis${what === 'content' ? ', its SHA-256 on the job with it' : ''}`;
      return new EmlApiError('EMESSAGE', `The ${subject} does not decrypt with the key "${keyId}", ${why}; not sent`, {
        permanent: true,
      });
    }
    const why =
      verdict === 'wrong'
        ? `this worker's key "${keyId}" is not the producers' (its check value in Redis differs): fix encryption.keys.${keyId} (EML_API_OUTBOX_KEYS)`
        : what === 'content'
          ? `though it is as the producer stored it (its SHA-256 matches): this worker's key "${keyId}" is likely not the producers' (Redis holds no check value of it to tell)`
          : `and Redis holds no check value of the key to tell whether this worker's key "${keyId}" is not the producers' or the job was changed`;
    return new EmlApiError(
      'ECONFIG',
      `The ${subject} does not decrypt with the key "${keyId}", ${why}; it is retried, for a worker that holds the right key`,
      { permanent: false },
    );
  }
}

function verify(hash: Hash, { contentKey, sha256 }: StoredContentRef): void {
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

function notTheSize(size: number): EmlApiError {
  return new EmlApiError('EMESSAGE', `The content is not ${size} bytes long, as its size says: not queued`, {
    permanent: true,
  });
}

function lostWhileWriting(offset: number): EmlApiError {
  return new EmlApiError(
    'ECONNECTION',
    `Redis lost part of the message while it was being stored (after ${offset} bytes: it restarted, failed over, ` +
      'or a write was repeated after a reconnect): not queued, nothing will be sent; queue it again',
    { permanent: false, mayHaveBeenAccepted: false },
  );
}

/** Bytes per Redis command. Encrypted, record `i` lies at `i × (chunk + RECORD_OVERHEAD)`. */
export const CONTENT_CHUNK = 1024 * 1024;

/** Content up to this size goes in the job; BullMQ parses a job's whole data whenever it reads it: larger stays out. */
export const INLINE_MAX_BYTES = 64 * 1024;

/** With encryption, each record's nonce and tag added. */
export function storedLength(ref: { size: number; encryption?: unknown }): number {
  return ref.encryption === undefined ? ref.size : encryptedSize(ref.size, CONTENT_CHUNK);
}

export function plainSpans(size: number): { index: number; start: number; end: number }[] {
  const spans = [];
  for (let at = 0, index = 0; at < size; at += CONTENT_CHUNK, index++) {
    spans.push({ index, start: at, end: Math.min(size, at + CONTENT_CHUNK) });
  }
  return spans;
}

/** One record at least. */
export function records(size: number): { index: number; start: number; end: number }[] {
  const spans = [];
  const count = Math.max(1, Math.ceil(size / CONTENT_CHUNK));
  for (let index = 0; index < count; index++) {
    const start = index * (CONTENT_CHUNK + RECORD_OVERHEAD);
    const plain = Math.min(CONTENT_CHUNK, size - index * CONTENT_CHUNK);
    spans.push({ index, start, end: start + plain + RECORD_OVERHEAD });
  }
  return spans;
}

export async function* pieces(source: Readable | Buffer): AsyncGenerator<Buffer> {
  const parts = Buffer.isBuffer(source) ? [source] : source;
  for await (const part of parts as AsyncIterable<Buffer | string>) {
    yield typeof part === 'string' ? Buffer.from(part) : part;
  }
}

/** The last shorter; one (empty) chunk at least. */
export async function* exactChunks(source: Readable | Buffer): AsyncGenerator<Buffer> {
  let held: Buffer[] = [];
  let length = 0;
  let yielded = false;
  for await (const part of pieces(source)) {
    let rest = part;
    while (length + rest.length >= CONTENT_CHUNK) {
      const take = CONTENT_CHUNK - length;
      held.push(rest.subarray(0, take));
      rest = rest.subarray(take);
      yield Buffer.concat(held, CONTENT_CHUNK);
      yielded = true;
      held = [];
      length = 0;
    }
    if (rest.length > 0) {
      held.push(rest);
      length += rest.length;
    }
  }
  if (length > 0 || !yielded) yield Buffer.concat(held, length);
}

/**
 * Writes a chunk only where the stored length says it goes (offset 0: the key must not exist); the same write repeated
 * after a lost answer is accepted; else -1. The first write indexes the key at Redis's time plus ARGV[3] (the hold).
 */
const WRITE_AT = `
local kind = redis.call('TYPE', KEYS[1]).ok
local offset = tonumber(ARGV[1])
local length = string.len(ARGV[2])
if kind == 'none' then
  if offset ~= 0 then return -1 end
  redis.call('SET', KEYS[1], ARGV[2])
  local now = redis.call('TIME')
  redis.call('ZADD', KEYS[2], tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[3]), KEYS[1])
  return length
end
if kind ~= 'string' then return -1 end
local stored = redis.call('STRLEN', KEYS[1])
if stored == offset + length then return stored end
if stored ~= offset or offset == 0 then return -1 end
return redis.call('APPEND', KEYS[1], ARGV[2])
`;

/** Whether a job points at some content; its discard, a tombstone (a small hash, for an hour) every {@link WRITE_AT} fails on. */
const CONTENT_FUNCTIONS = `${DECODE_JOB_DATA}
local function pointedAt(jobKey, key)
  local data = redis.call('HGET', jobKey, 'data')
  local job = data and decodeJobData(data)
  return job and job['contentKey'] == key
end
local function discard(key, index, ttl)
  redis.call('DEL', key)
  redis.call('HSET', key, 'discarded', '1')
  redis.call('PEXPIRE', key, ttl)
  redis.call('ZREM', index, key)
end
`;

const DISCARD = `${CONTENT_FUNCTIONS}
discard(KEYS[1], KEYS[2], ARGV[1])
return 1
`;

/** Whether the job points at this content after all (1); if not (0), discards it unless ARGV[2]. */
const WITHDRAW = `${CONTENT_FUNCTIONS}
if pointedAt(KEYS[1], KEYS[2]) then return 1 end
if ARGV[2] == '1' then return 0 end
discard(KEYS[2], KEYS[3], ARGV[1])
return 0
`;

/** Removes content unless the job points at it, in one step: no misjudged outcome removes a job's content. */
const RELEASE = `${CONTENT_FUNCTIONS}
if pointedAt(KEYS[1], KEYS[2]) then return 0 end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], KEYS[2])
return 1
`;

/** -1 when not there (gone, or a tombstone). */
const LENGTH = `
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return -1 end
return redis.call('STRLEN', KEYS[1])
`;

export const TOMBSTONE_MS = 60 * 60 * 1000;

export interface ContentCommands {
  emlApiWriteAt(key: string, index: string, offset: number, chunk: Buffer, holdMs: number): Promise<number>;
  emlApiDiscard(key: string, index: string, ttl: number): Promise<number>;
  emlApiLength(key: string): Promise<number>;
  emlApiWithdraw(jobKey: string, key: string, index: string, ttl: number, inline: string): Promise<number>;
  emlApiRelease(jobKey: string, key: string, index: string): Promise<number>;
}

const CONTENT_COMMANDS: LuaCommands = {
  emlApiWriteAt: { numberOfKeys: 2, lua: WRITE_AT },
  emlApiDiscard: { numberOfKeys: 2, lua: DISCARD },
  emlApiLength: { numberOfKeys: 1, lua: LENGTH },
  emlApiWithdraw: { numberOfKeys: 3, lua: WITHDRAW },
  emlApiRelease: { numberOfKeys: 3, lua: RELEASE },
};

export function contentCommands(redis: OutboxRedisClient): OutboxRedisClient & ContentCommands {
  return withCommands<ContentCommands>(redis, CONTENT_COMMANDS);
}
