import { once } from 'node:events';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { headerSectionLength } from './eml-headers.js';
import { EmlApiError } from './errors.js';
import { emlBodyFromBuffer, emlBodyFromFile, STREAM_ABOVE, type UploadBody } from './upload-body.js';

/** A built message: its header section, and the upload body of the whole message. */
export interface SpooledMessage {
  /** The header section (up to the blank line), for reading recipients. */
  head: Buffer;
  /** Bytes of the whole message. */
  size: number;
  /** The `{"mail":"<base64>"}` request body. */
  body: UploadBody;
}

/** Where and when messages are spooled. */
export interface SpoolSettings {
  /** Messages larger than this many bytes are written to a temporary file instead of kept in memory. */
  threshold: number;
  /** Folder for temporary files. */
  directory: string;
}

/** Header sections longer than this are refused: no real message needs it. */
const MAX_HEAD = 1024 * 1024;

/**
 * Reads a message stream (Nodemailer's built message, or a user's stream).
 * Up to `threshold` bytes it stays in memory; past that, everything goes to a
 * temporary file, written with backpressure, so memory stays flat whatever
 * the size. The file is removed by `body.dispose()`, and here on any failure.
 *
 * @throws {EmlApiError} `EMESSAGE` when the stream fails, `EABORT` when aborted
 */
export async function spoolMessage(
  stream: Readable,
  settings: SpoolSettings,
  signal?: AbortSignal,
): Promise<SpooledMessage> {
  const chunks: Buffer[] = [];
  let size = 0;
  let dir: string | undefined;
  let file: WriteStream | undefined;
  let head: Buffer | undefined;
  const headParts: Buffer[] = [];
  let headSize = 0;
  const onAbort = () =>
    stream.destroy(
      new EmlApiError('EABORT', 'The send was aborted while the message was being built', { permanent: true }),
    );
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    if (signal?.aborted) onAbort();
    for await (const part of stream as AsyncIterable<Buffer | string>) {
      const chunk = typeof part === 'string' ? Buffer.from(part) : part;
      size += chunk.length;
      if (head === undefined) {
        headParts.push(chunk);
        headSize += chunk.length;
        const joined = headParts.length === 1 ? chunk : Buffer.concat(headParts, headSize);
        const end = headerSectionLength(joined);
        if (end < joined.length || headSize > MAX_HEAD) {
          head = Buffer.from(joined.subarray(0, Math.min(end, MAX_HEAD)));
          headParts.length = 0;
        } else if (headParts.length > 1) {
          headParts.splice(0, headParts.length, joined);
        }
      }
      if (file) {
        if (!file.write(chunk)) await once(file, 'drain', { signal });
        continue;
      }
      chunks.push(chunk);
      if (size > settings.threshold) {
        dir = await mkdtemp(join(settings.directory, 'eml-api-'));
        file = createWriteStream(join(dir, 'message.eml'));
        for (const buffered of chunks.splice(0)) {
          if (!file.write(buffered)) await once(file, 'drain', { signal });
        }
      }
    }
    if (file) {
      file.end();
      await once(file, 'finish', { signal });
      return { head: head ?? Buffer.concat(headParts), size, body: emlBodyFromFile(file.path as string, size, dir!) };
    }
    const eml = Buffer.concat(chunks, size);
    return { head: head ?? eml, size, body: emlBodyFromBuffer(eml, STREAM_ABOVE) };
  } catch (err) {
    file?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
    if (err instanceof EmlApiError) throw err;
    if (signal?.aborted) {
      throw new EmlApiError('EABORT', 'The send was aborted while the message was being built', {
        permanent: true,
        cause: err,
      });
    }
    throw new EmlApiError('EMESSAGE', `Could not build the message: ${(err as Error).message}`, {
      cause: err,
      permanent: true,
    });
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}
