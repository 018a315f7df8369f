/**
 * Who may send: AUTH with an API key as the password (checked with the
 * service), the relay's own key for allowed addresses, AUTH only over TLS
 * from other hosts (STARTTLS with a test certificate, implicit TLS).
 */
import nodemailer from 'nodemailer';
import { readFileSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { hashRelayPassword, startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { rejectionOf, eventually } from '../helpers/async.js';
import { closedPort } from '../helpers/fake-service.js';
import { capturingLogger } from '../helpers/logger.js';
import { makeNetns, smtplibSend, SmtpDialog, starttlsSessions, TEST_CERT, testTls } from './relay-harness.js';

let emu: Emulator;
/** No key of its own, STARTTLS offered: clients AUTH with their key. */
let relay: EmlApiRelay;
const opened: SmtpDialog[] = [];
const relays: EmlApiRelay[] = [];
const plain = (user: string, password: string) => Buffer.from(`\0${user}\0${password}`).toString('base64');

beforeAll(async () => {
  emu = await startEmulator({ apiKeys: [{ key: 'k-groups-only', scopes: ['group:insert'] }] });
  // No pause before failed AUTHs' replies here: the tests below that refuse keys stay fast ('AUTH guessing' tests it).
  relay = await startEmlApiRelay({ baseUrl: emu.url, port: 0, retry: false, tls: testTls(), authFailureDelay: 0 });
});
afterEach(() => {
  for (const dialog of opened.splice(0)) dialog.close();
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await relay?.close();
  await emu?.close();
});

async function ehlo(port = relay.port, host = '127.0.0.1', localAddress?: string) {
  const { dialog } = await SmtpDialog.open(port, host, localAddress ? { localAddress } : {});
  opened.push(dialog);
  const reply = await dialog.command('EHLO client.example');
  return { dialog, features: reply.lines.slice(1) };
}

const message = (id: string) =>
  `From: app@example.test\r\nTo: ann@example.test\r\nSubject: ${id}\r\nMessage-ID: <${id}@example.test>\r\n\r\nHi\r\n`;

describe('AUTH with the API key as the password', () => {
  it('a key the service accepts: 235, and the message goes out with it', async () => {
    const { dialog } = await ehlo();
    const auth = await dialog.command(`AUTH PLAIN ${plain('anything', emu.apiKey)}`);
    expect(auth.code).toBe(235);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    expect((await dialog.data(message('auth-ok'))).code).toBe(250);
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<auth-ok@example.test>')).toBe(true);
  });

  it('AUTH LOGIN works the same', async () => {
    const { dialog } = await ehlo();
    expect((await dialog.command('AUTH LOGIN')).code).toBe(334);
    expect((await dialog.command(Buffer.from('user').toString('base64'))).code).toBe(334);
    expect((await dialog.command(Buffer.from(emu.apiKey).toString('base64'))).code).toBe(235);
  });

  it('a wrong key, or one without the sender scope: 535 5.7.8 (the why is in the log); no AUTH: MAIL gets 530', async () => {
    const { dialog } = await ehlo();
    const wrong = await dialog.command(`AUTH PLAIN ${plain('u', 'emu_wrong_key')}`);
    expect(wrong.code).toBe(535);
    expect(wrong.text).toBe('5.7.8 Authentication credentials invalid');
    const scope = await dialog.command(`AUTH PLAIN ${plain('u', 'k-groups-only')}`);
    expect(scope.code).toBe(535);
    expect(scope.text).toBe('5.7.8 Authentication credentials invalid');
    const mail = await dialog.command('MAIL FROM:<app@example.test>');
    expect(mail.code).toBe(530);
    expect(mail.text).toMatch(/^5\.7\.0 Authentication required/);
  });

  it('closes the connection (421) after three failed AUTHs', async () => {
    const { dialog } = await ehlo();
    expect((await dialog.command(`AUTH PLAIN ${plain('u', 'bad-1')}`)).code).toBe(535);
    expect((await dialog.command(`AUTH PLAIN ${plain('u', 'bad-2')}`)).code).toBe(535);
    expect((await dialog.command(`AUTH PLAIN ${plain('u', 'bad-3')}`)).code).toBe(421);
  });

  it('a service it cannot reach: 454 4.7.0 (try again later), not 535', async () => {
    const down = await startEmlApiRelay({
      baseUrl: `http://127.0.0.1:${await closedPort()}`,
      port: 0,
      retry: false,
      authFailureDelay: 0,
    });
    relays.push(down);
    const { dialog } = await ehlo(down.port);
    const auth = await dialog.command(`AUTH PLAIN ${plain('u', emu.apiKey)}`);
    expect(auth.code).toBe(454);
    expect(auth.text).toMatch(/^4\.7\.0 Temporary authentication failure/);
  });
});

describe('TLS', () => {
  it('STARTTLS with the test certificate, then AUTH and send (Python smtplib)', async () => {
    const result = await smtplibSend({
      host: '127.0.0.1',
      port: relay.port,
      starttls: TEST_CERT,
      password: emu.apiKey,
      from: 'app@example.test',
      to: ['ann@example.test'],
      subject: 'over TLS',
      body: 'secret',
      message_id: '<tls-1@example.test>',
      date: 'Mon, 23 Nov 2026 10:00:00 +0000',
    });
    expect(result.error).toBeUndefined();
    expect(result.features).toContain('starttls');
    expect(result.features_tls).not.toContain('starttls');
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<tls-1@example.test>')).toBe(true);
  });

  it('implicit TLS (Nodemailer secure: true)', async () => {
    const tls = await startEmlApiRelay({
      baseUrl: emu.url,
      port: 0,
      retry: false,
      tls: { ...testTls(), implicit: true },
    });
    relays.push(tls);
    const transporter = nodemailer.createTransport({
      host: '127.0.0.1',
      port: tls.port,
      secure: true,
      tls: { ca: readFileSync(TEST_CERT), servername: 'localhost' },
      auth: { user: 'app', pass: emu.apiKey },
    });
    const info = await transporter.sendMail({
      from: 'app@example.test',
      to: 'ann@example.test',
      subject: 'implicit',
      text: 'x',
      messageId: '<tls-2@example.test>',
    });
    transporter.close();
    expect(info.response).toMatch(/^250 2\.0\.0 Ok: msg_/);
  });
});

describe("the relay's own key", () => {
  it('loopback sends without AUTH; a key the service refuses stops the start with EAUTH', async () => {
    const own = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0 });
    relays.push(own);
    const { dialog } = await ehlo(own.port);
    expect((await dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(250);
    const err = await rejectionOf(
      startEmlApiRelay({ baseUrl: emu.url, apiKey: 'emu_not_a_key', port: 0, retry: false }),
    );
    expect(err.code).toBe('EAUTH');
  });
});

describe('allowUnauthenticatedFrom matches each address family on its own', () => {
  it('::/0 lets every IPv6 client send without AUTH, not the IPv4 ones (an IPv4 client from 127.0.0.2 gets 530)', async () => {
    const own = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      allowUnauthenticatedFrom: ['::/0'],
    });
    relays.push(own);
    const { dialog } = await ehlo(own.port, '127.0.0.1', '127.0.0.2');
    const mail = await dialog.command('MAIL FROM:<cron@example.test>');
    expect(mail.code).toBe(530);
    // Written as an IPv4-mapped network, an IPv4 network is one.
    const mapped = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      allowUnauthenticatedFrom: ['::ffff:127.0.0.0/104'],
    });
    relays.push(mapped);
    const other = await ehlo(mapped.port, '127.0.0.1', '127.0.0.2');
    expect((await other.dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(250);
  });
});

describe('behind a proxy on the same machine (proxyProtocol)', () => {
  it('clients are known by the address of the PROXY header: not loopback, so not allowed without AUTH, and capped per address', async () => {
    const proxied = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      proxyProtocol: ['127.0.0.1'],
      maxClientsPerAddress: 1,
    });
    relays.push(proxied);
    const through = (client: string) =>
      SmtpDialog.open(proxied.port, '127.0.0.1', { proxyHeader: `PROXY TCP4 ${client} 127.0.0.1 40000 2525` });
    const outside = await through('198.51.100.7');
    opened.push(outside.dialog);
    expect(outside.greeting.code).toBe(220);
    await outside.dialog.command('EHLO client.example');
    expect((await outside.dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(530);
    // The same client again: over its cap of one, whatever the proxy's own address.
    const again = await through('198.51.100.7');
    opened.push(again.dialog);
    expect(again.greeting.code).toBe(421);
    expect(again.greeting.text).toMatch(/^4\.7\.0 Too many connections from your address/);
    // A client on the proxy's machine is a loopback one.
    const local = await through('127.0.0.1');
    opened.push(local.dialog);
    await local.dialog.command('EHLO client.example');
    expect((await local.dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(250);
  });

  it('a connection from the proxy that never sends its header is closed after tlsHandshakeTimeout', async () => {
    const proxied = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      proxyProtocol: ['127.0.0.1'],
      timeouts: { tlsHandshake: 200 },
    });
    relays.push(proxied);
    const socket = netConnect({ port: proxied.port, host: '127.0.0.1' });
    socket.on('error', () => undefined);
    await new Promise((resolve) => socket.once('close', resolve));
  });

  it.each([[['10.0.0.0/8']], [['proxy.internal']], ['127.0.0.1']])('proxyProtocol %j is ECONFIG', async (value) => {
    const err = await rejectionOf(
      startEmlApiRelay({ baseUrl: emu.url, port: 0, proxyProtocol: value as unknown as string[] }),
    );
    expect(err.code).toBe('ECONFIG');
    expect(err.message).toMatch(/Invalid option proxyProtocol: expected an array of IP addresses/);
  });
});

describe("the relay's own users (direct mode, with the relay's key)", () => {
  it('a listed user sends with the relay key; its name is never tried as an API key; other names still AUTH with a key', async () => {
    const own = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      authFailureDelay: 0,
      allowUnauthenticatedFrom: [],
      users: [{ username: 'billing', passwordHash: await hashRelayPassword('pw-billing') }],
    });
    relays.push(own);
    const { dialog } = await ehlo(own.port);
    emu.setFaults({});
    const asKey = await dialog.command(`AUTH PLAIN ${plain('billing', emu.apiKey)}`);
    const asked = emu.faultStats()!.none;
    emu.setFaults(undefined);
    expect(asKey.code).toBe(535);
    expect(asked).toBe(0);
    expect((await dialog.command(`AUTH PLAIN ${plain('billing', 'pw-billing')}`)).code).toBe(235);
    expect((await dialog.command('MAIL FROM:<billing@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    expect((await dialog.data(message('as-relay-user'))).code).toBe(250);
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<as-relay-user@example.test>')).toBe(true);
    const other = await ehlo(own.port);
    expect((await other.dialog.command(`AUTH PLAIN ${plain('someone', emu.apiKey)}`)).code).toBe(235);
  });

  it("users without the relay's key is ECONFIG", async () => {
    const err = await rejectionOf(
      startEmlApiRelay({ baseUrl: emu.url, port: 0, users: [{ username: 'a', password: 'b' }] }),
    );
    expect(err.code).toBe('ECONFIG');
    expect(err.message).toMatch(/users.*apiKey/);
  });
});

describe('AUTH guessing', () => {
  /** Requests the emulator received since `count()` was made. */
  const serviceRequests = () => {
    emu.setFaults({});
    return () => emu.faultStats()!.none;
  };
  afterEach(() => emu.setFaults(undefined));

  /** A session over STARTTLS from `localAddress` (not in trustedNetworks: loopback is not trusted by these relays). */
  async function overTls(port: number, localAddress = '127.0.0.1') {
    const { dialog } = await ehlo(port, '127.0.0.1', localAddress);
    expect((await dialog.starttls()).code).toBe(220);
    await dialog.command('EHLO client.example');
    return dialog;
  }

  it('a failed AUTH is answered only after authFailureDelay; meanwhile other clients are served', async () => {
    const slow = await startEmlApiRelay({ baseUrl: emu.url, port: 0, retry: false, authFailureDelay: 60_000 });
    relays.push(slow);
    const count = serviceRequests();
    const { dialog: guesser } = await ehlo(slow.port);
    guesser.write(`AUTH PLAIN ${plain('u', 'emu_guess_1')}\r\n`);
    await eventually(() => count() === 1);
    // The guess was refused by the service; another client authenticates and sends a whole message.
    const { dialog } = await ehlo(slow.port);
    expect((await dialog.command(`AUTH PLAIN ${plain('u', emu.apiKey)}`)).code).toBe(235);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    expect((await dialog.data(message('while-guessing'))).code).toBe(250);
    expect((await dialog.command('NOOP')).code).toBe(250);
    expect(guesser.hasUnreadReply()).toBe(false);
  });

  it('counts failures per client address across connections, then answers 454 without asking the service', async () => {
    const budget = await startEmlApiRelay({
      baseUrl: emu.url,
      port: 0,
      retry: false,
      tls: testTls(),
      trustedNetworks: [],
      authFailureDelay: 0,
      maxAuthFailuresPerAddress: 3,
    });
    relays.push(budget);
    const count = serviceRequests();
    const first = await overTls(budget.port);
    expect((await first.command(`AUTH PLAIN ${plain('u', 'emu_guess_a')}`)).code).toBe(535);
    expect((await first.command(`AUTH PLAIN ${plain('u', 'emu_guess_b')}`)).code).toBe(535);
    const second = await overTls(budget.port);
    expect((await second.command(`AUTH PLAIN ${plain('u', 'emu_guess_c')}`)).code).toBe(535);
    expect(count()).toBe(3);
    // The budget of 127.0.0.1 is spent: even the right key is refused, and the service is not asked.
    const third = await overTls(budget.port);
    const refused = await third.command(`AUTH PLAIN ${plain('u', emu.apiKey)}`);
    expect(refused.code).toBe(454);
    expect(refused.text).toMatch(/^4\.7\.0 Too many failed authentications from your address/);
    expect(count()).toBe(3);
    // Another address is not affected.
    const other = await overTls(budget.port, '127.0.0.2');
    expect((await other.command(`AUTH PLAIN ${plain('u', emu.apiKey)}`)).code).toBe(235);
  });

  it('AUTHs sent at once on many connections from one address cannot overshoot its budget: the service is asked at most that often', async () => {
    const budget = await startEmlApiRelay({
      baseUrl: emu.url,
      port: 0,
      retry: false,
      tls: testTls(),
      trustedNetworks: [],
      authFailureDelay: 0,
      maxAuthFailuresPerAddress: 3,
    });
    relays.push(budget);
    const sessions = await Promise.all(Array.from({ length: 12 }, () => overTls(budget.port, '127.0.0.3')));
    // The service takes its time: every AUTH is under way before the first is answered.
    const count = serviceRequests();
    emu.setFaults({ latencyMs: 300 });
    const replies = await Promise.all(
      sessions.map((dialog, i) => dialog.command(`AUTH PLAIN ${plain('u', `emu_parallel_guess_${i}`)}`)),
    );
    expect(count()).toBe(3);
    expect(replies.map((r) => r.code).sort()).toEqual([...Array(3).fill(535), ...Array(9).fill(454)].sort());
    for (const reply of replies.filter((r) => r.code === 454)) {
      expect(reply.text).toMatch(/^4\.7\.0 Too many failed authentications from your address/);
    }
  });

  it('a key the service refused is refused again for a while without asking the service', async () => {
    const count = serviceRequests();
    for (let i = 0; i < 3; i++) {
      const { dialog } = await ehlo();
      const reply = await dialog.command(`AUTH PLAIN ${plain('u', 'emu_same_guess')}`);
      expect(reply.code).toBe(535);
    }
    expect(count()).toBe(1);
  });
});

describe('a wrong password is never turned against the right ones', () => {
  /** A relay with its key and two users, AUTH over STARTTLS from 127.0.0.1, which it does not trust. */
  async function usersRelay(limits: { maxAuthFailures?: number; maxAuthFailuresPerAddress?: number }) {
    const started = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      tls: testTls(),
      trustedNetworks: [],
      users: [
        { username: 'billing', password: 'billing-secret-pw' },
        { username: 'cron', password: 'cron-secret-pw' },
      ],
      authFailureDelay: 0,
      ...limits,
    });
    relays.push(started);
    return started;
  }
  async function auth(port: number, user: string, password: string, localAddress = '127.0.0.1') {
    const { dialog } = await ehlo(port, '127.0.0.1', localAddress);
    expect((await dialog.starttls()).code).toBe(220);
    await dialog.command('EHLO client.example');
    const reply = await dialog.command(`AUTH PLAIN ${plain(user, password)}`);
    return `${reply.code} ${reply.text}`;
  }

  it("failures count per address and user name: past maxAuthFailures a wrong password gets 454, while that user's right password, and other users', still get 235", async () => {
    const relay = await usersRelay({ maxAuthFailures: 3, maxAuthFailuresPerAddress: 20 });
    for (const guess of ['pw-1', 'pw-2', 'pw-3']) {
      expect(await auth(relay.port, 'billing', guess)).toBe('535 5.7.8 Authentication credentials invalid');
    }
    expect(await auth(relay.port, 'billing', 'pw-4')).toMatch(
      /^454 4\.7\.0 Too many failed authentications for this user name from your address, try again in \d+ minute/,
    );
    expect(await auth(relay.port, 'billing', 'billing-secret-pw')).toMatch(/^235 /);
    expect(await auth(relay.port, 'cron', 'cron-secret-pw')).toMatch(/^235 /);
    // Names that are no user (an API key's any name) count under the address, apart from the users.
    expect(await auth(relay.port, 'apikey', emu.apiKey)).toMatch(/^235 /);
  });

  it('the same wrong password again, by PLAIN then LOGIN (smtplib, Django) or a sender retrying its queue, counts once', async () => {
    const relay = await usersRelay({ maxAuthFailures: 2, maxAuthFailuresPerAddress: 3 });
    const stale = { host: '127.0.0.1', port: relay.port, user: 'billing', password: 'the-old-password' };
    expect(await starttlsSessions({ ...stale, sequential: 6 })).toEqual({ 535: 6 });
    expect(await starttlsSessions({ ...stale, password: 'billing-secret-pw', sequential: 1 })).toEqual({ sent: 1 });
  });

  it('past the per-address ceiling (a guessing storm) every AUTH of the address is 454 unasked, the right one too; other addresses are not touched', async () => {
    const relay = await usersRelay({ maxAuthFailures: 2, maxAuthFailuresPerAddress: 4 });
    for (const [user, guess] of [
      ['billing', 'a'],
      ['billing', 'b'],
      ['cron', 'c'],
      ['nobody', 'd'],
    ]) {
      expect(await auth(relay.port, user!, guess!, '127.0.0.4')).toMatch(/^535 /);
    }
    expect(await auth(relay.port, 'cron', 'cron-secret-pw', '127.0.0.4')).toMatch(
      /^454 4\.7\.0 Too many failed authentications from your address/,
    );
    expect(await auth(relay.port, 'cron', 'cron-secret-pw', '127.0.0.5')).toMatch(/^235 /);
  });
});

describe("AUTH refusals tell nothing of the relay's users, in text or in time", () => {
  const logger = capturingLogger();

  /** A relay with its key and one user, `billing`; AUTH over STARTTLS from 127.0.0.1, which it does not trust. */
  async function usersRelay(authFailureDelay: number) {
    const started = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      tls: testTls(),
      trustedNetworks: [],
      users: [{ username: 'billing', passwordHash: await hashRelayPassword('billing-secret-pw') }],
      authFailureDelay,
      logger,
    });
    relays.push(started);
    return started;
  }
  async function authOverTls(port: number, user: string, password: string) {
    const { dialog } = await ehlo(port);
    expect((await dialog.starttls()).code).toBe(220);
    await dialog.command('EHLO client.example');
    return dialog.command(`AUTH PLAIN ${plain(user, password)}`);
  }

  it('every refused credential gets the same 535 text; the operator reads the reason in the log', async () => {
    const relay = await usersRelay(0);
    const tries: [string, string, RegExp][] = [
      ['billing', 'wrong-pw', /not the password of this relay user/],
      ['nosuchuser', 'emu_not_a_key', /401 invalid_api_key/],
      ['nosuchuser', 'k-groups-only', /403 missing_scope/],
      ['anyone', 'x'.repeat(2_000), /too long/],
    ];
    for (const [user, password, reason] of tries) {
      const reply = await authOverTls(relay.port, user, password);
      expect([user, reply.code, reply.text]).toEqual([user, 535, '5.7.8 Authentication credentials invalid']);
      const line = logger.lines.filter((l) => l.message === 'AUTH refused').at(-1)!;
      // The relay's own reason, or the service's refusal in the error.
      expect(line.meta.reason ?? line.meta.err).toMatch(reason);
    }
  });

  it('a refusal comes authFailureDelay after the AUTH, however long the check took: an unlisted name (the service asked) is not told apart from a listed one (a hash)', async () => {
    const relay = await usersRelay(1_000);
    // The service answers in 600 ms; a listed user's hash takes some tens of ms.
    emu.setFaults({ latencyMs: 600 });
    try {
      const order: string[] = [];
      const unlisted = authOverTls(relay.port, 'nosuchuser', 'emu_not_a_key').then((r) => (order.push('unlisted'), r));
      await eventually(() => (emu.faultStats()?.none ?? 0) >= 1, { what: 'the unlisted name asked of the service' });
      const listed = authOverTls(relay.port, 'billing', 'wrong-pw').then((r) => (order.push('listed'), r));
      const replies = await Promise.all([unlisted, listed]);
      expect(replies.map((r) => [r.code, r.text])).toEqual([
        [535, '5.7.8 Authentication credentials invalid'],
        [535, '5.7.8 Authentication credentials invalid'],
      ]);
      // Both were answered the same delay after their AUTH, so in the order they were sent (the listed
      // user's refusal came first when the pause was added to the time the check took).
      expect(order).toEqual(['unlisted', 'listed']);
    } finally {
      emu.setFaults(undefined);
    }
  });
});

describe('trustedNetworks: where AUTH is offered on plain text', () => {
  it('loopback by default; a sidecar address (127.0.0.6) when told, and then not the rest of loopback', async () => {
    const { features: byDefault } = await ehlo(relay.port, '127.0.0.1', '127.0.0.2');
    expect(byDefault).toContain('AUTH PLAIN LOGIN');
    const sidecar = await startEmlApiRelay({
      baseUrl: emu.url,
      port: 0,
      retry: false,
      trustedNetworks: ['127.0.0.6/32'],
    });
    relays.push(sidecar);
    const { dialog, features } = await ehlo(sidecar.port, '127.0.0.1', '127.0.0.6');
    expect(features).toContain('AUTH PLAIN LOGIN');
    expect((await dialog.command(`AUTH PLAIN ${plain('app', emu.apiKey)}`)).code).toBe(235);
    const other = await ehlo(sidecar.port, '127.0.0.1', '127.0.0.1');
    expect(other.features.some((f) => f.startsWith('AUTH'))).toBe(false);
    const refused = await other.dialog.command(`AUTH PLAIN ${plain('app', emu.apiKey)}`);
    expect(refused.code).toBe(538);
    expect(refused.text).toMatch(/trusted networks/);
  });

  it('names the option in ECONFIG for an entry that is not a network', async () => {
    const err = await rejectionOf(startEmlApiRelay({ baseUrl: emu.url, port: 0, trustedNetworks: ['sidecar'] }));
    expect(err.code).toBe('ECONFIG');
    expect(err.message).toContain('trustedNetworks');
  });
});

// A client that is not on loopback: a network namespace joined to this one by a veth pair, with
// addresses from 198.18.0.0/15 (set aside for network tests). Python runs inside the namespace;
// the hand-driven dialogs bind to the host side's address, which is not loopback either.
const netns = makeNetns();
afterAll(() => {
  if (typeof netns === 'object') netns.remove();
});
if (typeof netns === 'string') console.warn(`relay auth: non-loopback tests skipped: ${netns}`);

describe.skipIf(typeof netns === 'string')('clients on another address than loopback', () => {
  const ns = netns as Exclude<typeof netns, string>;
  let remote: EmlApiRelay;
  beforeAll(async () => {
    remote = await startEmlApiRelay({ baseUrl: emu.url, host: ns.hostAddress, port: 0, retry: false, tls: testTls() });
    relays.push(remote);
  });
  const spec = (id: string, extra: Record<string, unknown>) => ({
    host: ns.hostAddress,
    port: remote.port,
    from: 'app@example.test',
    to: ['ann@example.test'],
    subject: id,
    body: 'Hi',
    message_id: `<${id}@example.test>`,
    date: 'Mon, 23 Nov 2026 10:00:00 +0000',
    ...extra,
  });

  it('plain text: AUTH is not offered and is refused (538 5.7.11); MAIL says STARTTLS first', async () => {
    const python = await smtplibSend(spec('ns-plain', { password: emu.apiKey }), ns.prefix);
    expect(python.features).not.toContain('auth');
    expect(python.error?.type).toBe('SMTPNotSupportedError');
    const { dialog, features } = await ehlo(remote.port, ns.hostAddress, ns.hostAddress);
    expect(features).toContain('STARTTLS');
    expect(features.some((f) => f.startsWith('AUTH'))).toBe(false);
    const auth = await dialog.command(`AUTH PLAIN ${plain('u', emu.apiKey)}`);
    expect(auth.code).toBe(538);
    expect(auth.text).toMatch(/^5\.7\.11 /);
    const mail = await dialog.command('MAIL FROM:<app@example.test>');
    expect(mail.code).toBe(530);
    expect(mail.text).toMatch(/STARTTLS/);
  });

  it('after STARTTLS, AUTH is offered and the message is delivered', async () => {
    const python = await smtplibSend(spec('ns-tls', { password: emu.apiKey, starttls: TEST_CERT }), ns.prefix);
    expect(python.error).toBeUndefined();
    expect(python.features_tls).toContain('auth');
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<ns-tls@example.test>')).toBe(true);
  });

  it("with the relay's key: an allowed address sends without AUTH; another gets 530", async () => {
    const own = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      host: ns.hostAddress,
      port: 0,
      allowUnauthenticatedFrom: [`${ns.clientAddress}/32`],
    });
    relays.push(own);
    const python = await smtplibSend({ ...spec('ns-allowed', {}), port: own.port }, ns.prefix);
    expect(python.error).toBeUndefined();
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<ns-allowed@example.test>')).toBe(true);
    const { dialog } = await ehlo(own.port, ns.hostAddress, ns.hostAddress);
    expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(530);
  });

  it('a trusted network beyond loopback AUTHs on plain text, and the relay does not warn that nobody can', async () => {
    const logger = capturingLogger();
    const warnings = () => logger.messages('warn');
    const untrusted = await startEmlApiRelay({ baseUrl: emu.url, host: ns.hostAddress, port: 0, logger });
    relays.push(untrusted);
    expect(warnings().some((w) => w.includes('no client off this machine can send'))).toBe(true);
    logger.clear();
    const trusting = await startEmlApiRelay({
      baseUrl: emu.url,
      host: ns.hostAddress,
      port: 0,
      retry: false,
      logger,
      trustedNetworks: [`${ns.clientAddress}/32`],
    });
    relays.push(trusting);
    expect(warnings()).toEqual([]);
    const python = await smtplibSend(
      { ...spec('ns-trusted', { password: emu.apiKey }), port: trusting.port },
      ns.prefix,
    );
    expect(python.error).toBeUndefined();
    expect(python.features).toContain('auth');
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<ns-trusted@example.test>')).toBe(true);
  });
});
