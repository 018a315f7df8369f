import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Redis } from 'ioredis';
import { emlBodyFromBuffer, emlBodyFromStream, STREAM_ABOVE } from '../body/eml-upload-body.js';
import type { UploadBody } from '../http/upload-body.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * Where the outbox keeps the content of queued sends: one Redis string per
 * send, beside (not inside) its BullMQ job, written and read in chunks of
 * {@link CONTENT_CHUNK} bytes. Keys are
 * `{prefix}:{queue}:content:{jobId}:{createdMs}-{random}`: the job id lets the
 * sweeper find keys whose job is gone, the time when they were written, and
 * the random part keeps a second enqueue of the same job id from overwriting
 * the first one's bytes.
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
 * Writes content to a new key: the first chunk with SET, the others with
 * APPEND, one command at a time, so memory holds one chunk whatever the size.
 * A failed or aborted write removes what it wrote once its last command is
 * answered (best effort; the sweeper removes the rest).
 *
 * @param signal stops the writes (a deadline passed): no command is sent after it aborts
 * @returns the bytes written
 * @example
 * await writeContent(redis, key, spooled.open()); // a stream of the built message
 */
export async function writeContent(
  redis: Redis,
  key: string,
  source: Readable | Buffer,
  signal?: AbortSignal,
): Promise<number> {
  let written = 0;
  try {
    const chunks = Buffer.isBuffer(source) ? [source] : source;
    for await (const part of chunks as AsyncIterable<Buffer | string>) {
      const chunk = typeof part === 'string' ? Buffer.from(part) : part;
      for (let at = 0; at < chunk.length; at += CONTENT_CHUNK) {
        const piece = chunk.length <= CONTENT_CHUNK ? chunk : chunk.subarray(at, at + CONTENT_CHUNK);
        // Checked before every command: a DEL sent while writes go on would run before the next APPEND.
        signal?.throwIfAborted();
        if (written === 0) await redis.set(key, piece);
        else await redis.append(key, piece);
        written += piece.length;
      }
    }
    if (written === 0) await redis.set(key, '');
    return written;
  } catch (err) {
    await redis.del(key).catch(() => undefined);
    throw err;
  }
}

/**
 * Checks that a job's content is all there before it is posted.
 * @throws {EmlApiError} `EMESSAGE` (permanent) when it is missing or of another size
 * @example
 * await checkContent(redis, job.data.contentKey, job.data.size);
 */
export async function checkContent(redis: Redis, key: string, size: number): Promise<void> {
  const stored = await redis.strlen(key);
  if (stored !== size) {
    throw new EmlApiError(
      'EMESSAGE',
      stored === 0
        ? `The queued content of this job is gone from Redis (key ${key}): it was removed, or Redis lost it (see "Durable sending" in the README)`
        : `The queued content of this job is ${stored} bytes in Redis instead of ${size}: it was changed or cut`,
      { permanent: true },
    );
  }
}

/**
 * The `/v1/send/eml` request body of stored EML bytes. Small messages are read
 * at once; larger ones are read from Redis in chunks on each attempt and
 * encoded as they stream, so a worker holds about one chunk per send.
 *
 * @throws {EmlApiError} `EMESSAGE` (permanent) when the content is missing or incomplete
 * @example
 * const body = await storedEmlBody(redis, job.data.contentKey, job.data.size);
 * await postEml(call, body, job.data.idempotencyKey);
 */
export async function storedEmlBody(redis: Redis, key: string, size: number): Promise<UploadBody> {
  await checkContent(redis, key, size);
  if (size <= STREAM_ABOVE) return emlBodyFromBuffer(await readWhole(redis, key, size), STREAM_ABOVE);
  return emlBodyFromStream(
    size,
    () => Readable.from(readChunks(redis, key, size), { objectMode: false }),
    () => Promise.resolve(),
  );
}

/**
 * A stored JSON request body (group or tracked send), as text.
 * @throws {EmlApiError} `EMESSAGE` (permanent) when the content is missing or incomplete
 * @example
 * const json = await storedJsonBody(redis, job.data.contentKey, job.data.size);
 */
export async function storedJsonBody(redis: Redis, key: string, size: number): Promise<string> {
  await checkContent(redis, key, size);
  return (await readWhole(redis, key, size)).toString('utf8');
}

async function readWhole(redis: Redis, key: string, size: number): Promise<Buffer> {
  const bytes = await redis.getBuffer(key);
  if (!bytes || bytes.length !== size) throw changedWhileReading(key);
  return bytes;
}

async function* readChunks(redis: Redis, key: string, size: number): AsyncGenerator<Buffer> {
  for (let at = 0; at < size; at += CONTENT_CHUNK) {
    const end = Math.min(size, at + CONTENT_CHUNK);
    const chunk = await redis.getrangeBuffer(key, at, end - 1);
    if (chunk.length !== end - at) throw changedWhileReading(key);
    yield chunk;
  }
}

function changedWhileReading(key: string): EmlApiError {
  return new EmlApiError('EMESSAGE', `The queued content under ${key} changed while it was read`, { permanent: true });
}
