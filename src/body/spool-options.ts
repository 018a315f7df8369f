import { tmpdir } from 'node:os';

/**
 * Where and when messages are spooled to disk.
 *
 * @example
 * new EmlApiTransport({ apiKey, baseUrl, spool: { threshold: 8 * 1024 * 1024, directory: '/var/tmp' } });
 */
export interface SpoolOptions {
  /**
   * Messages larger than this many bytes are spooled to a file.
   * @default 2097152 (2 MiB)
   */
  threshold?: number;
  /**
   * Folder for the temporary files.
   * @default os.tmpdir()
   */
  directory?: string;
}

/** Spool settings after validation. */
export type SpoolSettings = Required<SpoolOptions>;

/** Default spool settings (read when called: `os.tmpdir()` follows `TMPDIR`). */
export function defaultSpoolSettings(): SpoolSettings {
  return { threshold: 2 * 1024 * 1024, directory: tmpdir() };
}
