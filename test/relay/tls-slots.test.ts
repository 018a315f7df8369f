/**
 * Every connection gives its address's slot back, however it ends: plain
 * text, STARTTLS (smtp-server's upgrade() removes every listener of the raw
 * socket), implicit TLS, through a PROXY header, or cut in the middle of a
 * handshake. Loopback is made untrusted (`trustedNetworks: []`), so the
 * per-address limit counts these clients as it counts remote senders; after
 * many times `maxClientsPerAddress` sessions the address still gets exactly
 * that many connections at once, and the next one is refused.
 */
import { execFile } from 'node:child_process';
import { connect as netConnect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay, type EmlApiRelayOptions } from '../../src/relay/index.js';
import { eventually } from '../helpers/outbox.js';
import { SmtpDialog, TEST_CERT, testTls } from './relay-harness.js';

const run = promisify(execFile);
const LIMIT = 8;
/**
 * Clients at once in the tests that send: a client that reconnects at once may be accepted before the relay
 * has seen its last connection close, so each client may count twice for a moment.
 */
const AT_ONCE = LIMIT / 2;
/** Sessions of each kind: five times the limit, so a slot kept by one session in five fills the address's slots. */
const SESSIONS = 5 * LIMIT;

let emu: Emulator;
const relays: EmlApiRelay[] = [];

beforeAll(async () => {
  emu = await startEmulator();
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await emu?.close();
});

/** A relay without a key of its own (clients AUTH with theirs) that trusts no address, loopback included. */
async function start(options: Partial<EmlApiRelayOptions> = {}): Promise<EmlApiRelay> {
  const relay = await startEmlApiRelay({
    baseUrl: emu.url,
    port: 0,
    retry: false,
    trustedNetworks: [],
    maxClientsPerAddress: LIMIT,
    tls: testTls(),
    ...options,
  });
  relays.push(relay);
  return relay;
}

/**
 * Whether the address gets exactly `LIMIT` connections at once now: all of
 * them greeted (no slot is still counted), the one after refused.
 */
async function slotsAllFree(relay: EmlApiRelay, options: { implicitTls?: boolean; proxyHeader?: string } = {}) {
  const dialogs: SmtpDialog[] = [];
  try {
    for (let i = 0; i < LIMIT; i++) {
      const { dialog, greeting } = await SmtpDialog.open(relay.port, '127.0.0.1', options);
      dialogs.push(dialog);
      if (greeting.code !== 220) return false;
    }
    const over = await overLimit(relay, options);
    expect(over).toBe('refused');
    return true;
  } finally {
    for (const dialog of dialogs) dialog.close();
  }
}

/** The connection after the limit: refused with 421 (plain), or closed before any greeting (implicit TLS). */
async function overLimit(relay: EmlApiRelay, options: { implicitTls?: boolean; proxyHeader?: string }) {
  if (options.implicitTls) {
    const socket = tlsConnect({ port: relay.port, host: '127.0.0.1', ca: testTls().cert, servername: 'localhost' });
    return new Promise<string>((resolve) => {
      socket.once('secureConnect', () => resolve('handshake completed'));
      socket.once('error', () => resolve('refused'));
      socket.once('close', () => resolve('refused'));
    });
  }
  const { dialog, greeting } = await SmtpDialog.open(relay.port, '127.0.0.1', options);
  dialog.close();
  return greeting.code === 421 && /^4\.7\.0 Too many connections from your address/.test(greeting.text)
    ? 'refused'
    : `greeted ${greeting.code}`;
}

const allFreeAgain = (relay: EmlApiRelay, options: { implicitTls?: boolean; proxyHeader?: string } = {}) =>
  eventually(() => slotsAllFree(relay, options), { what: `all ${LIMIT} slots of the address free again` });

/** Python's smtplib: STARTTLS, AUTH LOGIN with the client's key, one message, QUIT; sessions in turn and in threads. */
async function smtplibSessions(
  relay: EmlApiRelay,
  counts: { sequential?: number; parallel?: number; perThread?: number },
) {
  const script = fileURLToPath(new URL('./clients/starttls_sessions.py', import.meta.url));
  const spec = {
    host: '127.0.0.1',
    port: relay.port,
    cafile: TEST_CERT,
    user: 'apikey',
    password: emu.apiKey,
    sequential: counts.sequential ?? 0,
    parallel: counts.parallel ?? 0,
    per_thread: counts.perThread ?? 0,
  };
  const { stdout } = await run('python3', [script, JSON.stringify(spec)], { timeout: 120_000 });
  return JSON.parse(stdout) as Record<string, number>;
}

describe('slots of STARTTLS sessions from an untrusted address', () => {
  it('smtplib sessions in turn, then in four threads at once: all sent, and every slot comes back', async () => {
    const relay = await start();
    expect(await smtplibSessions(relay, { sequential: SESSIONS })).toEqual({ sent: SESSIONS });
    await allFreeAgain(relay);
    expect(await smtplibSessions(relay, { parallel: AT_ONCE, perThread: SESSIONS / AT_ONCE })).toEqual({
      sent: SESSIONS,
    });
    await allFreeAgain(relay);
  }, 120_000);

  it('Nodemailer with requireTLS, a connection per message, then a pool of four: every slot comes back', async () => {
    const relay = await start();
    const options = {
      host: '127.0.0.1',
      port: relay.port,
      requireTLS: true,
      tls: { ca: testTls().cert, servername: 'localhost' },
      auth: { user: 'apikey', pass: emu.apiKey },
    };
    const mail = (n: number) => ({ from: 'app@example.test', to: 'ann@example.test', subject: `nm ${n}`, text: 'x' });
    const single = nodemailer.createTransport(options);
    for (let n = 0; n < SESSIONS; n++) expect((await single.sendMail(mail(n))).response).toMatch(/^250 /);
    const pool = nodemailer.createTransport({ ...options, pool: true, maxConnections: AT_ONCE, maxMessages: 5 });
    const sent = await Promise.all(Array.from({ length: 100 }, (_, n) => pool.sendMail(mail(1000 + n))));
    pool.close();
    expect(sent.every((info) => info.response.startsWith('250 '))).toBe(true);
    await allFreeAgain(relay);
  }, 120_000);

  it('sessions cut at every step of STARTTLS give their slots back', async () => {
    const relay = await start();
    for (let round = 0; round < 3 * LIMIT; round++) {
      const { dialog, greeting } = await SmtpDialog.open(relay.port);
      expect(greeting.code).toBe(220);
      await dialog.command('EHLO client.example');
      const step = round % 3;
      if (step === 0) {
        // STARTTLS answered, then the client leaves before any handshake.
        expect((await dialog.command('STARTTLS')).code).toBe(220);
        dialog.close();
      } else if (step === 1) {
        // A handshake that fails: the client answers 220 with plain text.
        expect((await dialog.command('STARTTLS')).code).toBe(220);
        dialog.write('this is not a TLS ClientHello\r\n'.repeat(20));
        await eventually(() => dialog.closed, { what: 'the relay closing a failed handshake' });
      } else {
        // TLS up, then the client vanishes without QUIT.
        expect((await dialog.starttls()).code).toBe(220);
        expect((await dialog.command('EHLO client.example')).code).toBe(250);
        dialog.close();
      }
    }
    await allFreeAgain(relay);
  });
});

describe('slots of implicit TLS and PROXY connections', () => {
  it('implicit TLS: sessions that QUIT, vanish, or never finish their handshake give their slots back', async () => {
    const relay = await start({ tls: { ...testTls(), implicit: true } });
    for (let round = 0; round < 3 * LIMIT; round++) {
      const step = round % 3;
      if (step === 2) {
        // Plain bytes where a ClientHello should be (the relay drops the socket); or a client that leaves
        // before it sends its ClientHello.
        const raw = netConnect({ port: relay.port, host: '127.0.0.1' });
        raw.on('error', () => undefined);
        await new Promise((resolve) => raw.once('connect', resolve));
        if (round % 2 === 0) raw.write('EHLO plain.example\r\n');
        else raw.destroy();
        await new Promise((resolve) => raw.once('close', resolve));
        continue;
      }
      const { dialog, greeting } = await SmtpDialog.open(relay.port, '127.0.0.1', { implicitTls: true });
      expect(greeting.code).toBe(220);
      if (step === 0) expect((await dialog.command('QUIT')).code).toBe(221);
      dialog.close();
    }
    await allFreeAgain(relay, { implicitTls: true });
  });

  it('through a PROXY header, with STARTTLS: the client named in the header gets its slots back', async () => {
    const relay = await start({ proxyProtocol: ['127.0.0.1'] });
    const proxyHeader = 'PROXY TCP4 198.51.100.7 127.0.0.1 40000 2525';
    for (let round = 0; round < 5 * LIMIT; round++) {
      const { dialog, greeting } = await SmtpDialog.open(relay.port, '127.0.0.1', { proxyHeader });
      expect(greeting.code).toBe(220);
      await dialog.command('EHLO client.example');
      expect((await dialog.starttls()).code).toBe(220);
      expect((await dialog.command('EHLO client.example')).code).toBe(250);
      if (round % 2 === 0) expect((await dialog.command('QUIT')).code).toBe(221);
      dialog.close();
    }
    await allFreeAgain(relay, { proxyHeader });
  });
});
