import { once } from 'node:events';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { EmlApiError } from '../shared/eml-api-error.js';
import { removeSpoolFolder, spoolFolderPrefix, sweepStaleSpoolFolders, trackSpoolFolder } from './spool-directories.js';

/**
 * One message's spool file: in a folder of its own (mode 0700), written with
 * mode 0600, so no other user can read a message on a shared machine. A write
 * that fails (disk full, I/O error, file-size limit) is reported to the send
 * that owns the file, never as an unhandled 'error' event that would end the
 * process.
 */
export class SpoolFile {
  readonly folder: string;
  readonly path: string;
  readonly #stream: WriteStream;
  #error: EmlApiError | undefined;
  #onError: ((err: EmlApiError) => void) | undefined;

  private constructor(folder: string) {
    this.folder = folder;
    this.path = join(folder, 'message.eml');
    this.#stream = createWriteStream(this.path, { flags: 'wx', mode: 0o600 });
    // Listened to for the file's whole life: an error while nobody waits on 'drain' must not throw.
    this.#stream.on('error', (err) => {
      this.#error ??= new EmlApiError(
        'ESPOOL',
        `Could not write the message's spool file in ${folder}: ${err.message}`,
        {
          cause: err,
          permanent: false,
        },
      );
      this.#onError?.(this.#error);
    });
  }

  /** Creates a spool file in `directory` (sweeping folders left by dead processes first). */
  static async create(directory: string): Promise<SpoolFile> {
    await sweepStaleSpoolFolders(directory);
    const folder = await mkdtemp(spoolFolderPrefix(directory));
    trackSpoolFolder(folder);
    return new SpoolFile(folder);
  }

  /** Called once with the first write error. */
  onError(listener: (err: EmlApiError) => void): void {
    this.#onError = listener;
    if (this.#error) listener(this.#error);
  }

  /** Writes a chunk. @returns a promise to wait on when the file asks for backpressure */
  write(chunk: Buffer): Promise<void> | undefined {
    if (this.#error) return Promise.reject(this.#error);
    if (this.#stream.write(chunk)) return undefined;
    return this.#drained();
  }

  /** Flushes and closes the file. @throws {EmlApiError} `ESPOOL` when any write failed */
  async end(): Promise<void> {
    if (this.#error) throw this.#error;
    this.#stream.end();
    await once(this.#stream, 'finish').catch(() => undefined);
    if (this.#error) throw this.#error;
  }

  /** Stops writing and removes the file and its folder. */
  async remove(): Promise<void> {
    this.#stream.destroy();
    await removeSpoolFolder(this.folder);
  }

  #drained(): Promise<void> {
    return new Promise((resolve, reject) => {
      const onDrain = () => {
        this.#stream.off('error', onFail);
        resolve();
      };
      const onFail = () => {
        this.#stream.off('drain', onDrain);
        reject(this.#error);
      };
      this.#stream.once('drain', onDrain);
      this.#stream.once('error', onFail);
    });
  }
}
