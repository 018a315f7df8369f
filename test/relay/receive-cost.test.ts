/**
 * What receiving a message costs in errors: the error for a client that
 * vanished in the middle of DATA (an EmlApiError, with its stack) is built when
 * a client vanishes, not for every message (it was 2.3% of the relay's CPU).
 * Every EmlApiError the relay builds is counted by wrapping the class.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type * as ErrorModule from '../../src/shared/eml-api-error.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { eventually } from '../helpers/async.js';
import { capturingLogger } from '../helpers/logger.js';
import { SmtpDialog } from './relay-harness.js';

const built = vi.hoisted(() => [] as string[]);
vi.mock('../../src/shared/eml-api-error.js', async (importOriginal) => {
  const original = await importOriginal<typeof ErrorModule>();
  const EmlApiError = new Proxy(original.EmlApiError, {
    construct(target, args: ConstructorParameters<typeof original.EmlApiError>, newTarget) {
      built.push(args[0]);
      return Reflect.construct(target, args, newTarget) as object;
    },
  });
  return { ...original, EmlApiError };
});

let emu: Emulator;
let relay: EmlApiRelay;
const logger = capturingLogger();
const abandoned = () => logger.messages('warn');

beforeAll(async () => {
  emu = await startEmulator();
  relay = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    retry: false,
    logger,
  });
});
afterAll(async () => {
  await relay?.close();
  await emu?.close();
});

async function transaction(subject: string) {
  const { dialog } = await SmtpDialog.open(relay.port);
  await dialog.command('EHLO client.example');
  expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
  expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
  return { dialog, head: `From: shop@example.test\r\nTo: ann@example.test\r\nSubject: ${subject}\r\n` };
}

describe('errors built while receiving', () => {
  it('messages that arrive in full build no error', async () => {
    const { dialog, head } = await transaction('whole');
    built.length = 0;
    for (let n = 0; n < 3; n++) {
      const reply = await dialog.data(`${head}Message-ID: <whole-${n}@example.test>\r\n\r\nHello\r\n`);
      expect(reply.code).toBe(250);
      expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
      expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    }
    expect(built).toEqual([]);
    dialog.close();
  });

  it('a client that vanishes in the middle of DATA: one ESTREAM error, and the message is abandoned', async () => {
    const { dialog, head } = await transaction('vanished');
    expect((await dialog.command('DATA')).code).toBe(354);
    built.length = 0;
    dialog.write(`${head}\r\nthe beginning, and no end\r\n`);
    dialog.close();
    await eventually(() => abandoned().some((m) => m.startsWith('Message abandoned')));
    expect(built).toEqual(['ESTREAM']);
  });
});
