import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const FIXTURE = fileURLToPath(new URL('./fixtures/relay-spool-failure.ts', import.meta.url));

describe("the relay's spool file cannot be written (disk full, EIO, file-size limit)", () => {
  it('answers 451 4.3.0 naming its storage (ESPOOL) without its path, not a client that left (ESTREAM); the next message goes through', () => {
    // A real write failure: the kernel refuses to grow a file past `ulimit -f` (EFBIG; Node ignores SIGXFSZ).
    const child = spawnSync('bash', ['-c', `ulimit -f 2500 && exec "${process.execPath}" --import tsx "${FIXTURE}"`], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(child.status, `${child.stderr}\n${child.stdout}`).toBe(0);
    const result = JSON.parse(child.stdout.trim().split('\n').pop()!) as {
      big: { code: number; text: string };
      after: { code: number };
      logged: string[];
      delivered: number;
      spoolLeft: number;
    };
    expect(result.big.code).toBe(451);
    expect(result.big.text).toMatch(/^4\.3\.0 The relay could not store the message, try again later/);
    // The client learns nothing of the relay's disk (its spool path, the system error): the log has it.
    expect(result.big.text).not.toMatch(/eml-api-|\/tmp|EFBIG|too large/i);
    expect(result.logged).toContain('Message refused');
    expect(result.logged).not.toContain('Message abandoned: the client disconnected before the end of DATA');
    expect(result.after.code).toBe(250);
    expect(result).toMatchObject({ delivered: 1, spoolLeft: 0 });
  });
});
