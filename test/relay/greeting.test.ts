/**
 * The greeting: the relay greets without smtp-server's fixed 100 ms pause
 * (which capped clients that open a connection per message at 10 messages a
 * second per connection), and an early talker still gets smtp-server's own
 * answer. These tests pin the smtp-server internals src/relay/smtp-server-adapter.ts
 * relies on, so that an upgrade that changes them fails here, loudly.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { SmtpDialog, smtplibSend } from './relay-harness.js';

const NAME = 'relay.greeting.test';
let emu: Emulator;
let relay: EmlApiRelay;

beforeAll(async () => {
  emu = await startEmulator();
  relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, hostname: NAME, retry: false });
});
afterAll(async () => {
  await relay?.close();
  await emu?.close();
});

/**
 * Runs `body` with smtp-server's early-talker timer held: the 100 ms timer
 * `init()` arms (`setTimeout(() => this.connectionReady(), 100)`) is kept
 * instead of scheduled, so it fires only when the test says; every other
 * timer runs as usual.
 */
async function withReadyTimersHeld<T>(body: (held: (() => void)[]) => Promise<T>): Promise<T> {
  const held: (() => void)[] = [];
  const real = globalThis.setTimeout;
  globalThis.setTimeout = ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    if (ms === 100 && String(callback).includes('connectionReady')) {
      held.push(() => callback(...args));
      return real(() => undefined, 0);
    }
    return real(callback, ms, ...args);
  }) as typeof setTimeout;
  try {
    return await body(held);
  } finally {
    globalThis.setTimeout = real;
  }
}

/**
 * What a client that sends `line` right after connecting, without waiting
 * for the greeting, receives until the server closes the connection. The
 * client is Python, in its own process; this process (and the relay in it)
 * is blocked until the client has connected and sent its line, so the line is
 * in the server's socket before the server even accepts the connection:
 * deterministic, whatever the machine's load.
 */
async function earlyTalker(port: number, line: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'eml-api-early-'));
  const marker = join(dir, 'sent');
  try {
    const script = fileURLToPath(new URL('./clients/early_talker.py', import.meta.url));
    const child = spawn('python3', [script, String(port), line, marker], { stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    child.stdout.setEncoding('latin1').on('data', (chunk: string) => (output += chunk));
    child.once('error', () => undefined); // python3 missing: the wait below says the client never connected
    const exited = once(child, 'exit');
    // Blocks the event loop (Atomics.wait sleeps the thread) until the client has sent its line.
    const pause = new Int32Array(new SharedArrayBuffer(4));
    const deadline = Date.now() + 10_000;
    while (!existsSync(marker)) {
      // (The event loop is blocked: the child's exit cannot be seen here, only this deadline.)
      if (Date.now() > deadline) throw new Error('the early talker did not connect within 10 s');
      Atomics.wait(pause, 0, 0, 2);
    }
    await exited;
    return output;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('the greeting', () => {
  it("arrives without smtp-server's 100 ms early-talker pause; the pause's own timer, when it fires, does not greet again", async () => {
    await withReadyTimersHeld(async (held) => {
      const { dialog, greeting } = await SmtpDialog.open(relay.port);
      try {
        // smtp-server armed its ready timer (pinned: 100 ms, calling connectionReady), and it has not fired.
        expect(held).toHaveLength(1);
        expect(greeting.code).toBe(220);
        expect(greeting.text).toBe(`${NAME} ESMTP nodemailer-eml-api relay`);
        // Now it fires: the connection was greeted once, and the next reply is EHLO's.
        held[0]!();
        const ehlo = await dialog.command('EHLO client.example');
        expect(ehlo.code).toBe(250);
        expect(ehlo.lines[0]).toMatch(new RegExp(`^${NAME.replace(/\./g, '\\.')} `));
        expect((await dialog.command('QUIT')).code).toBe(221);
        expect(dialog.hasUnreadReply()).toBe(false);
      } finally {
        dialog.close();
      }
    });
  });

  it("a client that sends before the greeting gets smtp-server's own 421 You talk too soon, and nothing else", async () => {
    // smtp-server as it comes, with the relay's name: the reference, with its 100 ms pause.
    const stock = new SMTPServer({
      name: NAME,
      logger: false,
      disabledCommands: ['STARTTLS'],
      authOptional: true,
      hideENHANCEDSTATUSCODES: false,
    });
    await new Promise<void>((resolve) => stock.listen(0, '127.0.0.1', resolve));
    try {
      const stockPort = (stock.server.address() as AddressInfo).port;
      const ehlo = await earlyTalker(stockPort, 'EHLO early.example');
      expect(ehlo).toBe(`421 ${NAME} You talk too soon\r\n`);
      expect(await earlyTalker(relay.port, 'EHLO early.example')).toBe(ehlo);
      // A blasted transaction gets the same as from smtp-server (which adds an enhanced code for MAIL).
      const mail = await earlyTalker(stockPort, 'MAIL FROM:<spam@example.test>');
      expect(mail).toMatch(/^421 .*You talk too soon\r\n$/);
      expect(await earlyTalker(relay.port, 'MAIL FROM:<spam@example.test>')).toBe(mail);
    } finally {
      await new Promise<void>((resolve) => stock.close(() => resolve()));
    }
  });

  it('a real client (Python smtplib) that opens one connection per message sends through it', async () => {
    for (const n of [1, 2, 3]) {
      const result = await smtplibSend({
        host: '127.0.0.1',
        port: relay.port,
        from: 'shop@example.test',
        to: ['ann@example.test'],
        subject: `Message ${n}`,
        body: 'Hello',
        message_id: `<greeting-${n}@example.test>`,
        date: 'Mon, 23 Nov 2026 10:00:00 +0000',
      });
      expect(result.error).toBeUndefined();
    }
    expect(emu.mailbox('ann@example.test').filter((m) => m.messageId.startsWith('<greeting-'))).toHaveLength(3);
  });
});
