/**
 * No client can starve the others: connections per client address are
 * capped, idle clients are let go sooner when the relay is nearly full, and
 * a message must arrive at a minimum rate and within a total time. Clients
 * take different loopback addresses (127.0.0.2, 127.0.0.3...) to stand for
 * different hosts; loopback is trusted (exempt) only where a test says so.
 */
import { connect as netConnect, type Socket } from 'node:net';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay, type EmlApiRelayOptions } from '../../src/relay/index.js';
import { eventually } from '../helpers/async.js';
import { SmtpDialog, testTls } from './relay-harness.js';

let emu: Emulator;
const opened: SmtpDialog[] = [];
const silentSockets: Socket[] = [];
const relays: EmlApiRelay[] = [];

beforeAll(async () => {
  emu = await startEmulator();
});
afterEach(() => {
  for (const dialog of opened.splice(0)) dialog.close();
  for (const socket of silentSockets.splice(0)) socket.destroy();
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await emu?.close();
});

async function start(options: Partial<EmlApiRelayOptions>): Promise<EmlApiRelay> {
  const relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false, ...options });
  relays.push(relay);
  return relay;
}

async function connect(relay: EmlApiRelay, localAddress: string) {
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
    const relay = await start({ maxClients: 5, timeouts: { idle: 300_000, stressIdle: 100 } });
    const idle: Awaited<ReturnType<typeof connect>>[] = [];
    // Three connections (60%): not under stress, the idle timeout is 5 minutes.
    for (let i = 0; i < 3; i++) idle.push(await connect(relay, `127.0.0.${10 + i}`));
    const probe = await idle[0]!.dialog.command('NOOP');
    expect(probe.code).toBe(250);
    // The fourth (80%) puts the relay under stress: idle connections are closed after 100 ms, until fewer
    // than 60% of the slots are taken (3 of 5). So at least two are cut; the others may be cut in the same
    // instant or, once stress ends, keep the long timeout (which of the two depends on when each timer fires).
    idle.push(await connect(relay, '127.0.0.13'));
    const codes: number[] = [];
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve, reject) => {
      for (const { dialog } of idle) {
        dialog.reply().then(
          (reply) => {
            codes.push(reply.code);
            if (codes.length === 2) resolve();
          },
          () => undefined,
        );
      }
      timer = setTimeout(
        () => reject(new Error(`only ${codes.length} idle connections were cut under stress`)),
        20_000,
      );
    }).finally(() => clearTimeout(timer));
    expect(codes.slice(0, 2)).toEqual([421, 421]);
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
    const relay = await start({ timeouts: { idle: 300 }, minDataRate: 10_000 });
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

  it('a message cut off for its rate is logged with the 421 its client got, not as the client leaving', async () => {
    const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
    const log = (level: string) => (fields: Record<string, unknown>, message: string) =>
      lines.push({ level, fields, message });
    const logger = { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
    const relay = await start({ timeouts: { idle: 300 }, minDataRate: 10_000, logger });
    const { dialog } = await connect(relay, '127.0.0.32');
    expect((await dialog.command('EHLO client.example')).code).toBe(250);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    expect((await dialog.command('DATA')).code).toBe(354);
    dialog.write('From: app@example.test\r\nTo: ann@example.test\r\nSubject: slow-logged\r\n\r\n');
    const stop = trickle(dialog, 1, 20);
    try {
      expect((await dialog.reply()).code).toBe(421);
    } finally {
      stop();
    }
    await eventually(() => lines.some((line) => line.level === 'warn'), { what: 'the warning of the cut' });
    expect(lines.filter((line) => line.level === 'warn').map(({ fields, message }) => [message, fields.reply])).toEqual(
      [['Message refused', expect.stringMatching(/^421 4\.4\.2 The message did not arrive in time/)]],
    );
  });

  it('a message cut off is over at once, while its client still holds the connection: a shutdown then gives nothing up', async () => {
    const warnings: [string, unknown][] = [];
    const quiet = () => undefined;
    const logger = {
      debug: quiet,
      info: quiet,
      error: quiet,
      warn: (f: Record<string, unknown>, m: string) => warnings.push([m, f.reply]),
    };
    const relay = await start({ timeouts: { idle: 60_000, data: 300 }, minDataRate: 1, logger });
    // A client that does not close its side when the relay closes its own (smtplib, or a stalled client).
    const socket = netConnect({ port: relay.port, host: '127.0.0.1', localAddress: '127.0.0.33', allowHalfOpen: true });
    silentSockets.push(socket);
    let heard = '';
    socket.on('data', (chunk: Buffer) => (heard += chunk.toString()));
    const said = (code: string) => eventually(() => heard.includes(`\r\n${code} `) || heard.startsWith(`${code} `));
    await said('220');
    socket.write('EHLO client.example\r\nMAIL FROM:<app@example.test>\r\nRCPT TO:<ann@example.test>\r\nDATA\r\n');
    await said('354');
    socket.write('From: app@example.test\r\nTo: ann@example.test\r\nSubject: cut-held\r\n\r\nHalf a mess');
    await said('421');
    // Well within the 5 s smtp-server waits for a client to close its side after a 421.
    expect(await relay.close({ grace: 4_000 })).toEqual({ givenUp: 0 });
    expect(warnings).toEqual([
      ['Message refused', expect.stringMatching(/^421 4\.4\.2 The message did not arrive in time/)],
    ]);
  });

  it('a message arriving fast enough but past dataTimeout is cut off too', async () => {
    const relay = await start({ timeouts: { idle: 60_000, data: 300 }, minDataRate: 1 });
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
    const relay = await start({ timeouts: { idle: 300, data: 500 }, minDataRate: 10_000 });
    emu.setFaults({ latencyMs: 1_000 });
    try {
      const { dialog } = await connect(relay, '127.0.0.32');
      expect((await send(dialog, 'slow-service')).code).toBe(250);
    } finally {
      emu.setFaults(undefined);
    }
  });
});

describe('upload slots shared fairly among clients (maxConnections to the service)', () => {
  /** Starts a transaction up to DATA. */
  async function ready(dialog: SmtpDialog): Promise<void> {
    expect((await dialog.command('EHLO client.example')).code).toBe(250);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
  }

  /** Sends the message of a transaction that is ready; resolves with the reply code, noting its turn in `order`. */
  async function sendReady(dialog: SmtpDialog, id: string, order: string[]): Promise<number> {
    const reply = await dialog.data(message(id));
    order.push(id);
    return reply.code;
  }

  async function sending(dialog: SmtpDialog, id: string, order: string[]): Promise<number> {
    await ready(dialog);
    return sendReady(dialog, id, order);
  }

  it("one client's backlog does not hold every slot: another client's message is uploaded beside it, not after it", async () => {
    const relay = await start({ maxConnections: 2 });
    // Every upload takes the service 300 ms.
    emu.setFaults({ latencyMs: 300 });
    try {
      const order: string[] = [];
      const other = await connect(relay, '127.0.0.71');
      await ready(other.dialog);
      const bulk = [];
      for (let i = 0; i < 4; i++) bulk.push(await connect(relay, '127.0.0.70'));
      const backlog = bulk.map(({ dialog }, i) => sending(dialog, `bulk-${i}`, order));
      await eventually(() => (emu.faultStats()?.none ?? 0) >= 1);
      const small = await sendReady(other.dialog, 'small', order);
      expect([small, ...(await Promise.all(backlog))]).toEqual([250, 250, 250, 250, 250]);
      // First come, first served, it came fifth: after the whole backlog. Now a slot was kept for it.
      expect(order.indexOf('small')).toBeLessThan(3);
    } finally {
      emu.setFaults(undefined);
    }
  });

  it('a client alone on the relay gets every slot', async () => {
    const relay = await start({ maxConnections: 2 });
    emu.setFaults({ latencyMs: 300 });
    try {
      const order: string[] = [];
      const alone = [];
      for (let i = 0; i < 3; i++) alone.push(await connect(relay, '127.0.0.72'));
      const sends = alone.map(({ dialog }, i) => sending(dialog, `alone-${i}`, order));
      // Two uploads reach the service before either is answered.
      await eventually(() => (emu.faultStats()?.none ?? 0) >= 2 || order.length > 0);
      expect(order).toEqual([]);
      expect(await Promise.all(sends)).toEqual([250, 250, 250]);
    } finally {
      emu.setFaults(undefined);
    }
  });
});

describe('implicit TLS: sockets in their handshake count against their address, and have a deadline', () => {
  /** Opens a TCP connection from `localAddress` that never starts its TLS handshake; resolves once connected. */
  async function silent(relay: EmlApiRelay, localAddress: string): Promise<{ closed: Promise<unknown> }> {
    const socket = netConnect({ port: relay.port, host: '127.0.0.1', localAddress });
    socket.on('error', () => undefined);
    silentSockets.push(socket);
    const closed = new Promise((resolve) => socket.once('close', resolve));
    await new Promise((resolve) => socket.once('connect', resolve));
    return { closed };
  }

  it('one address opening silent TCP connections takes at most its share: a TLS client from another address is greeted', async () => {
    // smtp-server keeps sockets in their handshake in one pool of maxClients (4) for all addresses.
    const relay = await start({
      tls: { ...testTls(), implicit: true },
      maxClients: 4,
      maxClientsPerAddress: 2,
      trustedNetworks: ['127.0.0.1/32'],
    });
    const hogs = [];
    for (let i = 0; i < 6; i++) hogs.push(await silent(relay, '127.0.0.61'));
    const { dialog, greeting } = await SmtpDialog.open(relay.port, '127.0.0.1', {
      implicitTls: true,
      localAddress: '127.0.0.62',
    });
    opened.push(dialog);
    expect(greeting.code).toBe(220);
    expect((await send(dialog, 'tls-beside-hogs')).code).toBe(250);
    // Past its 2, the address's sockets were closed at once.
    await Promise.all(hogs.slice(2).map((hog) => hog.closed));
  });

  it('a socket that never completes its handshake is closed after tlsHandshakeTimeout, not the idle timeout', async () => {
    const relay = await start({
      tls: { ...testTls(), implicit: true },
      timeouts: { idle: 300_000, tlsHandshake: 200 },
    });
    await (
      await silent(relay, '127.0.0.63')
    ).closed;
  });
});

describe('deadlines on command lines and on sessions (a byte, or a NOOP, now and then holds no slot)', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  /** Writes `line` a byte every `every` ms, never ending it, until stopped. */
  function dribble(dialog: SmtpDialog, line: string, every: number): () => void {
    let at = 0;
    const timer = setInterval(() => dialog.write(line[at++ % line.length]!), every);
    return () => clearInterval(timer);
  }

  it('a command line written a byte at a time is cut off with 421 4.4.2 within the idle timeout of its first byte, though no byte is ever late', async () => {
    const relay = await start({ timeouts: { idle: 300 } });
    const { dialog } = await connect(relay, '127.0.0.50');
    const stop = dribble(dialog, `EHLO ${'a'.repeat(10_000)}`, 20);
    try {
      const cut = await dialog.reply();
      expect(cut.code).toBe(421);
      expect(cut.text).toMatch(/^4\.4\.2 The command line was not complete within 300 ms of its first byte/);
    } finally {
      stop();
    }
  });

  it('two addresses dribbling command lines on every slot (maxClients 20, 10 per address) no longer hold them: under stress lines are cut, a new client gets in', async () => {
    const relay = await start({
      maxClients: 20,
      maxClientsPerAddress: 10,
      timeouts: { idle: 300_000, stressIdle: 200 },
      trustedNetworks: ['127.0.0.1/32'],
    });
    const held: Awaited<ReturnType<typeof connect>>[] = [];
    const stops = [];
    try {
      for (let i = 0; i < 20; i++) {
        const client = await connect(relay, i < 10 ? '127.0.0.51' : '127.0.0.52');
        expect(client.greeting.code).toBe(220);
        held.push(client);
        stops.push(dribble(client.dialog, `EHLO ${'a'.repeat(10_000)}`, 20));
      }
      // Every slot is taken (stress): lines are cut after the stress idle timeout, then a client from a third address gets in.
      await eventually(() => held.some(({ dialog }) => dialog.hasUnreadReply()));
      let fresh = await connect(relay, '127.0.0.53');
      await eventually(
        async () => {
          if (fresh.greeting.code !== 220) fresh = await connect(relay, '127.0.0.53');
          return fresh.greeting.code === 220;
        },
        { what: 'a client of a third address greeted with 220' },
      );
      expect((await send(fresh.dialog, 'after-dribblers')).code).toBe(250);
      const cut = await Promise.all(
        held.filter(({ dialog }) => dialog.hasUnreadReply()).map(({ dialog }) => dialog.reply()),
      );
      expect(cut.length).toBeGreaterThan(0);
      for (const reply of cut) {
        expect(reply.code).toBe(421);
        expect(reply.text).toMatch(/^4\.4\.2 The command line was not complete within 200 ms of its first byte/);
      }
    } finally {
      for (const stop of stops) stop();
    }
  });

  it('under stress, a session that sends nothing but NOOPs and RSETs is closed with 421 4.4.2; those sending mail are not', async () => {
    // Stress from 4 connections on: three send mail all along, the fourth only NOOP and RSET.
    const relay = await start({ maxClients: 4, timeouts: { idle: 300_000, stressIdle: 300 } });
    const senders = [];
    for (let i = 0; i < 3; i++) senders.push((await connect(relay, `127.0.0.${56 + i}`)).dialog);
    for (const dialog of senders) expect((await dialog.command('EHLO client.example')).code).toBe(250);
    const { dialog: idler } = await connect(relay, '127.0.0.59');
    let done = false;
    const sending = senders.map(async (dialog, k) => {
      for (let i = 0; !done; i++) {
        expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
        expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
        expect((await dialog.data(message(`busy-${k}-${i}`))).code).toBe(250);
      }
    });
    let reply = await idler.command('EHLO client.example');
    try {
      for (let i = 0; i < 500 && reply.code === 250; i++) {
        await sleep(20);
        reply = await idler.command(i % 2 ? 'NOOP' : 'RSET');
      }
    } finally {
      done = true;
      await Promise.all(sending);
    }
    expect(reply.code).toBe(421);
    expect(reply.text).toMatch(/^4\.4\.2 No mail sent within 300 ms \(no AUTH, MAIL, RCPT or message\)/);
  });

  it('not under stress, a session may take its time between commands (a NOOP keeps it, as before)', async () => {
    // The session outlasts the idle timeout by half; each pause leaves a loaded machine 900 ms to spare.
    const relay = await start({ timeouts: { idle: 1_000 } });
    const { dialog } = await connect(relay, '127.0.0.60');
    expect((await dialog.command('EHLO client.example')).code).toBe(250);
    for (let i = 0; i < 15; i++) {
      await sleep(100);
      expect((await dialog.command('NOOP')).code).toBe(250);
    }
  });

  it('a session that sends mail keeps its connection: each transaction, and the time the service takes, restart the clock', async () => {
    const relay = await start({ timeouts: { idle: 1_500 } });
    const { dialog } = await connect(relay, '127.0.0.55');
    // The service takes longer than the idle timeout: the relay's time is not the client's.
    emu.setFaults({ latencyMs: 2_000 });
    try {
      expect((await send(dialog, 'progress-slow-service')).code).toBe(250);
    } finally {
      emu.setFaults(undefined);
    }
    // Over 1.5 s of NOOPs in all, but never 1.5 s without a message.
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 3; i++) {
        expect((await dialog.command('NOOP')).code).toBe(250);
        await sleep(150);
      }
      expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
      expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
      expect((await dialog.data(message(`progress-${round}`))).code).toBe(250);
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
