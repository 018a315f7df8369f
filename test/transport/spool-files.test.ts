import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { EmlApiTransport } from '../../src/index.js';
import { eventually } from '../helpers/async.js';
import { nodeArgs } from '../helpers/compiled.js';

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
  const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', FIXTURE, dir, mode]), {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const ended = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await eventually(() => out.includes('spooling'), { timeout: 20_000 });
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
    await eventually(() => spoolFolders(dir).length === 1);
    const folder = join(dir, spoolFolders(dir)[0]!);
    await eventually(() => readdirSync(folder).length === 1);
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
      // Nothing listens: the send fails at once (no retries), after spooling, which is what sweeps.
      const transport = new EmlApiTransport({
        apiKey: 'k',
        baseUrl: 'http://127.0.0.1:9',
        spool: { threshold: 10, directory: dir },
        retry: false,
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

  it('are removed after the send when the chunk that crosses the threshold is the stream’s last', async () => {
    const { startEmulator } = await import('../../src/emulator/index.js');
    const { EmlApiClient } = await import('../../src/index.js');
    const emu = await startEmulator();
    const dir = spoolDir();
    const eml = Buffer.from(`From: a@example.test\r\nTo: b@example.test\r\nSubject: big\r\n\r\n${'x'.repeat(5000)}`);
    const client = new EmlApiClient({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      spool: { threshold: 1000, directory: dir },
    });
    try {
      // One chunk, and the stream ends at once: its end comes while the spool file is being opened.
      for (let i = 0; i < 5; i++) await client.sendEml(Readable.from([eml]));
      expect(emu.messages()).toHaveLength(5);
      expect(emu.messages().every((m) => m.raw.toString('latin1').endsWith(`\r\n\r\n${'x'.repeat(5000)}`))).toBe(true);
      expect(spoolFolders(dir)).toEqual([]);
    } finally {
      await client.close();
      await emu.close();
    }
  });

  it('are removed, and the send kept, when the app’s logger throws', async () => {
    const { startEmulator } = await import('../../src/emulator/index.js');
    const emu = await startEmulator();
    const dir = spoolDir();
    const throwing = {
      debug() {
        throw new Error('debug boom');
      },
      info() {
        throw new Error('info boom');
      },
      warn() {
        throw new Error('warn boom');
      },
      error() {
        throw new Error('error boom');
      },
    };
    const transport = new EmlApiTransport({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      logger: throwing,
      spool: { threshold: 10, directory: dir },
    });
    const transporter = nodemailer.createTransport(transport);
    try {
      // The logger is called after the message is spooled and after the service accepted it:
      // a throw there must neither leave the spool file nor turn an accepted send into a failure.
      const info = await transporter.sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        envelope: { from: 'bounces@example.test', to: ['ann@example.test'] },
        subject: 'Hi',
        text: 'Hello',
      });
      expect(info.response).toBe('202 Accepted');
      expect(emu.messages()).toHaveLength(1);
      expect(spoolFolders(dir)).toEqual([]);
    } finally {
      await transport.close();
      await emu.close();
    }
  });
});
