import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { EmlApiTransport } from '../../src/index.js';
import { waitFor } from '../helpers/async.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/spool-and-wait.ts', import.meta.url));
const dirs: string[] = [];
const spoolDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'spool-files-'));
  dirs.push(dir);
  return dir;
};
const spoolFolders = (dir: string) => readdirSync(dir).filter((name) => name.startsWith('eml-api-'));

afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Runs the fixture until its spool file exists, then sends it `signal` and waits for it to end. */
async function killWhileSpooling(dir: string, signal: NodeJS.Signals, mode = ''): Promise<number | null> {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, dir, mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const ended = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await waitFor(() => out.includes('spooling'), { timeout: 20_000 });
  expect(spoolFolders(dir)).toHaveLength(1);
  child.kill(signal);
  return ended;
}

describe('spool files', () => {
  it('are readable by their owner only: folder 0700, file 0600', async () => {
    const dir = spoolDir();
    let pushed = false;
    const stalled = new Readable({
      read() {
        if (!pushed) this.push(Buffer.alloc(200_000, 'z'));
        pushed = true;
      },
    });
    const transport = new EmlApiTransport({
      apiKey: 'k',
      baseUrl: 'http://127.0.0.1:9',
      spool: { threshold: 1024, directory: dir },
    });
    const sending = nodemailer
      .createTransport(transport)
      .sendMail({ from: 'a@x.test', to: 'b@x.test', attachments: [{ content: stalled }] })
      .catch((err: unknown) => err);
    await waitFor(() => spoolFolders(dir).length === 1);
    const folder = join(dir, spoolFolders(dir)[0]!);
    await waitFor(() => readdirSync(folder).length === 1);
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    expect(statSync(join(folder, 'message.eml')).mode & 0o777).toBe(0o600);
    await transport.close({ abort: true });
    await sending;
    expect(spoolFolders(dir)).toEqual([]);
  });

  it.each(['SIGTERM', 'SIGINT'] as const)(
    'are removed when the process gets %s and nothing else handles it',
    async (signal) => {
      const dir = spoolDir();
      await killWhileSpooling(dir, signal);
      expect(spoolFolders(dir)).toEqual([]);
    },
  );

  it.each([
    ['a listener', 'handler'],
    // A once listener is removed before it runs: the spool's own listener must still see it was there.
    ['a once listener', 'once'],
    ['a once listener prepended after the spool began', 'prepend-once'],
  ])("are removed at exit when the app's own SIGTERM handler (%s) ends the process", async (label, mode) => {
    const dir = spoolDir();
    expect(await killWhileSpooling(dir, 'SIGTERM', mode)).toBe(0);
    expect(spoolFolders(dir)).toEqual([]);
  });

  it('left by a process that died (SIGKILL) are swept when another process spools there', async () => {
    const dir = spoolDir();
    await killWhileSpooling(dir, 'SIGKILL');
    const [stale] = spoolFolders(dir);
    expect(stale).toBeDefined();
    // A folder of a process that still runs stays.
    const alive = spawn('sleep', ['30']);
    const live = join(dir, `eml-api-${alive.pid}-keep`);
    mkdirSync(live);
    writeFileSync(join(live, 'message.eml'), 'x');
    try {
      const transport = new EmlApiTransport({
        apiKey: 'k',
        baseUrl: 'http://127.0.0.1:9',
        spool: { threshold: 10, directory: dir },
      });
      await nodemailer
        .createTransport(transport)
        .sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'x'.repeat(100) })
        .catch(() => undefined);
      await transport.close();
      expect(spoolFolders(dir)).toEqual([`eml-api-${alive.pid}-keep`]);
    } finally {
      alive.kill();
    }
  });
});
