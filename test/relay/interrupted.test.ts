/**
 * Messages that never arrive in full: a client that disconnects in the
 * middle of DATA, or that stalls there while the relay is closed. Nothing is
 * sent, nothing stays on disk, and close() does not wait for such a client.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { eventually } from '../helpers/async.js';
import { SmtpDialog } from './relay-harness.js';

let emu: Emulator;
let spoolDirectory: string;
const opened: SmtpDialog[] = [];
const relays: EmlApiRelay[] = [];

beforeAll(async () => {
  emu = await startEmulator();
  spoolDirectory = mkdtempSync(join(tmpdir(), 'relay-interrupted-'));
});
afterEach(() => {
  for (const dialog of opened.splice(0)) dialog.close();
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close({ abort: true })));
  await emu?.close();
  rmSync(spoolDirectory, { recursive: true, force: true });
});

/** A relay that spools past 1 KiB into a folder of its own, so leftovers show. */
async function startRelay() {
  const relay = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    retry: false,
    spool: { threshold: 1024, directory: spoolDirectory },
  });
  relays.push(relay);
  return relay;
}

/** A session that has sent DATA and part of a message (`lines` lines of its body), then nothing more. */
async function partOfMessage(relay: EmlApiRelay, subject: string, lines: number) {
  const { dialog } = await SmtpDialog.open(relay.port);
  opened.push(dialog);
  await dialog.command('EHLO client.example');
  expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
  expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
  expect((await dialog.command('DATA')).code).toBe(354);
  dialog.write(`From: shop@example.test\r\nTo: ann@example.test\r\nSubject: ${subject}\r\n\r\n`);
  for (let i = 0; i < lines; i++) dialog.write(`${'x'.repeat(78)}\r\n`);
  return dialog;
}

/** Resolves with 'closed', or 'still waiting' after `ms`. */
function settlesWithin(promise: Promise<unknown>, ms: number): Promise<'closed' | 'still waiting'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'still waiting'>((resolve) => (timer = setTimeout(() => resolve('still waiting'), ms)));
  return Promise.race([promise.then(() => 'closed' as const), late]).finally(() => clearTimeout(timer));
}

const spoolFolders = () => readdirSync(spoolDirectory);
const delivered = (subject: string) => emu.messages().some((m) => m.subject === subject);

describe('a message that never arrives in full', () => {
  it('a client that disconnects in the middle of DATA: nothing is sent, its spool file is removed, close() does not hang', async () => {
    const relay = await startRelay();
    // 200 lines: past the 1 KiB threshold, so the message is in a spool file when the client leaves.
    const dialog = await partOfMessage(relay, 'cut-off', 200);
    await eventually(() => spoolFolders().length > 0);
    dialog.close();
    await eventually(() => spoolFolders().length === 0);
    expect(await settlesWithin(relay.close(), 5000)).toBe('closed');
    expect(delivered('cut-off')).toBe(false);
  });

  it('close() while a client stalls in the middle of DATA: the client gets 421, close() resolves, nothing is sent', async () => {
    const relay = await startRelay();
    const dialog = await partOfMessage(relay, 'stalled', 3);
    // The relay has the beginning of the message (it waits for the rest).
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await settlesWithin(relay.close(), 5000)).toBe('closed');
    const reply = await dialog.reply();
    expect(reply.code).toBe(421);
    await eventually(() => dialog.closed);
    expect(delivered('stalled')).toBe(false);
    expect(spoolFolders()).toEqual([]);
  });
});
