/**
 * Sender lists under store-and-forward: a sender that is not the login's is refused (553 5.7.1) before
 * anything is stored, so no worker ever sends it; the relay's own key given as the AUTH password carries
 * the list of its login.
 */
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { keyFingerprint } from '../../src/relay/relay-users.js';
import { SmtpDialog } from './relay-harness.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

let redis: RedisServer;
let emu: Emulator;
let relay: EmlApiRelay;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  relay = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    queue: { connection: redis.url },
    users: [{ username: 'billing', password: 'billing-secret-pw', senders: ['*@billing.shop.example'] }],
    keySenders: { [`key:${keyFingerprint(emu.apiKey)}`]: ['ops@shop.example', '<>'] },
    allowedSenders: ['cron@host.example'],
  });
});

afterAll(async () => {
  await relay?.close();
  await emu?.close();
  await redis?.stop();
});

async function send(from: string, auth?: { user: string; pass: string }, envelopeFrom = from): Promise<string> {
  const smtp = nodemailer.createTransport({
    host: '127.0.0.1',
    port: relay.port,
    ignoreTLS: true,
    ...(auth ? { auth } : {}),
  });
  try {
    const info = await smtp.sendMail({ from, envelope: { from: envelopeFrom, to: 'ann@example.test' }, text: 'x' });
    return info.response;
  } catch (err) {
    return (err as { response: string }).response;
  } finally {
    smtp.close();
  }
}

it("refuses a sender that is not the login's before storing it; stores the login's own", async () => {
  const queue = new EmlApiQueueTransport({ connection: redis.url });
  try {
    const billing = { user: 'billing', pass: 'billing-secret-pw' };
    const relayKey = { user: 'ops', pass: emu.apiKey };
    expect(await send('ceo@bank.example', billing)).toMatch(/^553 5\.7\.1 <ceo@bank\.example>.*login billing/);
    expect(await send('ceo@bank.example', billing, 'a@billing.shop.example')).toMatch(
      /^553 5\.7\.1 <ceo@bank\.example>: Sender address rejected: the From header/,
    );
    expect(await send('ceo@bank.example', relayKey, 'ops@shop.example')).toMatch(
      new RegExp(`^553 5\\.7\\.1 <ceo@bank\\.example>.*login key:${keyFingerprint(emu.apiKey)}`),
    );
    expect(await send('root@host.example', undefined, 'cron@host.example')).toMatch(
      /^553 5\.7\.1 <root@host\.example>/,
    );
    expect(await queue.queue.count()).toBe(0);
    expect(await send('a@billing.shop.example', billing)).toMatch(/^250 /);
    expect(await send('ops@shop.example', relayKey, '')).toMatch(/^250 /);
    expect(await send('cron@host.example')).toMatch(/^250 /);
    expect(await queue.queue.count()).toBe(3);
  } finally {
    await queue.close();
  }
});

it('a first header line "From :" (an mbox separator to mailparser, which then reads no From) is refused, never stored', async () => {
  const queue = new EmlApiQueueTransport({ connection: redis.url });
  const { dialog } = await SmtpDialog.open(relay.port);
  try {
    await dialog.command('EHLO client.example');
    expect((await dialog.command('MAIL FROM:<cron@host.example>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    const before = await queue.queue.count();
    const reply = await dialog.data('From : cron@host.example\r\nTo: ann@example.test\r\nSubject: x\r\n\r\nhi\r\n');
    expect(`${reply.code} ${reply.text}`).toMatch(/^554 5\.6\.0 .*line 1.*mbox/);
    expect(await queue.queue.count()).toBe(before);
  } finally {
    dialog.close();
    await queue.close();
  }
});
