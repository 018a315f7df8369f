import { readFile } from 'node:fs/promises';

/**
 * Reads a whole input: the named file, or standard input for `-`.
 *
 * @throws {Error} in one line naming the file when it cannot be read
 */
export async function readInput(source: string, stdin: AsyncIterable<string | Uint8Array>): Promise<Buffer> {
  if (source === '-') return readAll(stdin);
  try {
    return await readFile(source);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const reason =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EISDIR'
          ? 'it is a directory'
          : code === 'EACCES'
            ? 'permission denied'
            : (err as Error).message;
    throw new Error(`cannot read ${JSON.stringify(source)}: ${reason}`, { cause: err });
  }
}

/** Reads a stream to its end. */
export async function readAll(stream: AsyncIterable<string | Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks);
}
