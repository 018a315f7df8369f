/**
 * The relay's decisions, as pure functions: address matching, the envelope
 * plan (Bcc added, header-only recipients refused), the header rewriter, who
 * may AUTH and send (the same decision the non-loopback socket tests exercise),
 * client address lists, and the reply for each failure.
 */
import { Readable } from 'node:stream';
import { inspect } from 'node:util';
import { createRequire } from 'node:module';
import fc from 'fast-check';
import { buffer } from 'node:stream/consumers';
import { describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { parseAddressList, parseHeaderFields } from '../../src/protocol/message-format.js';
import {
  asMailparserReads,
  fromRefusal,
  addressKey,
  readAddressList,
  readRelayHeaders,
  disagreeingReader,
  serviceAddressReaders,
} from '../../src/relay/relay-headers.js';
import {
  AuthFailureBudget,
  failureFingerprint,
  type AuthAttempt,
  hashRelayPassword,
  parseUsersFile,
  RelayUsers,
} from '../../src/relay/relay-users.js';
import { ClientAddressList, clientKey, isLoopbackAddress } from '../../src/relay/client-address-list.js';
import { planEnvelope } from '../../src/relay/envelope-plan.js';
import { IDEMPOTENCY_WINDOW_MS, identitySecret, MessageIdentities } from '../../src/relay/message-identities.js';
import { MessageRewriter } from '../../src/relay/message-rewriter.js';
import { defaultMaxMessageSize, maxUploadableSize, resolveRelayOptions } from '../../src/relay/relay-options.js';
import { authOffered, mailRefusal, type RelayPolicy } from '../../src/relay/relay-sessions.js';
import {
  authFailureReply,
  outboxFailureReply,
  relayFailureReply,
  serviceFailureReply,
} from '../../src/relay/smtp-replies.js';
import { thrownBy } from '../helpers/async.js';
import { UploadShares } from '../../src/relay/message-destination.js';
import { parseEml } from '../../src/emulator/operations/send-operations.js';
import { EmlApiClient } from '../../src/client/eml-api-client.js';

describe('addressKey', () => {
  it.each([
    ['Ann@Example.TEST', 'ann@example.test'],
    ['jörg@xn--BCHER-kva.example', 'jörg@xn--bcher-kva.example'],
    ['a@[192.0.2.1]', 'a@[192.0.2.1]'],
  ])('%s compares as %s (ASCII case aside)', (address, key) => {
    expect(addressKey(address)).toBe(addressKey(key));
  });
  it.each([
    ['ann@example.test', 'ann@example.net'],
    ['ann@example.test', 'anne@example.test'],
    // What the service may keep apart is kept apart: no quotes dropped, no IDNA, no Unicode folding.
    ['"ann"@example.test', 'ann@example.test'],
    ['jörg@bücher.example', 'jörg@xn--bcher-kva.example'],
    ['victim@𝐞xample.test', 'victim@example.test'],
    ['victim@ｅxample.test', 'victim@example.test'],
    ['zoe\u0308@example.test', 'zoë@example.test'],
    ['JÖRG@example.test', 'jörg@example.test'],
    ['\u212Aim@example.test', 'kim@example.test'],
  ])('keeps %s and %s apart', (a, b) => {
    expect(addressKey(a)).not.toBe(addressKey(b));
  });
});

describe('planEnvelope', () => {
  const head = (lines: string[], eol = '\r\n') => Buffer.from([...lines, '', ''].join(eol));

  it('adds RCPT-only recipients as one Bcc field at the end of the header section, in its line-break style', () => {
    for (const eol of ['\r\n', '\n']) {
      const plan = planEnvelope(head(['From: a@x.test', 'To: Ann <ann@x.test>'], eol), ['ANN@x.test', 'audit@x.test']);
      expect(plan.addedBcc).toEqual(['audit@x.test']);
      expect(plan.head.toString()).toBe(
        ['From: a@x.test', 'To: Ann <ann@x.test>', 'Bcc: audit@x.test', '', ''].join(eol),
      );
    }
  });

  it('leaves the header section untouched when the envelope matches it', () => {
    const original = head(['From: a@x.test', 'To: ann@x.test', 'Cc: "Doe, Bob" <bob@x.test>', 'Bcc: c@x.test']);
    const plan = planEnvelope(original, ['c@x.test', 'bob@x.test', 'ann@x.test']);
    expect(plan.head).toBe(original);
    expect(plan.addedBcc).toEqual([]);
  });

  it('merges an existing Bcc field, and folds a long one into lines of at most 78 characters', () => {
    const rcpts = Array.from({ length: 60 }, (_, i) => `member${i}@lists.example.test`);
    const plan = planEnvelope(head(['From: a@x.test', 'Bcc: member0@lists.example.test']), rcpts);
    const text = plan.head.toString();
    expect(text.match(/^Bcc:/gim)).toHaveLength(1);
    for (const line of text.split('\r\n')) expect(line.length).toBeLessThanOrEqual(78);
    const bcc = parseHeaderFields(plan.head).find((f) => f.name === 'Bcc')!;
    expect(parseAddressList(bcc.value)).toEqual(rcpts);
  });

  it('finds a header section of LF lines ended by a CRLF blank line, and adds the field before that line', () => {
    const plan = planEnvelope(Buffer.from('From: a@x.test\nTo: ann@x.test\n\r\n'), ['ann@x.test', 'b@x.test']);
    expect(plan.head.toString()).toBe('From: a@x.test\nTo: ann@x.test\nBcc: b@x.test\n\r\n');
    const crlfThenLf = planEnvelope(Buffer.from('From: a@x.test\r\nTo: ann@x.test\r\n\n'), ['ann@x.test', 'b@x.test']);
    expect(crlfThenLf.head.toString()).toBe('From: a@x.test\r\nTo: ann@x.test\r\nBcc: b@x.test\r\n\n');
  });

  it('adds the field to a message that is all header', () => {
    const plan = planEnvelope(Buffer.from('From: a@x.test\r\nSubject: no body'), ['b@x.test']);
    expect(plan.head.toString()).toBe('From: a@x.test\r\nSubject: no body\r\nBcc: b@x.test\r\n');
  });

  it('takes the empty Message-ID fields out of a message without one (the relay adds its own), Bcc added or not', () => {
    const empty = head(['From: a@x.test', 'Message-ID:', 'To: b@x.test', 'Message-ID:  ']);
    expect(planEnvelope(empty, ['b@x.test']).head.toString()).toBe(
      ['From: a@x.test', 'To: b@x.test', '', ''].join('\r\n'),
    );
    expect(planEnvelope(empty, ['b@x.test', 'c@x.test']).head.toString()).toBe(
      ['From: a@x.test', 'To: b@x.test', 'Bcc: c@x.test', '', ''].join('\r\n'),
    );
    const named = head(['From: a@x.test', 'Message-ID:', 'To: b@x.test', 'Message-ID: <m@x.test>']);
    expect(planEnvelope(named, ['b@x.test']).head).toEqual(named);
  });

  it('refuses header recipients that are not in RCPT TO with EENVELOPE, naming five and counting the rest', () => {
    const others = Array.from({ length: 8 }, (_, i) => `p${i}@x.test`);
    const err = thrownBy(() => planEnvelope(head(['From: a@x.test', `To: ${others.join(', ')}`]), ['p0@x.test']));
    expect(err.code).toBe('EENVELOPE');
    expect(err.message).toContain('not in RCPT TO: p1@x.test, p2@x.test, p3@x.test, p4@x.test, p5@x.test and 2 more');
  });
});

describe('the strict header reading (fail closed)', () => {
  it.each([
    ['ann@x.test', ['ann@x.test']],
    ['"Doe, Ann" <ann@x.test>, Bob<bob@x.test>', ['ann@x.test', 'bob@x.test']],
    ['=?utf-8?B?QW5u?= <ann@x.test> (Sales)', ['ann@x.test']],
    ['Team: a@x.test, "b,c"@x.test;, d@x.test', ['a@x.test', '"b,c"@x.test', 'd@x.test']],
    ['undisclosed-recipients:;', []],
    ['a@x.test; b@x.test,, ', ['a@x.test', 'b@x.test']],
    ['< a@[192.0.2.1] >', ['a@[192.0.2.1]']],
    ['a@x.test (Sales team), Ann (desk 4) <b@x.test>', ['a@x.test', 'b@x.test']],
    ['"Doe; Ann" <c@x.test>, G: "Doe, Bob" <d@x.test>;', ['c@x.test', 'd@x.test']],
    ['"f g"@x.test, a@xn--bcher-kva.example', ['"f g"@x.test', 'a@xn--bcher-kva.example']],
  ])('reads %s', (value, addresses) => {
    expect(readAddressList(value, 'To')).toEqual(addresses);
  });

  it.each([
    ['Ann', /no address/],
    ['=?utf-8?B?PGFAeC50ZXN0Pg==?=', /encoded word/],
    ['(a@x.test)', /comment holding "@"/],
    ['(Ann)', /encoded word \(RFC 2047\) or a comment/],
    ['a@x.test (c (d) <e@y.test>)', /comment holding "\("/],
    ['a@x.test (\\) <e@y.test>)', /comment holding "\\\\"/],
    ['(c (d) <e@y.test>) <a@x.test>', /comment holding "\("/],
    ['a@x.test (x, y)', /comment holding ","/],
    ['a@x.test (x; y)', /comment holding ";"/],
    ['a@x.test ("x")', /comment holding "\\""/],
    ['a@x.test (x:y)', /comment holding ":"/],
    ['G: a@x.test (;<e@y.test>, <e2@y.test>) ;', /comment holding ";"/],
    ['G: "x;<e@y.test>" <a@x.test>;', /quoted string holding ; inside a group/],
    ['G: "a;b"@x.test;', /quoted string holding ; inside a group/],
    ['"ann"@x.test', /quoted local part that needs no quotes/],
    ['<"a.b"@x.test>', /quoted local part that needs no quotes/],
    ['a@XN--bcher-kva.example', /xn-- prefix in capitals/],
    ['a@sub.Xn--bcher-kva.example', /xn-- prefix in capitals/],
    ['=?utf-8?B?PGFAeC50ZXN0Pg==?=: b@x.test;', /encoded word/],
    ['=?utf-8?Q?a?=@x.test', /encoded word/],
    ['<=?utf-8?Q?a?=@x.test>', /encoded word/],
    ['a@x.test <b@x.test>', /more after an address/],
    ['<a@x.test> <b@x.test>', /more after an address/],
    ['a @x.test', /not one addr-spec/],
    ['<@route.test:a@x.test>', /source route/],
    ['<>', /no address/],
    ['g: h: a@x.test;;', /group inside a group/],
    ['" a"@x.test', /quoted local part/],
    ['a@b@x.test', /more after an address|not valid/],
    ['a\u202e@x.test', /bidirectional/],
  ])('refuses %s', (value, reason) => {
    const err = thrownBy(() => readAddressList(value, 'Cc'));
    expect(err).toMatchObject({ code: 'EMESSAGE', permanent: true });
    expect(err.message).toMatch(/^The relay cannot read the message's recipients for certain \(the Cc header /);
    expect(err.message).toMatch(reason);
  });

  it('refuses a line that is neither a field nor a continuation, naming it, and reads the rest once', () => {
    const read = (text: string) => () => readRelayHeaders(Buffer.from(text));
    expect(thrownBy(read('From: a@x.test\r\nCc\r\n : v@x.test\r\n\r\n')).message).toMatch(/header line 2 is neither/);
    expect(thrownBy(read(' Cc: v@x.test\r\nFrom: a@x.test\r\n\r\n')).message).toMatch(
      /header line 1 starts with white space/,
    );
    expect(thrownBy(read('From a@x.test Mon Nov 23 2026\r\n\r\n')).message).toMatch(/header line 1 is neither/);
    const headers = readRelayHeaders(
      Buffer.from('To : Ann <ANN@x.test>,\r\n\tbob@x.test\r\nCC: ann@x.test\r\nDate: now\r\nMessage-ID: <m@x>\r\n\r\n'),
    );
    expect(headers).toMatchObject({ recipients: ['ANN@x.test', 'bob@x.test'], hasDate: true, messageId: '<m@x>' });
    expect(headers.fields.map((f) => [f.name, f.value])).toContainEqual(['To', 'Ann <ANN@x.test>, bob@x.test']);
  });
});

describe("the service's address readers (a second reading of To, Cc and Bcc)", () => {
  it("include the Nodemailer that mailparser bundles (the emulator's parser), which reads comments and groups its own way", () => {
    expect(serviceAddressReaders().map((r) => r.name)).toContain("nodemailer 10.0.12 (mailparser's)");
  });

  it.each([
    ['a@x.test (c (d) <evil@y.test>)', ['a@x.test'], ['evil@y.test']],
    ['G: a@x.test (;<evil@y.test>, <e2@y.test>) ;', ['a@x.test'], ['a@x.test', 'evil@y.test', 'e2@y.test']],
    ['G: "x;<evil@y.test>" <a@x.test>;', ['a@x.test'], ['', 'evil@y.test']],
  ])('catch %s, were the grammar to let it through', (value, relayRead, theirs) => {
    expect(disagreeingReader(value, relayRead)).toEqual({ reader: "nodemailer 10.0.12 (mailparser's)", read: theirs });
  });

  it('refuse a To the grammar reads as one address and they read otherwise (a comma inside a domain literal)', () => {
    const value = "ann@[1.2.3.4,'x]";
    // The relay's grammar takes it as one address: only the second reading stops it.
    expect(disagreeingReader(value, [value])).toEqual({
      reader: "nodemailer 10.0.12 (mailparser's)",
      read: ['ann@[1.2.3.4', ''],
    });
    const err = thrownBy(() => planEnvelope(Buffer.from(`From: a@x.test\r\nTo: ${value}\r\n\r\nhi\r\n`), [value]));
    expect(err).toMatchObject({ code: 'EMESSAGE', permanent: true });
    expect(err.message).toContain("the To header reads otherwise to nodemailer 10.0.12 (mailparser's)");
  });

  it('agree with what the relay reads, ASCII case aside', () => {
    expect(disagreeingReader('Ann (desk 4) <ANN@x.test>, G: "f g"@x.test;', ['ann@x.test', '"f g"@x.test'])).toBe(
      undefined,
    );
  });
});

describe('MessageIdentities', () => {
  const facts = (over: Partial<Parameters<MessageIdentities['identify']>[0]> = {}) => ({
    secret: identitySecret('relay-test-key'),
    envelope: { from: 'cron@x.test', to: ['ops@x.test'] },
    digest: 'a'.repeat(64),
    hasMessageId: false,
    hasDate: true,
    from: 'cron@Bücher.example' as string | false,
    ...over,
  });
  const transient = new EmlApiError('ETIMEDOUT', 'no answer', { permanent: false });

  it('names a message by an HMAC keyed by the secret of the key it is sent with: relays sharing the key agree, nobody else can compute it', () => {
    expect(identitySecret('relay-test-key')).toEqual(identitySecret('relay-test-key'));
    const other = new MessageIdentities().identify(facts({ secret: identitySecret('another-key') }));
    expect(other.idempotencyKey).not.toBe(new MessageIdentities().identify(facts()).idempotencyKey);
    expect(other.addedMessageId).not.toBe(new MessageIdentities().identify(facts()).addedMessageId);
    // The secret is no copy of the key: the key appears nowhere in it.
    expect(identitySecret('relay-test-key').toString('latin1')).not.toContain('relay-test-key');
  });

  it('names a message with a Message-ID or a Date by its envelope and bytes alone, from any relay', () => {
    const a = new MessageIdentities().identify(facts());
    const b = new MessageIdentities().identify(facts());
    expect(b.idempotencyKey).toBe(a.idempotencyKey);
    expect(a.idempotencyKey).toMatch(/^smtp-relay-[0-9a-f]{64}$/);
    expect(a.addedMessageId).toMatch(/^<[0-9a-f]{32}\.eml-api-relay@xn--bcher-kva\.example>$/);
    expect(new MessageIdentities().identify(facts({ hasMessageId: true })).addedMessageId).toBeUndefined();
    for (const other of [
      facts({ envelope: { from: 'cron@x.test', to: ['ops@x.test', 'audit@x.test'] } }),
      facts({ envelope: { from: '', to: ['ops@x.test'] } }),
      facts({ digest: 'b'.repeat(64) }),
    ]) {
      expect(new MessageIdentities().identify(other).idempotencyKey).not.toBe(a.idempotencyKey);
    }
  });

  it('without either, keeps an identity only for the retry of a try whose outcome it could not know, for 24 hours', () => {
    let now = 0;
    const identities = new MessageIdentities({ now: () => now });
    const bare = facts({ hasDate: false });
    const first = identities.identify(bare);
    identities.settle(first, undefined);
    const repeat = identities.identify(bare);
    expect(repeat.idempotencyKey).not.toBe(first.idempotencyKey);
    identities.settle(repeat, transient);
    const retry = identities.identify(bare);
    expect([retry.idempotencyKey, retry.addedMessageId]).toEqual([repeat.idempotencyKey, repeat.addedMessageId]);
    identities.settle(retry, new EmlApiError('EAPI', 'refused', { permanent: true }));
    expect(identities.identify(bare).idempotencyKey).not.toBe(retry.idempotencyKey);
    const late = identities.identify(bare);
    identities.settle(late, transient);
    now += IDEMPOTENCY_WINDOW_MS;
    expect(identities.identify(bare).idempotencyKey).not.toBe(late.idempotencyKey);
  });

  it('shares what it settles with other processes, and with one that joins later (--processes)', () => {
    const other = new MessageIdentities();
    const identities = new MessageIdentities({
      settled: (fingerprint, remembered) => other.learn(fingerprint, remembered),
    });
    const bare = facts({ hasDate: false });
    const tried = identities.identify(bare);
    identities.settle(tried, transient);
    expect(other.identify(bare).idempotencyKey).toBe(tried.idempotencyKey);
    const joined = new MessageIdentities();
    for (const [fingerprint, remembered] of other.remembered()) joined.learn(fingerprint, remembered);
    expect(joined.identify(bare).idempotencyKey).toBe(tried.idempotencyKey);
    identities.settle(tried, undefined);
    expect(other.identify(bare).idempotencyKey).not.toBe(tried.idempotencyKey);
  });

  it('remembers at most `capacity` tries, forgetting the oldest', () => {
    const identities = new MessageIdentities({ capacity: 2 });
    const tries = ['1', '2', '3'].map((d) => identities.identify(facts({ hasDate: false, digest: d })));
    for (const t of tries) identities.settle(t, transient);
    const again = ['1', '2', '3'].map((d) => identities.identify(facts({ hasDate: false, digest: d })).idempotencyKey);
    expect(again.map((key, i) => key === tries[i]!.idempotencyKey)).toEqual([false, true, true]);
  });
});

describe('MessageRewriter', () => {
  const through = async (chunks: string[], rewrite: (head: Buffer) => Buffer, tooLarge = () => undefined) => {
    const rewriter = new MessageRewriter(rewrite, tooLarge);
    const out = await buffer(Readable.from(chunks.map((c) => Buffer.from(c))).pipe(rewriter));
    return { out: out.toString(), rewriter };
  };

  it('finds the header section across chunk boundaries, rewrites it once and hashes what leaves', async () => {
    const heads: string[] = [];
    const { out, rewriter } = await through(['From: a\r', '\n\r', '\nbody\r\n', 'more'], (h) => {
      heads.push(h.toString());
      return Buffer.from('X: 1\r\n\r\n');
    });
    expect(heads).toEqual(['From: a\r\n\r\n']);
    expect(out).toBe('X: 1\r\n\r\nbody\r\nmore');
    const again = await through(['X: 1\r\n\r\nbody\r\nmore'], (h) => h);
    expect(again.rewriter.digest()).toBe(rewriter.digest());
  });

  it('makes every bare LF and bare CR a CRLF, wherever the chunks split the message (a CR last in one chunk, its LF first in the next)', async () => {
    const bytes = fc
      .array(fc.constantFrom('a', '.', ' ', ':', '\r', '\n', '\r\n'), { maxLength: 40 })
      .map((a) => a.join(''));
    await fc.assert(
      fc.asyncProperty(bytes, fc.array(fc.nat(), { maxLength: 6 }), async (text, cuts) => {
        const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
        const chunks = [0, ...at].map((start, i) => text.slice(start, at[i] ?? text.length)).filter((c) => c !== '');
        const { out } = await through(chunks, (h) => h);
        expect(out).toBe(text.replace(/\r\n|\r|\n/g, '\r\n'));
      }),
      { numRuns: 500 },
    );
  });

  it('passes a body chunk without bare line ends through as it is (no copy)', async () => {
    const rewriter = new MessageRewriter(
      (h) => h,
      () => undefined,
    );
    const parts: Buffer[] = [];
    rewriter.on('data', (c: Buffer) => parts.push(c));
    const body = Buffer.alloc(64 * 1024, 'line\r\n');
    rewriter.write(Buffer.from('From: a\r\n\r\n'));
    await new Promise<void>((resolve) => rewriter.end(body, resolve));
    expect(parts.at(-1)).toBe(body);
  });

  it('fails on a header section over 1 MiB, and on whatever the size check reports', async () => {
    const long = Array.from({ length: 20 }, () => `X-Long: ${'a'.repeat(64 * 1024)}\r\n`);
    await expect(through(long, (h) => h)).rejects.toThrow(/header section is longer/);
    const err = new Error('too large');
    await expect(
      through(
        ['a'],
        (h) => h,
        () => err as never,
      ),
    ).rejects.toBe(err);
  });
});

describe('who may AUTH and send', () => {
  const policy = (hasOwnKey: boolean, hasTls: boolean, logins: Partial<RelayPolicy> = {}): RelayPolicy => ({
    hasOwnKey,
    hasTls,
    hasUsers: false,
    storing: false,
    ...logins,
    allowUnauthenticatedFrom: new ClientAddressList(['127.0.0.0/8', '::1', '10.1.0.0/16'], 'test'),
    trustedNetworks: new ClientAddressList(['127.0.0.0/8', '::1'], 'test'),
  });

  it('offers AUTH over TLS or from trusted networks only', () => {
    const loopback = policy(false, false);
    expect(authOffered({ remoteAddress: '127.0.0.1', secure: false }, loopback)).toBe(true);
    expect(authOffered({ remoteAddress: '::ffff:127.0.0.2', secure: false }, loopback)).toBe(true);
    expect(authOffered({ remoteAddress: '::1', secure: false }, loopback)).toBe(true);
    expect(authOffered({ remoteAddress: '198.18.0.2', secure: false }, loopback)).toBe(false);
    expect(authOffered({ remoteAddress: '198.18.0.2', secure: true }, loopback)).toBe(true);
    const sidecar = { trustedNetworks: new ClientAddressList(['127.0.0.6/32'], 'trustedNetworks') };
    expect(authOffered({ remoteAddress: '127.0.0.6', secure: false }, sidecar)).toBe(true);
    expect(authOffered({ remoteAddress: '127.0.0.1', secure: false }, sidecar)).toBe(false);
  });

  it('lets authenticated clients send, and unauthenticated ones only with the relay key from an allowed address', () => {
    const facts = (remoteAddress: string, secure = false, authenticated = false) => ({
      remoteAddress,
      secure,
      authenticated,
    });
    expect(mailRefusal(facts('198.18.0.2', true, true), policy(false, true))).toBeUndefined();
    expect(mailRefusal(facts('10.1.2.3'), policy(true, false))).toBeUndefined();
    expect(mailRefusal(facts('10.1.2.3'), policy(false, false))?.code).toBe(530);
    expect(mailRefusal(facts('10.2.0.1'), policy(true, true))?.text).toMatch(/STARTTLS/);
    expect(mailRefusal(facts('10.2.0.1'), policy(true, false))?.text).toMatch(/only from its trusted networks/);
    expect(mailRefusal(facts('127.0.0.1'), policy(false, false))?.text).toMatch(/AUTH with your API key/);
  });

  it("the 530 says which credentials this relay takes: API keys, its users' logins, or under --outbox its own key", () => {
    const text = (logins: Partial<RelayPolicy>, address = '10.2.0.1') =>
      mailRefusal({ remoteAddress: address, secure: true, authenticated: false }, policy(true, true, logins))?.text;
    expect(text({})).toBe('5.7.0 Authentication required: AUTH with your API key as the password');
    expect(text({ hasUsers: true })).toBe(
      '5.7.0 Authentication required: AUTH with your relay login, or with your API key as the password',
    );
    expect(text({ storing: true })).toBe(
      "5.7.0 Authentication required: AUTH with the relay's own API key as the password",
    );
    expect(text({ storing: true, hasUsers: true })).toBe('5.7.0 Authentication required: AUTH with your relay login');
    const plain = mailRefusal(
      { remoteAddress: '10.2.0.1', secure: false, authenticated: false },
      policy(true, true, { storing: true, hasUsers: true }),
    );
    expect(plain?.text).toBe('5.7.0 Must issue a STARTTLS command first, then AUTH with your relay login');
  });

  it('reads address lists with CIDRs and IPv4-mapped addresses; refuses what is not one with ECONFIG', () => {
    const list = new ClientAddressList(['192.0.2.0/24', 'fd00::/8', '203.0.113.7'], 'allowUnauthenticatedFrom');
    expect(list.includes('192.0.2.200')).toBe(true);
    expect(list.includes('::ffff:192.0.2.9')).toBe(true);
    expect(list.includes('fd12::1')).toBe(true);
    expect(list.includes('203.0.113.8')).toBe(false);
    expect(isLoopbackAddress('127.8.9.10')).toBe(true);
    // Family by family: an IPv6 rule never matches an IPv4 client (Node's BlockList alone maps it into one).
    const everyIpv6 = new ClientAddressList(['::/0'], 'allowUnauthenticatedFrom');
    expect(['203.0.113.5', '::ffff:203.0.113.5', '::ffff:cb00:7105'].map((a) => everyIpv6.includes(a))).toEqual([
      false,
      false,
      false,
    ]);
    expect(everyIpv6.includes('2001:db8::1')).toBe(true);
    // An IPv4-mapped entry is the IPv4 network it maps; a hex-mapped client is an IPv4 client.
    const mapped = new ClientAddressList(['::ffff:10.0.0.0/104', '::ffff:c000:207'], 'trustedNetworks');
    expect(['10.1.2.3', '::ffff:10.1.2.3', '::ffff:a01:203', '192.0.2.7'].map((a) => mapped.includes(a))).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect(mapped.includes('11.0.0.1')).toBe(false);
    expect(new ClientAddressList(['10.0.0.0/8'], 'x').includes('::ffff:a01:203')).toBe(true);
    expect(clientKey('::ffff:a01:203')).toBe('10.1.2.3');
    for (const bad of ['10.0.0.0/33', 'example.com', '10.0.0.1/8/1', ''])
      expect(thrownBy(() => new ClientAddressList([bad], 'allowUnauthenticatedFrom')).message).toContain(
        'allowUnauthenticatedFrom',
      );
  });

  it('answers the same when asked again about an address, also after more addresses than it remembers', () => {
    const list = new ClientAddressList(['10.0.0.0/16', 'fd00::/8'], 'trustedNetworks');
    const addresses = Array.from({ length: 3000 }, (_, i) =>
      i % 3 === 0 ? `10.${i % 2}.${(i >> 8) & 255}.${i & 255}` : i % 3 === 1 ? `fd00::${i.toString(16)}` : `fe80::${i}`,
    );
    const expected = (a: string) => a.startsWith('10.0.') || a.startsWith('fd00:');
    for (let pass = 0; pass < 2; pass++) {
      for (const address of addresses) expect(list.includes(address)).toBe(expected(address));
    }
    expect(list.includes('::ffff:10.0.1.2')).toBe(true);
    expect(list.includes('::ffff:10.0.1.2')).toBe(true);
    expect(list.includes('not an address')).toBe(false);
    expect(list.includes('not an address')).toBe(false);
  });
});

describe("the relay's users", () => {
  it('checks passwords given plain or as scrypt hashes; unknown names and wrong passwords fail', async () => {
    const hash = await hashRelayPassword('s3cret pass');
    expect(hash).toMatch(/^\$scrypt\$ln=14,r=8,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/);
    expect(await hashRelayPassword('s3cret pass')).not.toBe(hash);
    const users = new RelayUsers([
      { username: 'billing', passwordHash: hash },
      { username: 'cron', password: 'plain-pw' },
    ]);
    expect(await users.verify('billing', 's3cret pass')).toBe(true);
    expect(await users.verify('billing', 's3cret pasS')).toBe(false);
    expect(await users.verify('Billing', 's3cret pass')).toBe(false);
    expect(await users.verify('cron', 'plain-pw')).toBe(true);
    expect(await users.verify('cron', 'plain-pw ')).toBe(false);
    expect(await users.verify('nobody', 's3cret pass')).toBe(false);
    expect(inspect(users, { showHidden: true, depth: Infinity })).not.toMatch(/plain-pw|scrypt/);
  });

  it('refuses bad entries with ECONFIG naming them, never quoting a password or hash', () => {
    const cases: [unknown, RegExp][] = [
      [[{ username: 'a b', password: 'pw-1' }], /users\[0\]\.username/],
      [[{ username: 'a', password: 'pw-1', passwordHash: '$scrypt$' }], /users\[0\]: give either/],
      [[{ username: 'a', passwordHash: '$2b$10$pw-1-bcrypt-hash-here' }], /users\[0\]\.passwordHash/],
      [
        [{ username: 'a', passwordHash: '$scrypt$ln=30,r=8,p=1$c2FsdHNhbHRzYWx0c2FsdA$pw1pw1pw1pw1pw1pw1pw1pw1pw1' }],
        /passwordHash/,
      ],
      [
        [
          { username: 'a', password: 'pw-1' },
          { username: 'a', password: 'pw-2' },
        ],
        /users\[1\]\.username: "a" is listed twice/,
      ],
      ['pw-1', /users: expected an array/],
    ];
    for (const [users, message] of cases) {
      const err = thrownBy(() => new RelayUsers(users as never));
      expect(err.code).toBe('ECONFIG');
      expect(err.message).toMatch(message);
      expect(err.message).not.toMatch(/pw-1|pw1/);
    }
  });

  it('refuses an unknown key in a user (a misspelt senders would let the user send as anyone), naming the nearest one', () => {
    const err = thrownBy(() => new RelayUsers([{ username: 'a', password: 'pw-1', sender: ['a@x.test'] } as never]));
    expect(err).toMatchObject({ code: 'ECONFIG', permanent: true });
    expect(err.message).toBe(
      'Invalid option users[0].sender: unknown option; did you mean users[0].senders? (known: username, password, passwordHash, senders)',
    );
    expect(() =>
      resolveRelayOptions({
        baseUrl: 'http://127.0.0.1:1',
        apiKey: 'k',
        users: [{ username: 'a', password: 'pw-1', Senders: [] } as never],
      }),
    ).toThrow(/users\[0\]\.Senders: unknown option; did you mean users\[0\]\.senders\?/);
  });

  it('reads a users file of name:hash lines, naming the line of a bad one', async () => {
    const hash = await hashRelayPassword('pw');
    const text = `# relay users\n\nbilling:${hash}\r\ncron:${hash}:cron@host.example\n`;
    expect(parseUsersFile(text, 'users.txt')).toEqual([
      { username: 'billing', passwordHash: hash },
      { username: 'cron', passwordHash: hash, senders: ['cron@host.example'] },
    ]);
    expect(thrownBy(() => parseUsersFile('a:plain-password\n', 'users.txt')).message).toMatch(
      /users\.txt line 1: the hash is not an scrypt hash/,
    );
    expect(thrownBy(() => parseUsersFile(`\nno-hash\n`, 'users.txt')).message).toMatch(/users\.txt line 2/);
  });
});

describe('the AUTH failure budget of each client address', () => {
  it('refuses after `limit` failures within the window, until the oldest leaves it', () => {
    let now = 0;
    const budget = new AuthFailureBudget({ limit: 3, window: 60_000, now: () => now });
    for (const at of [0, 10_000, 20_000]) {
      now = at;
      expect(budget.retryAfter('192.0.2.7')).toBe(0);
      budget.record('192.0.2.7', `wrong-${at}`);
    }
    expect(budget.retryAfter('192.0.2.7')).toBe(40_000);
    expect(budget.retryAfter('192.0.2.8')).toBe(0);
    now = 60_000;
    expect(budget.retryAfter('192.0.2.7')).toBe(0);
    now = 200_000;
    expect(budget.retryAfter('192.0.2.7')).toBe(0);
    expect(budget.size).toBe(0);
  });

  it('the same credentials failing again count once, as their latest failure', () => {
    let now = 0;
    const budget = new AuthFailureBudget({ limit: 2, window: 60_000, now: () => now });
    const stale = failureFingerprint('billing', 'old-password');
    expect(failureFingerprint('billing', 'old-password')).toBe(stale);
    expect(failureFingerprint('cron', 'old-password')).not.toBe(stale);
    for (now = 0; now < 300_000; now += 30_000) budget.record('192.0.2.7', stale);
    expect(budget.retryAfter('192.0.2.7')).toBe(0);
    budget.record('192.0.2.7', failureFingerprint('billing', 'another'));
    expect(budget.retryAfter('192.0.2.7')).toBe(30_000);
  });

  it('an AUTH under way takes its slot when it begins; a success or a service that could not tell gives it back', () => {
    const budget = new AuthFailureBudget({ limit: 2, window: 60_000 });
    const first = budget.begin('192.0.2.9');
    const second = budget.begin('192.0.2.9');
    expect(typeof first).toBe('object');
    expect(typeof second).toBe('object');
    // Both slots taken by AUTHs under way: a third is refused before anyone is asked.
    expect(budget.begin('192.0.2.9')).toBe(1_000);
    (first as AuthAttempt).end(undefined);
    (first as AuthAttempt).end('f1'); // only the first end counts
    const third = budget.begin('192.0.2.9') as AuthAttempt;
    third.end('f3');
    (second as AuthAttempt).end('f2');
    expect(budget.retryAfter('192.0.2.9')).toBeGreaterThan(1_000);
  });

  it('counts IPv6 clients per /64 (by clientKey), and remembers at most maxAddresses', () => {
    const budget = new AuthFailureBudget({ limit: 2, window: 60_000, maxAddresses: 100 });
    budget.record(clientKey('2001:db8:1:2::a'), 'a');
    budget.record(clientKey('2001:db8:1:2:ffff::b'), 'b');
    expect(budget.retryAfter(clientKey('2001:db8:1:2::c'))).toBeGreaterThan(0);
    expect(budget.retryAfter(clientKey('2001:db8:1:3::c'))).toBe(0);
    for (let i = 0; i < 1000; i++) budget.record(`10.0.${i >> 8}.${i & 255}`, 'x');
    expect(budget.size).toBe(100);
    expect(clientKey('2001:DB8::1')).toBe('2001:db8:0:0::/64');
    expect(clientKey('::ffff:198.51.100.1')).toBe('198.51.100.1');
  });
});

describe('replies', () => {
  const api = (responseCode: number, apiCode?: string) =>
    new EmlApiError(responseCode === 401 || responseCode === 403 ? 'EAUTH' : 'EAPI', `failed (${responseCode})`, {
      responseCode,
      ...(apiCode ? { apiCode } : {}),
    });

  it.each([
    [new EmlApiError('EENVELOPE', 'x'), 550, '5.7.1'],
    [new EmlApiError('EMESSAGE', 'unreadable', { permanent: true }), 554, '5.6.0'],
    [new EmlApiError('EMESSAGE', 'disk full', { permanent: false }), 451, '4.3.0'],
    [new EmlApiError('ESPOOL', 'spool write failed', { permanent: false }), 451, '4.3.0'],
    [new EmlApiError('EABORT', 'closing'), 451, '4.3.2'],
    [new Error('bug'), 451, '4.3.0'],
  ] as const)("the relay's own: %s → %i %s", (err, code, enhanced) => {
    const reply = relayFailureReply(err);
    expect(reply.code).toBe(code);
    expect(reply.text.startsWith(`${enhanced} `)).toBe(true);
  });

  it.each([
    [api(400, 'invalid_eml'), 'client', 554, '5.6.0'],
    [api(400, 'invalid_address'), 'client', 554, '5.1.3'],
    [api(413), 'client', 552, '5.3.4'],
    [api(401), 'client', 550, '5.7.1'],
    [api(403), 'relay', 451, '4.7.1'],
    [api(404, 'not_found'), 'client', 451, '4.3.5'],
    [api(405), 'relay', 451, '4.3.5'],
    [api(409), 'client', 554, '5.0.0'],
    [api(429), 'client', 451, '4.4.5'],
    [api(408), 'client', 451, '4.4.2'],
    [api(503, 'unavailable'), 'client', 451, '4.3.0'],
    [api(502), 'client', 451, '4.3.0'],
    [new EmlApiError('ECONNECTION', 'refused'), 'client', 451, '4.4.1'],
    [new EmlApiError('ETIMEDOUT', 'slow'), 'client', 451, '4.4.2'],
    [new EmlApiError('EABORT', 'closed'), 'client', 451, '4.3.2'],
    [new Error('bug'), 'client', 451, '4.3.0'],
  ] as const)('the service: %s (%s key) → %i %s', (err, owner, code, enhanced) => {
    const reply = serviceFailureReply(err, owner);
    expect(reply.code).toBe(code);
    expect(reply.text.startsWith(`${enhanced} `)).toBe(true);
    expect(reply.text).not.toMatch(/[\r\n]/);
  });

  it.each([
    [new EmlApiError('ECONNECTION', 'Redis down'), 451, '4.3.0'],
    [new EmlApiError('ETIMEDOUT', 'Redis slow'), 451, '4.3.0'],
    [new EmlApiError('ECONFIG', 'maxmemory-policy allkeys-lru'), 451, '4.3.0'],
    [new EmlApiError('EMESSAGE', 'over maxMessageSize', { permanent: true, responseCode: 413 }), 552, '5.3.4'],
    [new EmlApiError('EMESSAGE', 'enqueue: envelope.from holds a lone surrogate', { permanent: true }), 554, '5.6.0'],
    [new EmlApiError('EMESSAGE', 'parked', { permanent: true, queueId: 'j', idempotencyKey: 'k' }), 554, '5.6.0'],
    [new EmlApiError('EABORT', 'closed'), 451, '4.3.2'],
    [new Error('bug'), 451, '4.3.0'],
  ] as const)('the outbox: %s → %i %s', (err, code, enhanced) => {
    const reply = outboxFailureReply(err);
    expect(reply.code).toBe(code);
    expect(reply.text.startsWith(`${enhanced} `)).toBe(true);
  });

  it("replies quote nothing of the relay's insides: no URL, no Redis address or text, no hint to a programmer", () => {
    const service = new EmlApiError(
      'ECONNECTION',
      'POST /v1/send/eml to https://api.internal.example:8443 failed after 3 attempts: connect ECONNREFUSED 10.1.2.3:8443 (ECONNREFUSED); the request was sent, so the service may have accepted it; not retried to avoid sending twice (see retry.retryAmbiguous)',
      { permanent: false },
    );
    const redis = new EmlApiError(
      'ECONNECTION',
      'Could not store the message in Redis at 10.9.8.7:6379: OOM command not allowed when used memory > \'maxmemory\'. script: 6e1c4bd0a7cbd7e4b8fa1b0c3c2a9f1e5d0c7b6a; the job may have been stored all the same (queueing again with idempotencyKey "k", err.idempotencyKey, stores it once)',
      { permanent: false, idempotencyKey: 'k', queueId: 'j' },
    );
    const timeout = new EmlApiError(
      'ETIMEDOUT',
      'POST /v1/send/eml to https://api.internal.example failed: overall timeout (timeouts.total, 120000 ms) elapsed',
    );
    const texts = [
      serviceFailureReply(service, 'client').text,
      serviceFailureReply(service, 'relay').text,
      serviceFailureReply(timeout, 'relay').text,
      outboxFailureReply(redis).text,
      authFailureReply(service).text,
      authFailureReply(redis).text,
    ];
    for (const text of texts) {
      expect(text).toMatch(/try again later$/);
      expect(text).not.toMatch(
        /https?:|internal\.example|10\.\d|6379|8443|Redis|OOM|maxmemory|script|idempotencyKey|retry|timeouts\./i,
      );
    }
    // A refusal quotes the service's own reason (its JSON error), not the relay's request.
    const refused = new EmlApiError(
      'EAPI',
      'POST /v1/send/eml failed, the service answered with an error (400 invalid_eml): mail: the message has no From header',
      {
        responseCode: 400,
        apiCode: 'invalid_eml',
        response: '{"error":{"code":"invalid_eml","message":"mail: the message has no From header"}}',
        command: 'POST /v1/send/eml',
      },
    );
    expect(serviceFailureReply(refused, 'client')).toEqual({
      code: 554,
      text: '5.6.0 The email service refused the message: invalid_eml: mail: the message has no From header',
    });
  });

  it('AUTH: a refused key is 535 5.7.8, a service that cannot tell is 454 4.7.0', () => {
    expect(authFailureReply(api(401))).toMatchObject({ code: 535 });
    expect(authFailureReply(new EmlApiError('ECONFIG', 'bad key'))).toMatchObject({ code: 535 });
    expect(authFailureReply(new EmlApiError('ECONNECTION', 'down'))).toMatchObject({ code: 454 });
    expect(authFailureReply(api(503))).toMatchObject({ code: 454 });
  });

  it('never quotes an error from inside the relay (not an EmlApiError): generic text, the detail is only logged', () => {
    const internal = new SyntaxError('Invalid regular expression: /(?:s|%73)(?:k|%6b)/: Regular expression too large');
    const auth = authFailureReply(internal);
    expect(auth).toEqual({ code: 454, text: '4.7.0 Temporary authentication failure, try again later' });
    const data = relayFailureReply(new TypeError('Cannot read properties of undefined (reading /srv/spool/x)'));
    expect(data).toEqual({ code: 451, text: '4.3.0 Local error in processing, try again later' });
    expect(serviceFailureReply(internal, 'client')).toEqual(data);
  });

  it('a message over SIZE with its line ends CRLF (EMESSAGE with 413) is 552 5.3.4', () => {
    const err = new EmlApiError('EMESSAGE', 'The message is larger than SIZE', { permanent: true, responseCode: 413 });
    expect(relayFailureReply(err)).toEqual({ code: 552, text: '5.3.4 The message is larger than SIZE' });
  });

  it('keeps replies under the 512-character line limit', () => {
    const long = 'x'.repeat(5000);
    expect(
      serviceFailureReply(
        new EmlApiError('EAPI', long, {
          responseCode: 400,
          response: JSON.stringify({ error: { code: 'x', message: long } }),
        }),
        'client',
      ).text.length,
    ).toBeLessThan(500);
    expect(relayFailureReply(new EmlApiError('EMESSAGE', long, { permanent: true })).text.length).toBeLessThan(500);
  });

  it('SIZE defaults to the largest message whose upload fits a 50 MiB request with a Bcc field for every recipient', () => {
    const uploadable = maxUploadableSize(50 * 1024 * 1024);
    expect(uploadable).toBe(39321591);
    expect(11 + 4 * Math.ceil(uploadable / 3)).toBeLessThanOrEqual(50 * 1024 * 1024);
    expect(11 + 4 * Math.ceil((uploadable + 3) / 3)).toBeGreaterThan(50 * 1024 * 1024);
    // 100 recipients of 254 characters of 3 UTF-8 bytes each, folded: 76,608 bytes kept for the Bcc field.
    expect(defaultMaxMessageSize(50 * 1024 * 1024, 100)).toBe(39244983);
    const base = { baseUrl: 'http://127.0.0.1:1', apiKey: 'relay-test-key' };
    expect(resolveRelayOptions(base).settings.maxMessageSize).toBe(39244983);
    expect(resolveRelayOptions({ ...base, maxRecipients: 10 }).settings.maxMessageSize).toBe(
      defaultMaxMessageSize(50 * 1024 * 1024, 10),
    );
    expect(() => resolveRelayOptions({ ...base, maxRecipients: 30_000 })).toThrow(
      expect.objectContaining({ code: 'ECONFIG', message: expect.stringMatching(/maxMessageSize/) }),
    );
    expect(resolveRelayOptions({ ...base, maxRecipients: 30_000, maxMessageSize: 1e6 }).settings.maxMessageSize).toBe(
      1e6,
    );
  });

  it.each([
    [
      { timeouts: { tlsHandshake: 0 } },
      /Invalid option timeouts\.tlsHandshake: expected a whole number from 1 to 600000/,
    ],
    [{ timeouts: { tlsHandshake: 1.5 } }, /Invalid option timeouts\.tlsHandshake/],
  ])('refuses %j with ECONFIG naming the option', (options, message) => {
    const base = { baseUrl: 'http://127.0.0.1:1', apiKey: 'relay-test-key' };
    expect(() => resolveRelayOptions({ ...base, ...options })).toThrow(
      expect.objectContaining({ code: 'ECONFIG', message: expect.stringMatching(message) }),
    );
  });

  it('refuses a spool that is not an object as the client does, and spools past 512 KiB unless told otherwise', () => {
    const base = { baseUrl: 'http://127.0.0.1:1', apiKey: 'relay-test-key' };
    for (const spool of [5, true, null, 'ab', []]) {
      expect(() => resolveRelayOptions({ ...base, spool } as never)).toThrow(
        expect.objectContaining({
          code: 'ECONFIG',
          message: expect.stringMatching(/^Invalid option spool: expected \{ threshold, directory \}, got /),
        }),
      );
    }
    expect(resolveRelayOptions(base).settings.spool.threshold).toBe(512 * 1024);
    expect(resolveRelayOptions({ ...base, spool: { directory: '/tmp' } }).settings.spool).toEqual({
      threshold: 512 * 1024,
      directory: '/tmp',
    });
  });

  it('defaults timeouts.tlsHandshake to 10 s', () => {
    const base = { baseUrl: 'http://127.0.0.1:1', apiKey: 'relay-test-key' };
    expect(resolveRelayOptions(base).settings.tlsHandshakeTimeout).toBe(10_000);
  });
});

describe('UploadShares: the upload slots of a client, shared among SMTP clients', () => {
  const client = (maxConnections: number, total = 60_000) =>
    new EmlApiClient({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', maxConnections, timeouts: { total } });
  const never = new AbortController().signal;
  /** Resolves to the release once granted; `granted()` says whether it is. */
  const ask = (shares: UploadShares, api: EmlApiClient, who: string, signal = never) => {
    let release: (() => void) | undefined;
    const promise = shares.acquire(api, who, signal).then((r) => (release = r));
    return { promise, granted: () => release !== undefined, release: () => release!() };
  };
  const turn = () => new Promise((resolve) => setImmediate(resolve));

  it('keeps the last free slot from a client holding some while another is connected, and gives it when that one leaves', async () => {
    const shares = new UploadShares();
    const api = client(3);
    const [a, b] = [{}, {}];
    shares.join(a, 'A');
    shares.join(b, 'B');
    const a1 = ask(shares, api, 'A');
    const a2 = ask(shares, api, 'A');
    const a3 = ask(shares, api, 'A');
    await turn();
    expect([a1.granted(), a2.granted(), a3.granted()]).toEqual([true, true, false]);
    const b1 = ask(shares, api, 'B');
    await turn();
    expect(b1.granted()).toBe(true);
    b1.release();
    await turn();
    expect(a3.granted()).toBe(false);
    shares.leave(b);
    await turn();
    expect(a3.granted()).toBe(true);
  });

  it('gives a freed slot to the waiting client holding the fewest, and lets an aborted waiter go', async () => {
    const shares = new UploadShares();
    const api = client(2);
    const a1 = ask(shares, api, 'A');
    const a2 = ask(shares, api, 'A');
    await turn();
    const a3 = ask(shares, api, 'A');
    const stop = new AbortController();
    const c1 = ask(shares, api, 'C', stop.signal);
    const b1 = ask(shares, api, 'B');
    await turn();
    stop.abort(new Error('closing'));
    await expect(c1.promise).rejects.toThrow('closing');
    a1.release();
    await turn();
    expect([a3.granted(), b1.granted()]).toEqual([false, true]);
    a2.release();
    await turn();
    expect(a3.granted()).toBe(true);
  });

  it("a message waits for a slot no longer than the client's timeouts.total (ETIMEDOUT, 451 4.4.2)", async () => {
    const shares = new UploadShares();
    const api = client(1, 50);
    const first = ask(shares, api, 'A');
    await turn();
    await expect(ask(shares, api, 'B').promise).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    first.release();
    expect(await ask(shares, api, 'B').promise).toBeTypeOf('function');
  });
});

describe('From: refused at DATA exactly when the service is certain to refuse it', () => {
  const atoms = fc.constantFrom(
    'a@b.test',
    'Shop',
    '<>',
    '<a@b.test>',
    '"a@b.test"',
    '"Shop"',
    'g:',
    ';',
    ',',
    ' ',
    '\t',
    '(c)',
    '(a@b.test)',
    '=?utf-8?B?U2hvcA==?=',
    '=?utf-8?B?U2hvcCA8YUBiLnRlc3Q+?=',
    '=?utf-8?Q?a=40b.test?=',
    '=?utf-8?B?YUBiLnRlc3Q=?=',
    '@',
    'x@',
    '@b.test',
    'a@b',
    '<a@b.test',
    'a@b.test>',
    'é@b.test',
    'a@bé.test',
    '"a b"@c.test',
    'a.@b.test',
    'a@[1.2.3.4]',
    'a@-b.test',
    'xn--a@b.test',
    'a@xn--bcher-kva.example',
    'a@xn--zz-.test',
  );
  const value = fc.array(atoms, { maxLength: 5 }).map((a) => a.join(''));
  const verdicts = async (froms: string[]) => {
    const head = `${froms.map((f) => `From: ${f}\r\n`).join('')}To: ann@example.test\r\nSubject: s\r\n\r\n`;
    const relay = await Promise.resolve(Buffer.from(head))
      .then(async (bytes) => fromRefusal(readRelayHeaders(bytes).froms))
      .then(
        (refusal) => (refusal ? 'refused' : 'accepted'),
        () => 'refused',
      );
    const emulator = await parseEml(Buffer.from(`${head}hi\r\n`)).then(
      () => 'accepted',
      () => 'refused',
    );
    return { relay, emulator };
  };

  it('one From field: the relay and the emulator agree on every shape', async () => {
    await fc.assert(
      fc.asyncProperty(value, async (from) => {
        const { relay, emulator } = await verdicts([from]);
        expect([from, relay]).toEqual([from, emulator]);
      }),
      { numRuns: 1500 },
    );
  });

  it('two From fields: whatever the emulator refuses the relay refuses (it refuses one whose either field has no address)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.tuple(value, value), async (froms) => {
        const { relay, emulator } = await verdicts(froms);
        if (emulator === 'refused') expect([froms, relay]).toEqual([froms, 'refused']);
      }),
      { numRuns: 500 },
    );
  });
});

describe('xn-- domains as mailparser decodes them', () => {
  // The punycode.js mailparser itself loads.
  const punycode = createRequire(createRequire(import.meta.url).resolve('mailparser'))('punycode.js') as {
    toUnicode(domain: string): string;
    toASCII(domain: string): string;
  };
  const mailparserReads = (address: string) => {
    if (!/@xn--/.test(address)) return address;
    const at = address.lastIndexOf('@');
    try {
      return address.slice(0, at + 1) + punycode.toUnicode(address.slice(at + 1));
    } catch {
      return address;
    }
  };

  it('decodes every domain as punycode.js does, valid Punycode or not', () => {
    const label = fc.oneof(
      fc.string({ unit: 'grapheme', minLength: 1, maxLength: 8 }).map((u) => punycode.toASCII(u)),
      fc
        .string({ unit: fc.constantFrom('a', 'z', '0', '9', '-', 'A', '.', '\u3002'), maxLength: 10 })
        .map((t) => `xn--${t}`),
    );
    fc.assert(
      fc.property(fc.array(label, { minLength: 1, maxLength: 3 }), (labels) => {
        const address = `ann@${labels.join('.')}`;
        expect(asMailparserReads(address)).toBe(mailparserReads(address));
      }),
      { numRuns: 3000 },
    );
  });
});
