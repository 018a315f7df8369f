/** API keys given to the relay, or as SMTP passwords, never show in logs, replies, errors or util.inspect. */
import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { rejectionOf } from '../helpers/async.js';
import { SmtpDialog } from './relay-harness.js';

const GOOD = 'sk_live_RELAYSECRET_4f3e2d';
const WRONG = 'sk_live_WRONGSECRET_9a8b7c';
const NO_SCOPE = 'sk_live_SCOPESECRET_1a2b3c';
const FRAGMENTS = ['RELAYSECRET', 'WRONGSECRET', 'SCOPESECRET'];

let emu: Emulator;
const logger = capturingLogger({ inspect: true });
const lines = () => logger.inspected();
const relays: EmlApiRelay[] = [];

beforeAll(async () => {
  emu = await startEmulator({
    apiKeys: [
      { key: GOOD, scopes: ['sender'] },
      { key: NO_SCOPE, scopes: ['group:insert'] },
    ],
  });
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await emu?.close();
});

describe('the relay keeps keys secret', () => {
  it('in logs, SMTP replies, util.inspect of the relay and start-up errors', async () => {
    const own = await startEmlApiRelay({ baseUrl: emu.url, apiKey: GOOD, port: 0, retry: false, logger });
    // No pause before the replies to the refused keys: the test stays fast.
    const auth = await startEmlApiRelay({ baseUrl: emu.url, port: 0, retry: false, logger, authFailureDelay: 0 });
    relays.push(own, auth);
    const replies: string[] = [];
    const { dialog } = await SmtpDialog.open(auth.port);
    await dialog.command('EHLO client.example');
    for (const key of [WRONG, NO_SCOPE, GOOD]) {
      const reply = await dialog.command(`AUTH PLAIN ${Buffer.from(`\0${key}\0${key}`).toString('base64')}`);
      replies.push(`${reply.code} ${reply.lines.join('\n')}`);
    }
    expect(replies[2]).toMatch(/^235/);
    dialog.close();
    for (const relay of [own, auth]) {
      const transporter = nodemailer.createTransport({
        host: '127.0.0.1',
        port: relay.port,
        ignoreTLS: true,
        ...(relay === auth ? { auth: { user: GOOD, pass: GOOD } } : {}),
        logger: false,
      });
      const info = await transporter.sendMail({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 's',
        text: 't',
      });
      replies.push(info.response);
      emu.setFaults({ unavailable: 1 });
      const err = await transporter
        .sendMail({ from: 'a@example.test', to: 'b@example.test', subject: 's', text: 'u' })
        .catch((e: Error) => e);
      emu.setFaults(undefined);
      replies.push(String(err), inspect(err, { depth: Infinity }));
      transporter.close();
    }
    const refused = await rejectionOf(
      startEmlApiRelay({ baseUrl: emu.url, apiKey: WRONG, port: 0, retry: false, logger }),
    );
    const everything = [
      ...lines(),
      ...replies,
      inspect(own, { depth: Infinity, showHidden: true }),
      inspect(auth, { depth: Infinity, showHidden: true }),
      inspect(refused, { depth: Infinity }),
      JSON.stringify(refused),
    ].join('\n');
    expect(lines().length).toBeGreaterThan(4);
    for (const fragment of FRAGMENTS) expect(everything).not.toContain(fragment);
  });

  it('a password too long to be a key (10,000 characters) is 535 without asking the service, and never echoed', async () => {
    const relay = await startEmlApiRelay({ baseUrl: emu.url, port: 0, retry: false, logger, authFailureDelay: 0 });
    relays.push(relay);
    const password = `sk_live_LONGSECRET_${Array.from({ length: 1000 }, (_, i) => `${i}x`).join('')}`.padEnd(
      10_000,
      'q',
    );
    emu.setFaults({});
    const { dialog } = await SmtpDialog.open(relay.port);
    await dialog.command('EHLO client.example');
    const reply = await dialog.command(`AUTH PLAIN ${Buffer.from(`\0app\0${password}`).toString('base64')}`);
    dialog.close();
    const requests = emu.faultStats()!.none;
    emu.setFaults(undefined);
    expect(reply.code).toBe(535);
    expect(reply.text).toBe('5.7.8 Authentication credentials invalid');
    expect(lines().some((line) => line.includes('the password is too long'))).toBe(true);
    expect(requests).toBe(0);
    for (const text of [reply.lines.join('\n'), ...lines()]) expect(text).not.toContain('LONGSECRET');
  });
});
