/**
 * The replies an MTA relies on, read off a hand-driven SMTP session: 250
 * only once the service accepted the message (naming its id), 451 for what
 * a later try can get past, 5xx with the service's reason for what it cannot;
 * the extensions and limits.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { defaultMaxMessageSize } from '../../src/relay/relay-options.js';
import { eventually } from '../helpers/async.js';
import { closedPort } from '../helpers/fake-service.js';
import { SmtpDialog } from './relay-harness.js';

let emu: Emulator;
let relay: EmlApiRelay;
const logger = capturingLogger();
const opened: SmtpDialog[] = [];
const relays: EmlApiRelay[] = [];

beforeAll(async () => {
  emu = await startEmulator();
  relay = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    retry: false,
    maxMessageSize: 64 * 1024,
    maxRecipients: 3,
    logger,
  });
});
afterEach(() => {
  emu.setFaults(undefined);
  for (const dialog of opened.splice(0)) dialog.close();
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await relay?.close();
  await emu?.close();
});

async function session(port = relay.port) {
  const { dialog, greeting } = await SmtpDialog.open(port);
  opened.push(dialog);
  return { dialog, greeting };
}

/** A session up to DATA's final reply. */
async function send(message: string, rcpts: string[], port = relay.port, mailParameters = '') {
  const { dialog } = await session(port);
  await dialog.command('EHLO client.example');
  expect((await dialog.command(`MAIL FROM:<shop@example.test>${mailParameters}`)).code).toBe(250);
  for (const rcpt of rcpts) expect((await dialog.command(`RCPT TO:<${rcpt}>`)).code).toBe(250);
  return dialog.data(message);
}

const eml = (id: string, headers: string[] = ['To: ann@example.test'], body = 'Hello') =>
  ['From: shop@example.test', ...headers, `Subject: ${id}`, `Message-ID: <${id}@example.test>`, '', body, ''].join(
    '\r\n',
  );

describe('extensions', () => {
  it('EHLO offers PIPELINING, 8BITMIME, SMTPUTF8, ENHANCEDSTATUSCODES, SIZE and AUTH (from loopback), no STARTTLS without a certificate', async () => {
    const { dialog, greeting } = await session();
    expect(greeting.code).toBe(220);
    const ehlo = await dialog.command('EHLO client.example');
    expect(ehlo.code).toBe(250);
    expect(ehlo.lines.slice(1)).toEqual(
      expect.arrayContaining([
        'PIPELINING',
        '8BITMIME',
        'SMTPUTF8',
        'ENHANCEDSTATUSCODES',
        'SIZE 65536',
        'AUTH PLAIN LOGIN',
      ]),
    );
    expect(ehlo.lines).not.toContain('STARTTLS');
  });

  it('pipelined commands get their replies in order', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    dialog.write(
      'MAIL FROM:<shop@example.test>\r\nRCPT TO:<ann@example.test>\r\nRCPT TO:<bob@example.test>\r\nDATA\r\n',
    );
    const replies = [await dialog.reply(), await dialog.reply(), await dialog.reply(), await dialog.reply()];
    expect(replies.map((r) => r.code)).toEqual([250, 250, 250, 354]);
    dialog.write(`${eml('pipelined', ['To: ann@example.test, bob@example.test'])}.\r\n`);
    expect((await dialog.reply()).code).toBe(250);
  });

  it('a session written all at once (as `nc relay 2525 < session.txt` does): every message and QUIT get their reply', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    const transaction = (id: string) =>
      `MAIL FROM:<shop@example.test>\r\nRCPT TO:<ann@example.test>\r\nDATA\r\n${eml(id)}.\r\n`;
    dialog.write(`${transaction('blast-1')}${transaction('blast-2')}${transaction('blast-3')}QUIT\r\n`);
    const codes: number[] = [];
    for (let i = 0; i < 13; i++) codes.push((await dialog.reply()).code);
    expect(codes).toEqual([250, 250, 354, 250, 250, 250, 354, 250, 250, 250, 354, 250, 221]);
    for (const id of ['blast-1', 'blast-2', 'blast-3']) {
      expect(emu.mailbox('ann@example.test').some((c) => c.messageId === `<${id}@example.test>`)).toBe(true);
    }
  });
});

describe('MAIL and RCPT parameters', () => {
  it('a non-ASCII address without SMTPUTF8 is 553 5.6.7, at MAIL and at RCPT; with it, or in xn-- form, it is accepted', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    const mail = await dialog.command('MAIL FROM:<jörg@bücher.example>');
    expect(mail.code).toBe(553);
    expect(mail.text).toMatch(/^5\.6\.7 .*SMTPUTF8/);
    expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
    const rcpt = await dialog.command('RCPT TO:<zoë@example.test>');
    expect(rcpt.code).toBe(553);
    expect(rcpt.text).toMatch(/^5\.6\.7 .*SMTPUTF8/);
    // So does a Unicode domain (smtp-server hands it over as Unicode either way: the line sent tells them apart);
    // in its ASCII (xn--) form it needs no SMTPUTF8.
    expect((await dialog.command('RCPT TO:<ann@bücher.example>')).code).toBe(553);
    expect((await dialog.command('RCPT TO:<ann@xn--bcher-kva.example>')).code).toBe(250);
    expect((await dialog.command('RSET')).code).toBe(250);
    expect((await dialog.command('MAIL FROM:<jörg@bücher.example> SMTPUTF8')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<zoë@example.test>')).code).toBe(250);
  });

  it('a sender address holding a bidirectional control is 553 5.1.7 at MAIL, as such a recipient is at RCPT', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    // smtp-server itself refuses zero-width characters there (501).
    for (const sender of ['shop\u202e@example.test', 'sh\u2067op@example.test']) {
      const mail = await dialog.command(`MAIL FROM:<${sender}> SMTPUTF8`);
      expect(mail.code).toBe(553);
      expect(mail.text).toMatch(/^5\.1\.7 The sender address holds the bidirectional control U\+20/);
      expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(503);
    }
    expect((await dialog.command('MAIL FROM:<shop@example.test> SMTPUTF8')).code).toBe(250);
  });

  it('a parameter the relay did not advertise is 555 5.5.4; SIZE, BODY, SMTPUTF8 and AUTH are taken', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    for (const parameter of ['RET=HDRS', 'ENVID=abc', 'XYZZY', 'MT-PRIORITY=3']) {
      const reply = await dialog.command(`MAIL FROM:<shop@example.test> ${parameter}`);
      expect([parameter, reply.code]).toEqual([parameter, 555]);
      expect(reply.text).toMatch(/^5\.5\.4 /);
    }
    const ok = await dialog.command('MAIL FROM:<shop@example.test> SIZE=1000 BODY=8BITMIME SMTPUTF8 AUTH=<>');
    expect(ok.code).toBe(250);
    for (const parameter of ['NOTIFY=SUCCESS', 'ORCPT=rfc822;ann@example.test', 'XYZZY=1']) {
      const reply = await dialog.command(`RCPT TO:<ann@example.test> ${parameter}`);
      expect([parameter, reply.code]).toEqual([parameter, 555]);
      expect(reply.text).toMatch(/^5\.5\.4 /);
    }
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
  });
});

describe('250 means the service accepted it', () => {
  it('names the service id in the reply and in the log', async () => {
    const reply = await send(eml('accepted'), ['ann@example.test']);
    const message = emu.messages().find((m) => m.messageId === '<accepted@example.test>')!;
    expect(reply.code).toBe(250);
    expect(reply.text).toBe(`2.0.0 Ok: ${message.id}`);
    const line = logger
      .at('info', 'warn', 'error')
      .find((l) => l.message === 'Message accepted' && l.meta.id === message.id);
    expect(line?.meta).toMatchObject({ messageId: '<accepted@example.test>', recipients: 1, client: '127.0.0.1' });
  });

  it('a recipient only in RCPT TO (Bcc stripped by the client) is delivered, without seeing the Bcc', async () => {
    const reply = await send(eml('bcc-stripped'), ['ann@example.test', 'audit@example.test']);
    expect(reply.code).toBe(250);
    const [copy] = emu.mailbox('audit@example.test').filter((c) => c.messageId === '<bcc-stripped@example.test>');
    expect(copy).toBeDefined();
    expect(copy!.raw.toString()).not.toMatch(/^bcc:/im);
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<bcc-stripped@example.test>')).toBe(true);
  });

  it('a header section of LF lines ended by a CRLF blank line (PHP-style mixed breaks): the RCPT-only recipient is delivered, its address in no body', async () => {
    const mixed =
      'From: shop@example.test\nTo: ann@example.test\nSubject: mixed\nMessage-ID: <mixed@example.test>\n\r\nHello\r\n';
    expect((await send(mixed, ['ann@example.test', 'audit@example.test'])).code).toBe(250);
    const [copy] = emu.mailbox('audit@example.test').filter((c) => c.messageId === '<mixed@example.test>');
    expect(copy).toBeDefined();
    const [annCopy] = emu.mailbox('ann@example.test').filter((c) => c.messageId === '<mixed@example.test>');
    expect(annCopy!.raw.toString()).not.toContain('audit@example.test');
  });

  it('matches an IDN domain written the same way in RCPT TO and in the header (nothing added as Bcc)', async () => {
    const reply = await send(eml('idn', ['To: jörg@bücher.example']), ['jörg@bücher.example'], relay.port, ' SMTPUTF8');
    expect(reply.code).toBe(250);
    const message = emu.messages().find((m) => m.messageId === '<idn@example.test>')!;
    expect(message.raw.toString()).not.toMatch(/^bcc:/im);
    expect(message.recipients).toEqual(['jörg@bücher.example']);
  });

  it('refuses an IDN domain written as xn-- in RCPT TO and in Unicode in the header: a spelling the service may keep apart', async () => {
    const reply = await send(
      eml('idn-mixed', ['To: jörg@bücher.example']),
      ['jörg@xn--bcher-kva.example'],
      relay.port,
      ' SMTPUTF8',
    );
    expect(reply.code).toBe(550);
    expect(reply.text).toMatch(/^5\.7\.1 .*not in RCPT TO: jörg@bücher\.example/);
  });

  it('a client retrying the same message (same bytes) is delivered once', async () => {
    const first = await send(eml('retried'), ['ann@example.test']);
    const second = await send(eml('retried'), ['ann@example.test']);
    expect(second.text).toBe(first.text);
    expect(emu.mailbox('ann@example.test').filter((c) => c.messageId === '<retried@example.test>')).toHaveLength(1);
  });
});

describe('transient failures answer 451 (the client retries later)', () => {
  it('503 from the service: 451 4.3.0; the same message goes through once the service is back', async () => {
    emu.setFaults({ unavailable: 1 });
    const reply = await send(eml('unavailable'), ['ann@example.test']);
    expect(reply.code).toBe(451);
    expect(reply.text).toBe('4.3.0 The email service failed, try again later');
    emu.setFaults(undefined);
    expect((await send(eml('unavailable'), ['ann@example.test'])).code).toBe(250);
    expect(emu.mailbox('ann@example.test').filter((c) => c.messageId === '<unavailable@example.test>')).toHaveLength(1);
  });

  it('429 from the service: 451 4.4.5', async () => {
    emu.setFaults({ rateLimited: 1, retryAfterSeconds: 1 });
    const reply = await send(eml('limited'), ['ann@example.test']);
    expect(reply.code).toBe(451);
    expect(reply.text).toBe('4.4.5 The email service is rate limiting, try again later');
  });

  it("an unreachable service: 451 4.4.1 (the relay starts anyway, and says so); the service's URL is in the log, not the reply", async () => {
    const port = await closedPort();
    const down = await startEmlApiRelay({
      baseUrl: `http://127.0.0.1:${port}`,
      apiKey: 'k-unreachable',
      port: 0,
      retry: false,
      logger,
    });
    relays.push(down);
    expect(logger.lines.some((l) => l.level === 'warn' && /Could not check the relay's API key/.test(l.message))).toBe(
      true,
    );
    logger.clear();
    const reply = await send(eml('down'), ['ann@example.test'], down.port);
    expect(reply.code).toBe(451);
    expect(reply.text).toBe('4.4.1 The email service could not be reached, try again later');
    const logged = logger.at('warn').find((l) => l.message === 'Message refused')!;
    expect(logged.meta.err).toMatch(new RegExp(`^ECONNECTION: .*127\\.0\\.0\\.1:${port}`));
  });

  it('a base URL without the send endpoint (404, a wrong --url or proxy route): 451 4.3.5, the mail waits at the sender instead of bouncing', async () => {
    const misrouted = await startEmlApiRelay({
      baseUrl: `${emu.url}/not-the-api`,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      logger,
    });
    relays.push(misrouted);
    logger.clear();
    const reply = await send(eml('misrouted'), ['ann@example.test'], misrouted.port);
    expect(reply.code).toBe(451);
    expect(reply.text).toBe('4.3.5 The relay is not configured to send this, try again later');
    const logged = logger.at('error').find((l) => l.message === 'Message refused')!;
    expect(logged.meta.err).toMatch(/^EAPI: .*404/);
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<misrouted@example.test>')).toBe(false);
  });

  it('a base URL the service redirects (301 to https://, a moved host): 451 4.3.5 and an error in the log, not a quiet 4.3.0', async () => {
    const redirecting = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(301, { location: 'https://api.example.test/v1/send/eml' }).end());
    });
    await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve));
    try {
      const moved = await startEmlApiRelay({
        baseUrl: `http://127.0.0.1:${(redirecting.address() as AddressInfo).port}`,
        apiKey: emu.apiKey,
        port: 0,
        retry: false,
        logger,
      });
      relays.push(moved);
      logger.clear();
      const reply = await send(eml('moved'), ['ann@example.test'], moved.port);
      expect(reply.code).toBe(451);
      expect(reply.text).toBe('4.3.5 The relay is not configured to send this, try again later');
      expect(logger.at('error').find((l) => l.message === 'Message refused')!.meta.err).toMatch(/^EAPI: .*301/);
    } finally {
      redirecting.close();
    }
  });

  it('a base URL that answers 2xx to everything (a web server, not the service): the relay does not start, as the worker does not', async () => {
    const webServer = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>Welcome</html>'));
    });
    await new Promise<void>((resolve) => webServer.listen(0, '127.0.0.1', resolve));
    try {
      const start = startEmlApiRelay({
        baseUrl: `http://127.0.0.1:${(webServer.address() as AddressInfo).port}`,
        apiKey: emu.apiKey,
        port: 0,
        retry: false,
        logger,
      });
      start.then(
        (relay) => relays.push(relay),
        () => undefined,
      );
      const err = await start.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: 'EAPI', responseCode: 200 });
      expect((err as Error).message).toMatch(/is baseUrl the service's\?/);
    } finally {
      webServer.close();
    }
  });
});

describe('permanent failures answer 5xx with the reason', () => {
  it('invalid EML (no From header): 554 5.6.0 saying so, and the service is not asked', async () => {
    emu.setFaults({});
    const reply = await send('To: ann@example.test\r\nSubject: no sender\r\n\r\nHello\r\n', ['ann@example.test']);
    expect(reply.code).toBe(554);
    expect(reply.text).toMatch(/^5\.6\.0 .*no From header/);
    expect(emu.faultStats()!.none).toBe(0);
  });

  it.each([
    ['a From of a name alone', 'From: Shop', /^5\.6\.0 .*From header has no address/],
    ['a From of an empty group', 'From: shop:;', /^5\.6\.0 .*From header has no address/],
    ['a From with a bidi control', 'From: \u202eshop@example.test', /^5\.6\.0 .*From header holds/],
    [
      'a Sender with a control character',
      'From: shop@example.test\r\nSender: s\u0085@example.test',
      /^5\.6\.0 .*Sender header holds/,
    ],
  ])('%s: 554 5.6.0 before the service is asked, as under --outbox', async (_label, from, reply) => {
    emu.setFaults({});
    const answer = await send(`${from}\r\nTo: ann@example.test\r\nSubject: s\r\n\r\nHello\r\n`, ['ann@example.test']);
    expect([answer.code, answer.text]).toEqual([554, expect.stringMatching(reply)]);
    expect(emu.faultStats()!.none).toBe(0);
  });

  it('headers naming a recipient not in RCPT TO: 550 5.7.1 naming it, nothing delivered', async () => {
    const reply = await send(eml('mismatch', ['To: ann@example.test', 'Cc: carol@example.test']), ['ann@example.test']);
    expect(reply.code).toBe(550);
    expect(reply.text).toMatch(/^5\.7\.1 The headers name recipients .*not in RCPT TO: carol@example\.test$/);
    expect(emu.messages().some((m) => m.messageId === '<mismatch@example.test>')).toBe(false);
  });

  it("a message split into several transactions (Postfix's smtp_destination_recipient_limit): the 550 names the setting and --max-recipients, however long the addresses", async () => {
    const long = (n: number) => `${String(n).repeat(60)}@${'d'.repeat(60)}.example.test`;
    const later = Array.from({ length: 6 }, (_, i) => long(i + 1));
    const head = [`To: ann@example.test, ${later.join(', ')}`];
    const reply = await send(eml('split', head), ['ann@example.test']);
    expect(reply.code).toBe(550);
    expect(reply.text).toMatch(
      /^5\.7\.1 .*Postfix's smtp_destination_recipient_limit \(default 50\) and the relay's --max-recipients \(now \d+\)/,
    );
    expect(reply.text).toContain(`not in RCPT TO: ${later[0]!.slice(0, 40)}`);
  });

  it('SIZE= over the limit: 552 at MAIL FROM; a message over it without SIZE=: 552 5.3.4 after DATA', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    const declared = await dialog.command('MAIL FROM:<shop@example.test> SIZE=70000');
    expect(declared.code).toBe(552);
    expect(declared.text).toMatch(/^5\.3\.4 /);
    const reply = await send(eml('too-big', undefined, 'x'.repeat(70_000)), ['ann@example.test']);
    expect(reply.code).toBe(552);
    expect(reply.text).toMatch(/^5\.3\.4 /);
    expect(emu.messages().some((m) => m.messageId === '<too-big@example.test>')).toBe(false);
  });

  it('413 from the service (its limit below the relay one): 552 5.3.4', async () => {
    const small = await startEmulator({ maxRequestSize: 32 * 1024 });
    try {
      const r = await startEmlApiRelay({ baseUrl: small.url, apiKey: small.apiKey, port: 0, retry: false });
      relays.push(r);
      const reply = await send(eml('service-limit', undefined, 'y'.repeat(40_000)), ['ann@example.test'], r.port);
      expect(reply.code).toBe(552);
      expect(reply.text).toMatch(/^5\.3\.4 The message is too large for the email service: payload_too_large: /);
    } finally {
      await small.close();
    }
  });

  it('a message of exactly the default SIZE for the service limit, to maxRecipients RCPT-only recipients with the longest addresses: 250 (the Bcc field the relay adds still fits the upload)', async () => {
    const limit = 8192;
    const small = await startEmulator({ maxRequestSize: limit });
    try {
      const maxRecipients = 2;
      const r = await startEmlApiRelay({
        baseUrl: small.url,
        apiKey: small.apiKey,
        port: 0,
        retry: false,
        maxRecipients,
        maxMessageSize: defaultMaxMessageSize(limit, maxRecipients),
      });
      relays.push(r);
      const size = defaultMaxMessageSize(limit, maxRecipients)!;
      // 253 characters, the longest address smtp-server takes (a path of 256 octets with its brackets).
      const longest = (tag: string) =>
        `${tag.padEnd(64, 'x')}@${'d'.repeat(63)}.${'e'.repeat(63)}.${'f'.repeat(55)}.test`;
      const rcpts = [longest('ann'), longest('bob')];
      expect(rcpts.map((a) => a.length)).toEqual([253, 253]);
      // No To or Cc: every recipient is RCPT-only, so the relay writes them all into a Bcc field.
      let message = eml('at-size', [], '');
      let left = size - message.length;
      for (; left > 80; left -= 78) message += `${'z'.repeat(76)}\r\n`;
      message += `${'z'.repeat(left - 2)}\r\n`;
      expect(Buffer.byteLength(message)).toBe(size);
      const reply = await send(message, rcpts, r.port);
      expect(reply).toMatchObject({ code: 250 });
      const [delivered] = small.messages().filter((m) => m.messageId === '<at-size@example.test>');
      expect([...(delivered?.recipients ?? [])].sort()).toEqual(rcpts);
    } finally {
      await small.close();
    }
  });

  it('an address the service refuses is refused at RCPT TO (553 5.1.3)', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    await dialog.command('MAIL FROM:<shop@example.test>');
    const reply = await dialog.command('RCPT TO:<a[b]@example.test>');
    expect(reply.code).toBeGreaterThanOrEqual(500);
  });
});

describe('limits', () => {
  it('recipients past maxRecipients: 452 4.5.3', async () => {
    const { dialog } = await session();
    await dialog.command('EHLO client.example');
    await dialog.command('MAIL FROM:<shop@example.test>');
    for (const n of [1, 2, 3]) expect((await dialog.command(`RCPT TO:<r${n}@example.test>`)).code).toBe(250);
    const fourth = await dialog.command('RCPT TO:<r4@example.test>');
    expect(fourth.code).toBe(452);
    expect(fourth.text).toMatch(/^4\.5\.3 /);
  });

  it('connections past maxClients get 421; a silent client is disconnected after idleTimeout', async () => {
    const tight = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      maxClients: 1,
      // Its one client puts it under stress (from 80% of maxClients): the timeout in force is stressIdle.
      timeouts: { idle: 400, stressIdle: 400 },
    });
    relays.push(tight);
    const first = await session(tight.port);
    expect(first.greeting.code).toBe(220);
    const second = await session(tight.port);
    expect(second.greeting.code).toBe(421);
    const idle = await first.dialog.reply();
    expect(idle.code).toBe(421);
    await eventually(() => first.dialog.closed);
  });

  it('close() lets a message in flight get its 250, refuses new transactions, then closes idle connections', async () => {
    const closing = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false });
    emu.setFaults({ latencyMs: 400 });
    const idle = await session(closing.port);
    await idle.dialog.command('EHLO idle.example');
    const inFlight = send(eml('in-flight'), ['ann@example.test'], closing.port);
    // The upload has reached the service (which holds it 400 ms): the message is in flight.
    await eventually(() => (emu.faultStats()?.none ?? 0) > 0);
    const closed = closing.close();
    const late = await idle.dialog.command('MAIL FROM:<shop@example.test>');
    expect(late.code).toBe(421);
    expect((await inFlight).code).toBe(250);
    await closed;
    await eventually(() => idle.dialog.closed);
    expect(emu.mailbox('ann@example.test').some((c) => c.messageId === '<in-flight@example.test>')).toBe(true);
  });
});
