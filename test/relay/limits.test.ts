/**
 * No client can starve the others: connections per client address are
 * capped, idle clients are let go sooner when the relay is nearly full, and
 * a message must arrive at a minimum rate and within a total time. Clients
 * take different loopback addresses (127.0.0.2, 127.0.0.3...) to stand for
 * different hosts; loopback is trusted (exempt) only where a test says so.
 */
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startSmtpRelay, type SmtpRelay, type SmtpRelayOptions } from '../../src/relay/index.js';
import { SmtpDialog } from './relay-harness.js';

let emu: Emulator;
const opened: SmtpDialog[] = [];
const relays: SmtpRelay[] = [];

beforeAll(async () => {
  emu = await startEmulator();
});
afterEach(() => {
  for (const dialog of opened.splice(0)) dialog.close();
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await emu?.close();
});

async function start(options: Partial<SmtpRelayOptions>): Promise<SmtpRelay> {
  const relay = await startSmtpRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retries: false, ...options });
  relays.push(relay);
  return relay;
}

async function connect(relay: SmtpRelay, localAddress: string) {
  const { dialog, greeting } = await SmtpDialog.open(relay.port, '127.0.0.1', { localAddress });
  opened.push(dialog);
  return { dialog, greeting };
}

const message = (id: string) =>
  `From: app@example.test\r\nTo: ann@example.test\r\nSubject: ${id}\r\nMessage-ID: <${id}@example.test>\r\n\r\nHi\r\n`;

/** A whole transaction up to the message's reply. */
async function send(dialog: SmtpDialog, id: string) {
  expect((await dialog.command('EHLO client.example')).code).toBe(250);
  expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
  expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
  return dialog.data(message(id));
}

describe('connections per client address (maxClientsPerAddress)', () => {
  it('one address cannot take every slot: past the cap it gets 421 4.7.0, others still connect and send', async () => {
    const relay = await start({ maxClients: 10, maxClientsPerAddress: 3, trustedNetworks: ['127.0.0.1/32'] });
    const held = [];
    for (let i = 0; i < 3; i++) held.push(await connect(relay, '127.0.0.2'));
    for (const { greeting } of held) expect(greeting.code).toBe(220);
    const refused = await connect(relay, '127.0.0.2');
    expect(refused.greeting.code).toBe(421);
    expect(refused.greeting.text).toMatch(/^4\.7\.0 Too many connections from your address \(at most 3\)/);
    const other = await connect(relay, '127.0.0.3');
    expect(other.greeting.code).toBe(220);
    expect((await send(other.dialog, 'other-address')).code).toBe(250);
    // A slot of the address is given back when one of its connections ends.
    expect((await held[0]!.dialog.command('QUIT')).code).toBe(221);
    let again = await connect(relay, '127.0.0.2');
    for (let i = 0; i < 50 && again.greeting.code !== 220; i++) again = await connect(relay, '127.0.0.2');
    expect(again.greeting.code).toBe(220);
    // trustedNetworks (here 127.0.0.1) are exempt, as Postfix exempts $mynetworks.
    for (let i = 0; i < 4; i++) expect((await connect(relay, '127.0.0.1')).greeting.code).toBe(220);
  });
});

describe('stress: idle clients let go sooner when the relay is nearly full (stressIdleTimeout)', () => {
  it('from 80% of maxClients on, idle connections get 421 after stressIdleTimeout, and a new client is served', async () => {
    const relay = await start({ maxClients: 5, idleTimeout: 300_000, stressIdleTimeout: 100 });
    const idle = [];
    // Three connections (60%): not under stress, the idle timeout is 5 minutes.
    for (let i = 0; i < 3; i++) idle.push(await connect(relay, `127.0.0.${10 + i}`));
    const probe = await idle[0]!.dialog.command('NOOP');
    expect(probe.code).toBe(250);
    // The fourth (80%) puts the relay under stress: every idle connection is closed after 100 ms.
    idle.push(await connect(relay, '127.0.0.13'));
    for (const { dialog } of idle) {
      const timeout = await dialog.reply();
      expect(timeout.code).toBe(421);
    }
    const fresh = await connect(relay, '127.0.0.20');
    expect(fresh.greeting.code).toBe(220);
    expect((await send(fresh.dialog, 'after-stress')).code).toBe(250);
  });
});

describe('DATA deadline and minimum rate (dataTimeout, minDataRate)', () => {
  /** Writes the message a few bytes at a time every `every` ms until the connection closes. */
  function trickle(dialog: SmtpDialog, bytes: number, every: number): () => void {
    const timer = setInterval(() => dialog.write('x'.repeat(bytes)), every);
    return () => clearInterval(timer);
  }

  it('a message trickling in below minDataRate is cut off with 421 4.4.2 and not sent', async () => {
    // The idle timeout (300 ms) never fires: a byte comes every 20 ms. The rate (50 bytes/s) is under 10,000.
    const relay = await start({ idleTimeout: 300, minDataRate: 10_000 });
    const { dialog } = await connect(relay, '127.0.0.30');
    expect((await dialog.command('EHLO client.example')).code).toBe(250);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    expect((await dialog.command('DATA')).code).toBe(354);
    dialog.write('From: app@example.test\r\nTo: ann@example.test\r\nSubject: slow-rate\r\n\r\n');
    const stop = trickle(dialog, 1, 20);
    try {
      const cut = await dialog.reply();
      expect(cut.code).toBe(421);
      expect(cut.text).toMatch(/^4\.4\.2 The message did not arrive in time \(at least 10000 bytes a second/);
    } finally {
      stop();
    }
    expect(emu.messages().some((m) => m.raw.toString().includes('slow-rate'))).toBe(false);
  });

  it('a message arriving fast enough but past dataTimeout is cut off too', async () => {
    const relay = await start({ idleTimeout: 60_000, minDataRate: 1, dataTimeout: 300 });
    const { dialog } = await connect(relay, '127.0.0.31');
    expect((await dialog.command('EHLO client.example')).code).toBe(250);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    expect((await dialog.command('DATA')).code).toBe(354);
    dialog.write('From: app@example.test\r\nTo: ann@example.test\r\nSubject: too-long\r\n\r\n');
    const stop = trickle(dialog, 1000, 10);
    try {
      const cut = await dialog.reply();
      expect(cut.code).toBe(421);
      expect(cut.text).toMatch(/all of it within 300 ms\)/);
    } finally {
      stop();
    }
  });

  it('the deadline stops once the message is in: the time the service takes is not the client’s', async () => {
    const relay = await start({ idleTimeout: 300, minDataRate: 10_000, dataTimeout: 500 });
    emu.setFaults({ latencyMs: 1_000 });
    try {
      const { dialog } = await connect(relay, '127.0.0.32');
      expect((await send(dialog, 'slow-service')).code).toBe(250);
    } finally {
      emu.setFaults(undefined);
    }
  });
});

describe('many messages in flight', () => {
  it('30 messages at once (Nodemailer pool) draw no MaxListenersExceededWarning from the relay', async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    const relay = await start({ maxClients: 40 });
    // The service takes 200 ms a message, so that all 30 are in the relay at once.
    emu.setFaults({ latencyMs: 200 });
    const transporter = nodemailer.createTransport({
      host: '127.0.0.1',
      port: relay.port,
      ignoreTLS: true,
      pool: true,
      maxConnections: 30,
    });
    try {
      const infos = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          transporter.sendMail({
            from: 'app@example.test',
            to: 'ann@example.test',
            subject: `inflight-${i}`,
            text: 'x',
          }),
        ),
      );
      for (const info of infos) expect(info.response).toMatch(/^250 /);
      // Node emits the warning on the next turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      transporter.close();
      emu.setFaults(undefined);
      process.off('warning', onWarning);
    }
    expect(warnings.map((w) => `${w.name}: ${w.message}`)).toEqual([]);
  });
});
