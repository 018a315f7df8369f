import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const FIXTURE = fileURLToPath(new URL('./fixtures/spool-write-failure.ts', import.meta.url));

describe('a spool file that cannot be written (disk full, EIO, file-size limit)', () => {
  it('fails that send with a typed error; the process and every other send live on', () => {
    // A real write failure: the kernel refuses to grow a file past `ulimit -f` (EFBIG; Node ignores SIGXFSZ).
    const child = spawnSync('bash', ['-c', `ulimit -f 2500 && exec "${process.execPath}" --import tsx "${FIXTURE}"`], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(child.status, `${child.stderr}\n${child.stdout}`).toBe(0);
    const result = JSON.parse(child.stdout.trim().split('\n').pop()!) as Record<string, Record<string, unknown>>;
    expect(result.big).toMatchObject({ ok: false, isEmlApiError: true, code: 'ESPOOL', permanent: false });
    expect(result.big!.message).toContain('spool');
    expect(result.small).toEqual({ ok: true });
    expect(result.after).toEqual({ ok: true });
    expect(result).toMatchObject({ delivered: 2, spoolLeft: 0 });
  });
});
