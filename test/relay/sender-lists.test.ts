/**
 * Each login sends only as itself: relay users, API keys given as AUTH passwords and the clients of
 * allowUnauthenticatedFrom may carry the addresses and domains they may send as (Postfix's
 * smtpd_sender_login_maps with reject_sender_login_mismatch). MAIL FROM, and every address of the
 * header From and Sender however it is written, must be among them: else 553 5.7.1 naming the
 * address, and nothing is sent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { keyFingerprint, parseUsersFile, hashRelayPassword } from '../../src/relay/relay-users.js';
import { identityAddresses } from '../../src/relay/relay-headers.js';
import { SenderList } from '../../src/relay/sender-lists.js';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { runCli } from '../../src/cli/run-cli.js';
import type { EmlApiRelayOptions } from '../../src/relay/relay-options.js';
import { thrownBy, eventually } from '../helpers/async.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { capturingLogger } from '../helpers/logger.js';
import { SmtpDialog } from './relay-harness.js';
import { nodeArgs } from '../helpers/compiled.js';

let emu: Emulator;
let relay: EmlApiRelay;
const logger = capturingLogger({ inspect: true });
const plain = (user: string, password: string) => Buffer.from(`\0${user}\0${password}`).toString('base64');

beforeAll(async () => {
  emu = await startEmulator({ apiKeys: [{ key: 'k-alerts-0123456789', scopes: ['sender'] }] });
  relay = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    retry: false,
    allowUnauthenticatedFrom: ['127.0.0.2/32'],
    users: [
      {
        username: 'billing',
        password: 'billing-secret-pw',
        senders: ['billing@shop.example', '*@billing.shop.example'],
      },
      { username: 'books', password: 'books-secret-pw', senders: ['*@bücher.example'] },
      { username: 'alerts', password: 'alerts-secret-pw', senders: ['*@*.shop.example'] },
      { username: 'cron', password: 'cron-secret-pw' },
    ],
    keySenders: { [`key:${keyFingerprint('k-alerts-0123456789')}`]: ['alerts@shop.example'] },
    allowedSenders: ['monitor@host.example', '<>'],
    http: { port: 0 },
    logger,
  });
});
afterAll(async () => {
  await relay?.close();
  await emu?.close();
});

/** A session from 127.0.0.1 (trusted: AUTH on plain text) as `user`, or without AUTH from 127.0.0.2 (allowed). */
async function session(user?: [string, string]) {
  const { dialog } = await SmtpDialog.open(relay.port, '127.0.0.1', user ? {} : { localAddress: '127.0.0.2' });
  await dialog.command('EHLO client.example');
  if (user) expect((await dialog.command(`AUTH PLAIN ${plain(...user)}`)).code).toBe(235);
  return dialog;
}

const BILLING: [string, string] = ['billing', 'billing-secret-pw'];
let sent = 0;

/** Sends one message; the reply to MAIL FROM when refused there, else to its final dot. */
async function send(
  user: [string, string] | undefined,
  mailFrom: string,
  head: string,
): Promise<{ reply: string; delivered: boolean }> {
  const dialog = await session(user);
  try {
    const mail = await dialog.command(`MAIL FROM:${mailFrom}`);
    if (mail.code !== 250) return { reply: `${mail.code} ${mail.text}`, delivered: false };
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
    const id = `<sender-${++sent}@example.test>`;
    const reply = await dialog.data(`${head}\r\nTo: ann@example.test\r\nMessage-ID: ${id}\r\n\r\nHi\r\n`);
    return { reply: `${reply.code} ${reply.text}`, delivered: emu.messages().some((m) => m.messageId === id) };
  } finally {
    dialog.close();
  }
}

describe('MAIL FROM', () => {
  it.each([
    ['<billing@shop.example>', '250'],
    ['<BILLING@Shop.Example>', '250'],
    ['<invoices@billing.shop.example>', '250'],
    ['<ceo@bank.example>', '553 5.7.1 <ceo@bank.example>: Sender address rejected: not owned by login billing'],
    ['<x@sub.billing.shop.example>', '553 5.7.1 <x@sub.billing.shop.example>'],
    ['<billing@shop.example.bank.example>', '553 5.7.1'],
    ['<ceo@bank.example> SIZE=100', '553 5.7.1 <ceo@bank.example>'],
    ['<@shop.example:ceo@bank.example>', '553 5.7.1 <ceo@bank.example>'],
    ['<>', '553 5.7.1 <>: Sender address rejected: login billing may not send with an empty MAIL FROM'],
    ['<"billing"@shop.example>', '250'],
    ['<"ceo"@bank.example>', '553 5.7.1 <"ceo"@bank.example>'],
    ['<"billing.x"@shop.example>', '553 5.7.1'],
    ['<billing@shop.example> BODY=8BITMIME SIZE=200', '250'],
    ['<ceo@bank.example> BODY=8BITMIME SIZE=200', '553 5.7.1 <ceo@bank.example>'],
    ['<@shop.example,@billing.shop.example:ceo@bank.example>', '553 5.7.1 <ceo@bank.example>'],
    [' <ceo@bank.example>', '553 5.7.1 <ceo@bank.example>'],
    ['<billing@[127.0.0.1]>', '553 5.7.1'],
    ['<billing@ѕhop.example> SMTPUTF8', '553 5.7.1 <billing@ѕhop.example>'],
    ['<ｂｉｌｌｉｎｇ@shop.example> SMTPUTF8', '553 5.7.1'],
    ['<billing@ｓｈｏｐ．ｅｘａｍｐｌｅ> SMTPUTF8', '250'],
  ])('%s as billing: %s', async (mailFrom, expected) => {
    const dialog = await session(BILLING);
    const reply = await dialog.command(`MAIL FROM:${mailFrom}`);
    dialog.close();
    expect(`${reply.code} ${reply.text}`.startsWith(expected)).toBe(true);
  });

  it('each transaction is checked: after RSET, another MAIL FROM is refused; RCPT and DATA then get 503', async () => {
    const dialog = await session(BILLING);
    expect((await dialog.command('MAIL FROM:<billing@shop.example>')).code).toBe(250);
    expect((await dialog.command('RSET')).code).toBe(250);
    expect((await dialog.command('MAIL FROM:<ceo@bank.example>')).code).toBe(553);
    expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(503);
    expect((await dialog.command('DATA')).code).toBe(503);
    dialog.close();
  });

  it('AUTH within a transaction is refused (503, RFC 4954): a MAIL FROM checked for one login never goes on as another', async () => {
    const dialog = await session();
    expect((await dialog.command('MAIL FROM:<monitor@host.example>')).code).toBe(250);
    const auth = await dialog.command(`AUTH PLAIN ${plain(...BILLING)}`);
    expect(`${auth.code} ${auth.text}`).toMatch(/^503 5\.5\.1 /);
    expect((await dialog.command('RSET')).code).toBe(250);
    expect((await dialog.command(`AUTH PLAIN ${plain(...BILLING)}`)).code).toBe(235);
    expect((await dialog.command('MAIL FROM:<monitor@host.example>')).code).toBe(553);
    dialog.close();
  });

  it('an authorization identity in AUTH PLAIN (another user, without a list) changes nothing: the login is the one checked', async () => {
    const { dialog } = await SmtpDialog.open(relay.port, '127.0.0.1');
    await dialog.command('EHLO client.example');
    const token = Buffer.from('cron\0billing\0billing-secret-pw').toString('base64');
    expect((await dialog.command(`AUTH PLAIN ${token}`)).code).toBe(235);
    expect((await dialog.command('MAIL FROM:<ceo@bank.example>')).code).toBe(553);
    dialog.close();
  });

  it('AUTH=<another> on MAIL FROM changes nothing: the envelope sender is checked, and the header From', async () => {
    const { reply, delivered } = await send(
      BILLING,
      '<billing@shop.example> AUTH=<ceo@bank.example>',
      'From: billing@shop.example',
    );
    expect(reply).toMatch(/^250 /);
    expect(delivered).toBe(true);
  });

  it('an IDN domain matches written in Unicode or as xn--, in MAIL FROM and in From', async () => {
    const books: [string, string] = ['books', 'books-secret-pw'];
    expect((await send(books, '<shop@xn--bcher-kva.example>', 'From: shop@bücher.example')).reply).toMatch(/^250 /);
    const utf8 = await send(books, '<shop@bücher.example> SMTPUTF8', 'From: shop@xn--bcher-kva.example');
    expect(utf8.reply).toMatch(/^250 /);
    expect((await send(books, '<shop@xn--bcher-kwa.example>', 'From: shop@bücher.example')).reply).toMatch(/^553 /);
    expect((await send(books, '<shop@XN--BCHER-KVA.EXAMPLE>', 'From: shop@BÜCHER.example')).reply).toMatch(/^250 /);
  });

  it('*@*.domain is every subdomain of the domain, at any depth, and not the domain itself', async () => {
    const alerts: [string, string] = ['alerts', 'alerts-secret-pw'];
    for (const address of ['x@eu.shop.example', 'x@a.b.shop.example', 'x@EU.Shop.Example'])
      expect((await send(alerts, `<${address}>`, `From: ${address}`)).reply).toMatch(/^250 /);
    for (const address of ['x@shop.example', 'x@evilshop.example', 'x@eu.shop.example.evil.example'])
      expect((await send(alerts, `<${address}>`, 'From: x@eu.shop.example')).reply).toMatch(/^553 5\.7\.1 /);
    expect((await send(alerts, '<x@eu.shop.example>', 'From: x@shop.example')).reply).toMatch(/^553 5\.7\.1 /);
  });
});

describe('the header From and Sender', () => {
  it.each([
    ['Billing <billing@shop.example>'],
    ['=?utf-8?Q?Facturation_=C3=A9t=C3=A9?= <billing@shop.example>'],
    ['BILLING@SHOP.EXAMPLE'],
    ['invoices@billing.shop.example (Invoices)'],
    ['Billing: billing@shop.example, invoices@billing.shop.example;'],
    ['"billing"@shop.example'],
    ['billing@(the shop)shop.example'],
    ['"Bank CEO" <billing@shop.example>'],
    ['billing@shop.example\r\nReply-To: ceo@bank.example'],
    ['billing@shop.example\r\nSender: Billing <invoices@billing.shop.example>'],
    ['billing@shop.example\r\nSender: undisclosed:;'],
  ])("From: %s is billing's: 250", async (from) => {
    const { reply, delivered } = await send(BILLING, '<billing@shop.example>', `From: ${from}`);
    expect(reply).toMatch(/^250 /);
    expect(delivered).toBe(true);
  });

  it.each([
    ['a plain other address', 'From: ceo@bank.example', 'ceo@bank.example'],
    ['a display name that is an address', 'From: "ceo@bank.example" <billing@shop.example>', 'ceo@bank.example'],
    ['an encoded word standing for the address', 'From: =?utf-8?B?Y2VvQGJhbmsuZXhhbXBsZQ==?=', 'ceo@bank.example'],
    ['an encoded display name', 'From: =?utf-8?Q?ceo=40bank.example?= <billing@shop.example>', 'ceo@bank.example'],
    [
      'full-width letters in the name',
      'From: ｃｅｏ＠ｂａｎｋ．ｅｘａｍｐｌｅ <billing@shop.example>',
      'ceo@bank.example',
    ],
    ['a second mailbox', 'From: billing@shop.example, ceo@bank.example', 'ceo@bank.example'],
    ['a group', 'From: Team: billing@shop.example, ceo@bank.example;', 'ceo@bank.example'],
    ['a comment', 'From: billing@shop.example (ceo@bank.example)', 'ceo@bank.example'],
    ['a quoted local part', 'From: "ceo"@bank.example', 'ceo@bank.example'],
    ['a look-alike domain (Cyrillic ѕ)', 'From: billing@ѕhop.example', 'billing@ѕhop.example'],
    ['a suffix', 'From: billing@shop.example.bank.example', 'billing@shop.example.bank.example'],
    ['a second From field', 'From: billing@shop.example\r\nFrom: ceo@bank.example', 'ceo@bank.example'],
    ['a Sender', 'From: billing@shop.example\r\nSender: Boss <ceo@bank.example>', 'ceo@bank.example'],
    ['an empty group, then an address', 'From: undisclosed:;, ceo@bank.example', 'ceo@bank.example'],
    ['the field name in capitals', 'FROM: ceo@bank.example', 'ceo@bank.example'],
    ['white space before the colon', 'Subject: x\r\nFrom : ceo@bank.example', 'ceo@bank.example'],
    ['a Sender named oddly', 'From: billing@shop.example\r\nsender\t: ceo@bank.example', 'ceo@bank.example'],
    ['a second From after a bare LF', 'From: billing@shop.example\nFrom: ceo@bank.example', 'ceo@bank.example'],
    ['a folded second mailbox', 'From: billing@shop.example,\r\n ceo@bank.example', 'ceo@bank.example'],
    [
      'an ISO-8859-1 encoded word',
      'From: =?iso-8859-1?Q?ceo=40bank.example?= <billing@shop.example>',
      'ceo@bank.example',
    ],
    [
      'an encoded word with a language',
      'From: =?utf-8*en?Q?ceo=40bank.example?= <billing@shop.example>',
      'ceo@bank.example',
    ],
    ['an encoded word of an address in brackets', 'From: =?utf-8?B?PGNlb0BiYW5rLmV4YW1wbGU+?=', 'ceo@bank.example'],
    ['a comment after the address', 'From: Billing <billing@shop.example> (via ceo@bank.example)', 'ceo@bank.example'],
    ['a comment in the local part', 'From: billing(ceo@bank.example)@shop.example', 'ceo@bank.example'],
    ['an address as the unquoted name', 'From: billing@shop.example <ceo@bank.example>', 'ceo@bank.example'],
    ['an address as the name of an address', 'From: ceo@bank.example <billing@shop.example>', 'ceo@bank.example'],
    ['a small commercial at in the name', 'From: ceo\ufe6bbank.example <billing@shop.example>', 'ceo@bank.example'],
    ['a trailing dot', 'From: billing@shop.example.', 'billing@shop.example.'],
    [
      'an invisible soft hyphen (shown as ?)',
      'From: billing@shop.example\r\nSender: ceo\u00ad@bank.example',
      '<ceo?@bank.example',
    ],
    ['an address literal', 'From: billing@[127.0.0.1]', 'billing@[127.0.0.1]'],
    ['full-width letters in the local part', 'From: ｂｉｌｌｉｎｇ@shop.example', 'ｂｉｌｌｉｎｇ@shop.example'],
    ["a route to the login's domain", 'From: <@shop.example:ceo@bank.example>', ''],
    // A URL parser's host ends at these, and decodes %: the domain is not the login's, though it starts so.
    ["'?' after the login's domain", 'From: billing@shop.example?.bank.example', 'billing@shop.example?.bank.example'],
    ["'#' after the login's domain", 'From: billing@shop.example#bank.example', 'billing@shop.example#bank.example'],
    ["'/' after the login's domain", 'From: Billing <billing@shop.example/bank>', 'billing@shop.example/bank'],
    ['a percent-encoded domain', 'From: billing@sh%6Fp.example', 'billing@sh%6Fp.example'],
  ])('%s: 553 5.7.1 naming it, nothing sent', async (_label, head, address) => {
    const { reply, delivered } = await send(BILLING, '<billing@shop.example>', head);
    expect(reply).toMatch(/^553 5\.7\.1 /);
    expect(reply).toContain(`${address}>: Sender address rejected`);
    expect(reply).toContain('not owned by login billing');
    expect(delivered).toBe(false);
  });
});

describe('a From without an address, with a list', () => {
  it.each([['undisclosed:;'], ['billing@shop.example\u200b']])(
    'From: %s is refused as without one (554 5.6.0), nothing sent',
    async (from) => {
      const { reply, delivered } = await send(BILLING, '<billing@shop.example>', `From: ${from}`);
      expect(reply).toMatch(/^554 5\.6\.0 /);
      expect(delivered).toBe(false);
    },
  );
});

describe('Nodemailer as the client', () => {
  const transport = () =>
    nodemailer.createTransport({
      host: '127.0.0.1',
      port: relay.port,
      ignoreTLS: true,
      auth: { user: 'billing', pass: 'billing-secret-pw' },
    });

  it("sends as the login's address; another is refused at MAIL FROM (553), and in the header at DATA", async () => {
    const smtp = transport();
    try {
      const ok = await smtp.sendMail({ from: 'Billing <billing@shop.example>', to: 'ann@example.test', text: 'x' });
      expect(ok.response).toMatch(/^250 2\.0\.0 Ok: /);
      const before = emu.messages().length;
      const envelope = await smtp
        .sendMail({ from: 'ceo@bank.example', to: 'ann@example.test', text: 'x' })
        .catch((e: unknown) => e);
      expect(envelope).toMatchObject({ code: 'EENVELOPE', responseCode: 553, command: 'MAIL FROM' });
      expect((envelope as Error).message).toContain('<ceo@bank.example>: Sender address rejected');
      const header = await smtp
        .sendMail({
          from: 'ceo@bank.example',
          envelope: { from: 'billing@shop.example', to: 'ann@example.test' },
          to: 'ann@example.test',
          text: 'x',
        })
        .catch((e: unknown) => e);
      expect(header).toMatchObject({ code: 'EMESSAGE', responseCode: 553 });
      expect((header as Error).message).toContain('the From header names an address not owned by login billing');
      expect(emu.messages().length).toBe(before);
    } finally {
      smtp.close();
    }
  });
});

describe('logins without a list, API keys and the allowed networks', () => {
  it('a user without a list sends as anyone (as before), and the relay warned at start, naming it', async () => {
    const cron: [string, string] = ['cron', 'cron-secret-pw'];
    expect((await send(cron, '<ceo@bank.example>', 'From: ceo@bank.example')).reply).toMatch(/^250 /);
    const warnings = logger.lines.filter((l) => l.message.startsWith('Without a sender list'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.message).toMatch(/^Without a sender list, 1 relay user\(s\) may send as any address/);
    expect(warnings[0]!.meta).toEqual({ users: 'cron', count: 1 });
  });

  it('an API key given as the password carries the list of its login (key:<fingerprint>)', async () => {
    const key: [string, string] = ['apikey', 'k-alerts-0123456789'];
    expect((await send(key, '<alerts@shop.example>', 'From: alerts@shop.example')).reply).toMatch(/^250 /);
    expect((await send(key, '<billing@shop.example>', 'From: alerts@shop.example')).reply).toMatch(
      /^553 5\.7\.1 <billing@shop\.example>: .*not owned by login key:[0-9a-f]{24}/,
    );
  });

  it('clients on allowUnauthenticatedFrom have allowedSenders, the null sender among them', async () => {
    expect((await send(undefined, '<>', 'From: monitor@host.example')).reply).toMatch(/^250 /);
    expect((await send(undefined, '<monitor@host.example>', 'From: root@host.example')).reply).toMatch(
      /^553 5\.7\.1 <root@host\.example>: .*not owned by the senders allowed without AUTH/,
    );
  });

  it('refusals are counted by reason and login, and logged naming the login, never a password', async () => {
    const text = await (await fetch(`http://127.0.0.1:${relay.http!.port}/metrics`)).text();
    expect(text).toMatch(/eml_api_relay_sender_refusals_total\{reason="mail_from",login="billing"\} [1-9]/);
    expect(text).toMatch(/eml_api_relay_sender_refusals_total\{reason="from",login="billing"\} [1-9]/);
    expect(text).toMatch(/eml_api_relay_sender_refusals_total\{reason="sender",login="billing"\} [1-9]/);
    expect(text).toMatch(/eml_api_relay_sender_refusals_total\{reason="null_sender",login="billing"\} [1-9]/);
    const refused = logger.lines.filter((l) => l.message.startsWith('Sender refused'));
    expect(refused.some((l) => l.meta.login === 'billing' && l.meta.sender === 'ceo@bank.example')).toBe(true);
    const all = logger.inspected().join('\n');
    for (const secret of ['billing-secret-pw', 'books-secret-pw', 'k-alerts-0123456789'])
      expect(all).not.toContain(secret);
  });
});

describe('sender lists as configured', () => {
  it('reads users files with senders (name:hash:senders), and refuses what is no sender', async () => {
    const hash = await hashRelayPassword('pw');
    expect(
      parseUsersFile(`billing:${hash}:billing@shop.example, *@billing.shop.example, <>\ncron:${hash}\n`, 'users'),
    ).toEqual([
      { username: 'billing', passwordHash: hash, senders: ['billing@shop.example', '*@billing.shop.example', '<>'] },
      { username: 'cron', passwordHash: hash },
    ]);
    expect(thrownBy(() => parseUsersFile(`billing:${hash}:shop.example\n`, 'users')).message).toMatch(
      /users line 1, the senders.*"shop\.example": expected an address/,
    );
    expect(thrownBy(() => parseUsersFile(`billing:${hash}:\n`, 'users')).message).toMatch(/no senders/);
    // A Dovecot passwd-file's further fields (uid:gid...) are no senders: an error naming the line, not ignored.
    expect(thrownBy(() => parseUsersFile(`billing:${hash}:1000:1000::/home/billing\n`, 'users')).message).toMatch(
      /users line 1, the senders: "1000:1000::\/home\/billing": expected an address/,
    );
    expect(
      parseUsersFile(`billing:${hash}:"billing, shop"@shop.example,*@shop.example\n`, 'users')[0]!.senders,
    ).toEqual(['"billing, shop"@shop.example', '*@shop.example']);
  });

  it.each([
    [['*@[127.0.0.1]'], /"\*@\[127\.0\.0\.1\]": expected an address/],
    [['*@shop..example'], /"\*@shop\.\.example": expected an address/],
    [['*@*.'], /"\*@\*\.": expected an address/],
    [['shop.example'], /"shop\.example": expected an address/],
    [['*@shop.example/x'], /"\*@shop\.example\/x": expected an address/],
    [['billing@sh%6Fp.example'], /"billing@sh%6Fp\.example": expected an address/],
    [[], /no senders: give one at least/],
    ['billing@shop.example', /expected an array of strings/],
  ])('%j is no sender list (ECONFIG)', (entries, message) => {
    expect(thrownBy(() => new SenderList(entries, 'allowedSenders')).message).toMatch(message);
  });

  it('a domain is compared as written, not as a URL parser reads a host (0x7f.1 is not 127.0.0.1), and has no empty label', () => {
    const list = new SenderList(['*@127.0.0.1', 'billing@shop.example'], 'allowedSenders');
    expect(list.owns('x@127.0.0.1')).toBe(true);
    const parents = new SenderList(['*@*.shop.example'], 'allowedSenders');
    expect(['x@eu.shop.example', 'x@.shop.example', 'x@eu..shop.example'].map((a) => parents.owns(a))).toEqual([
      true,
      false,
      false,
    ]);
    expect(['x@0x7f.1', 'x@2130706433', 'x@127.1', 'billing@shop.example\\x'].map((a) => list.owns(a))).toEqual([
      false,
      false,
      false,
      false,
    ]);
  });

  it("an address longer than an address may be (998 characters) is nobody's: no domain is built from its 500 labels", () => {
    const list = new SenderList(['*@*.shop.example'], 'allowedSenders');
    expect(list.owns(`a@${'x.'.repeat(400)}shop.example`)).toBe(true);
    expect(list.owns(`a@${'x.'.repeat(8000)}shop.example`)).toBe(false);
  });

  it('an entry that is none of the three forms is ECONFIG naming it; keySenders keys are key logins', async () => {
    expect(thrownBy(() => new SenderList(['*.shop.example'], 'users[0].senders')).message).toMatch(
      /users\[0\]\.senders: "\*\.shop\.example": expected an address/,
    );
    const err = await startEmlApiRelay({ baseUrl: emu.url, port: 0, keySenders: { billing: ['a@x.test'] } }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EmlApiError);
    expect((err as EmlApiError).message).toMatch(/keySenders: "billing" is not a key's login/);
  });
});

describe('the warning at start', () => {
  async function warningsOf(options: Partial<EmlApiRelayOptions>): Promise<string[]> {
    const log = capturingLogger();
    const started = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, logger: log, ...options });
    await started.close();
    return log.lines.filter((l) => l.message.startsWith('Without a sender list')).map((l) => l.message);
  }
  const listed = [{ username: 'billing', password: 'pw', senders: ['billing@shop.example'] }];

  it('names the clients on allowUnauthenticatedFrom when users have lists and they have none', async () => {
    expect(await warningsOf({ users: listed })).toEqual([
      expect.stringMatching(/^Without a sender list, the clients that send without AUTH \(allowUnauthenticatedFrom\)/),
    ]);
  });

  it('is not given without users, or when every login that sends with the relay key has a list', async () => {
    expect(await warningsOf({})).toEqual([]);
    expect(await warningsOf({ users: listed, allowedSenders: ['cron@host.example'] })).toEqual([]);
    expect(await warningsOf({ users: listed, allowUnauthenticatedFrom: [] })).toEqual([]);
  });
});

describe('eml-api relay', () => {
  function cli(args: string[], env: Record<string, string> = {}) {
    const out: string[] = [];
    const err: string[] = [];
    const stop = new AbortController();
    const exit = runCli(['relay', '--url', emu.url, '--port', '0', ...args], {
      stdout: { write: (s: string) => out.push(s) },
      stderr: { write: (s: string) => err.push(s) },
      env,
      signal: stop.signal,
    });
    return { stop: () => stop.abort(), exit, text: () => out.join(''), errors: () => err.join('') };
  }
  const smtp = (port: number, auth?: { user: string; pass: string }) =>
    nodemailer.createTransport({ host: '127.0.0.1', port, ignoreTLS: true, ...(auth ? { auth } : {}) });
  async function reply(port: number, from: string, auth?: { user: string; pass: string }): Promise<string> {
    const transport = smtp(port, auth);
    try {
      return (await transport.sendMail({ from, to: 'ann@example.test', text: 'x' })).response;
    } catch (err) {
      return (err as { response: string }).response;
    } finally {
      transport.close();
    }
  }
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'relay-senders-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('--users name:hash:senders, --key-senders (logins from --key-login) and --allow-senders; one warning on stderr', async () => {
    const printed = await runCliCapturing(['relay', '--key-login'], { env: {}, stdin: 'k-alerts-0123456789\n' });
    expect(printed.code).toBe(0);
    const login = printed.stdout.trim();
    expect(login).toBe(`key:${keyFingerprint('k-alerts-0123456789')}`);
    const hash = await hashRelayPassword('billing pw');
    await writeFile(join(dir, 'users'), `billing:${hash}:billing@shop.example, *@billing.shop.example\ncron:${hash}\n`);
    await writeFile(join(dir, 'keys'), `# API keys\n${login}: alerts@shop.example\n`);
    const run = cli(
      [
        '--users',
        join(dir, 'users'),
        '--key-senders',
        join(dir, 'keys'),
        '--allow-senders',
        'monitor@host.example',
        '--allow-senders',
        '<>',
      ],
      { EML_API_KEY: emu.apiKey },
    );
    await eventually(() => /listening on/.test(run.text()));
    const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(run.text())![1]);
    const warnings = run.errors().match(/WARN Without a sender list.*/g);
    expect(warnings).toEqual([expect.stringMatching(/1 relay user\(s\) may send as any address.*users=cron count=1/)]);
    const billing = { user: 'billing', pass: 'billing pw' };
    expect(await reply(port, 'invoices@billing.shop.example', billing)).toMatch(/^250 /);
    expect(await reply(port, 'ceo@bank.example', billing)).toMatch(/^553 5\.7\.1 <ceo@bank\.example>/);
    expect(await reply(port, 'ceo@bank.example', { user: 'cron', pass: 'billing pw' })).toMatch(/^250 /);
    const key = { user: 'alerts', pass: 'k-alerts-0123456789' };
    expect(await reply(port, 'alerts@shop.example', key)).toMatch(/^250 /);
    expect(await reply(port, 'billing@shop.example', key)).toMatch(new RegExp(`^553 5\\.7\\.1 .*login ${login}`));
    expect(await reply(port, 'monitor@host.example')).toMatch(/^250 /);
    expect(await reply(port, 'root@host.example')).toMatch(/^553 5\.7\.1 <root@host\.example>/);
    run.stop();
    expect(await run.exit).toBe(0);
    expect(run.errors()).toMatch(
      /WARN Sender refused: not the login's .*login=billing .*reason=mail_from sender=ceo@bank\.example/,
    );
    expect(run.text() + run.errors()).not.toMatch(/billing pw|k-alerts-0123456789/);
  });

  it('EML_API_RELAY_ALLOW_SENDERS stands for --allow-senders, comma-separated', async () => {
    const run = cli([], { EML_API_KEY: emu.apiKey, EML_API_RELAY_ALLOW_SENDERS: 'cron@host.example, *@ops.example' });
    await eventually(() => /listening on/.test(run.text()));
    const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(run.text())![1]);
    expect(await reply(port, 'a@ops.example')).toMatch(/^250 /);
    expect(await reply(port, 'root@host.example')).toMatch(/^553 5\.7\.1 /);
    run.stop();
    expect(await run.exit).toBe(0);
  });

  it.each([
    [['--allow-senders', 'shop.example'], /allowedSenders: "shop\.example": expected an address/],
    [['--key-senders', '/nonexistent/keys'], /--key-senders: cannot read \/nonexistent\/keys/],
    [['--key-senders', 'KEYS:billing: a@shop.example'], /--key-senders .* line 1: expected key:<24 hex digits/],
    [['--key-senders', 'KEYS:key:0123456789abcdef01234567:'], /line 1: no senders after key:0123456789abcdef01234567:/],
    [
      ['--key-senders', 'KEYS:key:0123456789abcdef01234567: *.shop.example'],
      /line 1, the senders: "\*\.shop\.example"/,
    ],
  ])('%j is a usage error (exit 2)', async (args, message) => {
    const flags = await Promise.all(
      args.map(async (arg) => {
        if (!arg.startsWith('KEYS:')) return arg;
        const file = join(dir, `keys-${Math.random().toString(36).slice(2)}`);
        await writeFile(file, `${arg.slice(5)}\n`);
        return file;
      }),
    );
    const run = cli(flags, { EML_API_KEY: emu.apiKey });
    expect(await run.exit).toBe(2);
    expect(run.errors()).toMatch(message);
  });

  it('--key-login reads the key from standard input, and wants one', async () => {
    const empty = await runCliCapturing(['relay', '--key-login'], { env: {} });
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/--key-login reads the API key from standard input, and got none/);
  });
});

describe('without mailparser', () => {
  const utf32 = (text: string) => Buffer.from([...text].flatMap((c) => [0, 0, 0, c.charCodeAt(0)])).toString('base64');
  const FOREIGN = [
    'From: "ceo\\@bank.example" <billing@shop.example>',
    'From: "ceo@\\bank.example" <billing@shop.example>',
    'From: =?utf-8?Q?ceo?= =?utf-8?Q?=40bank.example?= <billing@shop.example>',
    'From: =?utf-8?Q?ceo?=\r\n =?utf-8?Q?=40bank.example?= <billing@shop.example>',
    'From: ceo(x)@bank.example <billing@shop.example>',
    'From: =?utf-8?B?Y2VvQGJhbmsuZXhhbXBsZQ==?= <billing@shop.example>',
    'From: Team: billing@shop.example, ceo@bank.example;',
    'From: billing@shop.example\r\nSender: ceo@bank.example',
    // Charsets TextDecoder lacks, which mailparser's iconv-lite decodes.
    'From: =?utf-7?Q?ceo+AEA-bank.example?= <billing@shop.example>',
    `From: =?UTF-32BE?B?${utf32('ceo@bank.example')}?= <billing@shop.example>`,
  ];
  const OWN = [
    'From: Billing <billing@shop.example>',
    'From: "billing"@shop.example',
    'From: "Bank CEO" <billing@shop.example>',
  ];

  const b64 = (bytes: Buffer | string) => Buffer.from(bytes).toString('base64');
  const WIDE = 'ｃｅｏ＠ｂａｎｋ．ｅｘａｍｐｌｅ';
  // Charset labels mailparser (libmime, iconv-lite) decodes one way and TextDecoder another way, or not at all.
  const UNREAD = [
    `From: =?unicode11utf7?B?${b64('+ADw-ceo+AEA-bank.example+AD4-')}?=, billing@shop.example`,
    `From: =?utf_7?B?${b64('+ADw-ceo+AEA-bank.example+AD4-')}?= <billing@shop.example>`,
    `From: =?utf7imap?B?${b64('&ADw-ceo&AEA-bank.example&AD4-')}?=, billing@shop.example`,
    `From: =?shiftjis?B?${b64(Buffer.from([0x82, 0x83, 0x81, 0x97, 0x82, 0x82]))}?= <billing@shop.example>`,
    `From: =?unicode?B?${b64(WIDE)}?= <billing@shop.example>`,
    `From: =?us-ascii?B?${b64(WIDE)}?= <billing@shop.example>`,
    `From: =?utf-8x?B?${b64(WIDE)}?= <billing@shop.example>`,
    `From: =?iso-2022-kr?B?${b64(WIDE)}?= <billing@shop.example>`,
    `From: =?utf16be?B?${b64(Buffer.from(WIDE, 'utf16le').swap16())}?= <billing@shop.example>`,
    `From: billing@shop.example\r\nSender: =?cp936?B?${b64(Buffer.from('a3c0', 'hex'))}?= <billing@shop.example>`,
  ];
  const READ = [
    'From: =?utf-8?Q?Facturation_=C3=A9t=C3=A9?= <billing@shop.example>',
    'From: =?ISO-8859-1?Q?Caf=E9?= <billing@shop.example>',
    `From: =?iso-2022-jp?B?${b64(Buffer.from('1b2442246424731b2842', 'hex'))}?= <billing@shop.example>`,
  ];

  it('an encoded word in a charset the relay cannot read as mailparser does is refused (553), never passed', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      nodeArgs([
        '--import',
        fileURLToPath(new URL('./fixtures/hide-mailparser.mjs', import.meta.url)),
        '--import',
        'tsx',
        fileURLToPath(new URL('./fixtures/senders-without-mailparser.ts', import.meta.url)),
        JSON.stringify([...UNREAD, ...READ]),
      ]),
      { timeout: 60_000 },
    );
    const replies = JSON.parse(stdout.trim().split('\n').pop()!) as string[];
    expect(replies).toEqual([
      ...UNREAD.map(() => expect.stringMatching(/^553 5\.7\.1 /)),
      ...READ.map(() => expect.stringMatching(/^451 4\.4\.1 /)),
    ]);
  }, 60_000);

  it('a display name a mail program shows as another address is still found: quoted pairs, adjacent encoded words, comments, UTF-7 and UTF-32', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      nodeArgs([
        '--import',
        fileURLToPath(new URL('./fixtures/hide-mailparser.mjs', import.meta.url)),
        '--import',
        'tsx',
        fileURLToPath(new URL('./fixtures/senders-without-mailparser.ts', import.meta.url)),
        JSON.stringify([...FOREIGN, ...OWN]),
      ]),
      { timeout: 60_000 },
    );
    const replies = JSON.parse(stdout.trim().split('\n').pop()!) as string[];
    expect(replies).toEqual([
      ...FOREIGN.map(() => expect.stringMatching(/^553 5\.7\.1 <ceo@bank\.example>: Sender address rejected/)),
      // Past the check, the direct relay finds no service there.
      ...OWN.map(() => expect.stringMatching(/^451 4\.4\.1 /)),
    ]);
  }, 60_000);
});

describe('the cost of reading a From', () => {
  // The bound is the test's timeout, a thousand times what a linear reading takes: a backtracking scan for
  // address-shaped text took minutes over such a value (each position of the run tried to its end).
  it.each([
    ['a 200 KB name', `${'a'.repeat(200_000)} <billing@shop.example>`],
    [
      'adjacent encoded words',
      `${'=?utf-8?Q?aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa?= '.repeat(5000)}<billing@shop.example>`,
    ],
  ])('%s is read in linear time', { timeout: 20_000 }, async (_label, value) => {
    expect(await identityAddresses(value)).toEqual(['billing@shop.example']);
  });
});
