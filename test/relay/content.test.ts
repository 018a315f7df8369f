/**
 * What the relay reads from a message and what it forwards, over real
 * sockets to the emulator: line ends (bare LF and CR never reach the
 * service), recipients (only the envelope's; a header the relay cannot read
 * is refused, never dropped), and the identity of a message (a retry after
 * an ambiguous `451` is not delivered twice).
 */
import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { eventually } from '../helpers/async.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { SmtpDialog } from './relay-harness.js';

let emu: Emulator;
let relay: EmlApiRelay;
/** A proxy in front of the emulator that can hold the service's answers back, and a relay behind it. */
let proxy: SlowAnswerProxy;
let lossy: EmlApiRelay;
const opened: SmtpDialog[] = [];

beforeAll(async () => {
  emu = await startEmulator();
  relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false });
  proxy = await startSlowAnswerProxy(emu.url, 0);
  // The relay gives up on an answer after 300 ms; the proxy, when told to, holds answers 5 s.
  lossy = await startEmlApiRelay({
    baseUrl: proxy.url,
    apiKey: emu.apiKey,
    port: 0,
    retry: false,
    timeouts: { response: 300 },
  });
});
afterEach(() => {
  proxy.setAnswerDelay(0);
  for (const dialog of opened.splice(0)) dialog.close();
});
afterAll(async () => {
  await Promise.all([relay?.close(), lossy?.close()]);
  await proxy?.close();
  await emu?.close();
});

/** A session up to the DATA command's `354`, for writing the message by hand. */
async function openData(rcpts: string[], port = relay.port): Promise<SmtpDialog> {
  const { dialog } = await SmtpDialog.open(port);
  opened.push(dialog);
  await dialog.command('EHLO client.example');
  expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
  for (const rcpt of rcpts) expect((await dialog.command(`RCPT TO:<${rcpt}>`)).code).toBe(250);
  expect((await dialog.command('DATA')).code).toBe(354);
  return dialog;
}

/** Every CR and LF of `bytes` is part of a CRLF pair. */
function onlyCrlf(bytes: Buffer): boolean {
  const text = bytes.toString('latin1');
  return !/\r(?!\n)|(?<!\r)\n/.test(text);
}

describe('bare line ends (smtpd_forbid_bare_newline = normalize)', () => {
  // The four sequences of the SMTP smuggling research that end DATA at some servers and not at others.
  it.each([
    ['\\n.\\n', '\n.\n'],
    ['\\n.\\r\\n', '\n.\r\n'],
    ['\\r.\\r\\n', '\r.\r\n'],
    ['\\r\\n.\\n', '\r\n.\n'],
  ])('%s inside DATA does not end the message, and reaches the service as CRLF lines', async (label, sequence) => {
    const id = `bare-${label.replace(/\W/g, '')}`;
    const dialog = await openData(['ann@example.test']);
    // What a smuggler writes after the false terminator: a second transaction to someone else.
    const smuggled = `MAIL FROM:<ceo@example.test>${sequence.slice(-2) === '\r\n' ? '\r\n' : '\n'}RCPT TO:<eve@example.test>\r\n`;
    dialog.write(
      `From: shop@example.test\r\nTo: ann@example.test\r\nSubject: ${id}\r\nMessage-ID: <${id}@example.test>\r\n\r\n` +
        `Hello${sequence}${smuggled}tail\r\n.\r\n`,
    );
    const reply = await dialog.reply();
    expect(reply.code).toBe(250);
    // One reply for one message: smtp-server did not end DATA at the bare sequence.
    expect((await dialog.command('NOOP')).code).toBe(250);
    const message = emu.messages().find((m) => m.messageId === `<${id}@example.test>`)!;
    expect(message.recipients).toEqual(['ann@example.test']);
    expect(emu.mailbox('eve@example.test')).toEqual([]);
    expect(onlyCrlf(message.raw), JSON.stringify(message.raw.toString('latin1'))).toBe(true);
    const body = message.raw.toString('latin1').split('\r\n\r\n').slice(1).join('\r\n\r\n');
    expect(body).toBe('Hello\r\n.\r\nMAIL FROM:<ceo@example.test>\r\nRCPT TO:<eve@example.test>\r\ntail\r\n');
  });

  it('a message of bare LF lines (a script, curl on a Unix file) is delivered with CRLF lines, its text unchanged', async () => {
    const dialog = await openData(['ann@example.test', 'audit@example.test']);
    const lines = ['From: shop@example.test', 'To: ann@example.test', 'Subject: lf', 'Message-ID: <lf@example.test>'];
    dialog.write(`${lines.join('\n')}\n\nline one\nline two\r\n.\r\n`);
    expect((await dialog.reply()).code).toBe(250);
    const message = emu.messages().find((m) => m.messageId === '<lf@example.test>')!;
    expect(message.raw.toString('latin1')).toBe(
      `${lines.join('\r\n')}\r\nBcc: audit@example.test\r\n\r\nline one\r\nline two\r\n`,
    );
  });

  it('SIZE counts the message with CRLF line ends: one of bare LF lines within SIZE on the wire but over it so is refused 552 5.3.4 during DATA, nothing sent', async () => {
    const small = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      retry: false,
      maxMessageSize: 2_000,
    });
    try {
      /** A message of `total` bytes with CRLF line ends, its body lines ended by `eol`. */
      const sized = (id: string, total: number, eol: string) => {
        const head = `From: shop@example.test\r\nTo: ann@example.test\r\nSubject: ${id}\r\nMessage-ID: <${id}@example.test>\r\n\r\n`;
        const lines = Math.floor((total - head.length) / 20);
        const last = total - head.length - lines * 20;
        const body =
          `${'x'.repeat(18)}${eol}`.repeat(lines) + 'y'.repeat(Math.max(0, last - 2)) + (last >= 2 ? '\r\n' : '');
        return `${head}${body}`;
      };
      const sendRaw = async (message: string) => {
        const dialog = await openData(['ann@example.test'], small.port);
        dialog.write(`${message}.\r\n`);
        return dialog.reply();
      };
      // Exactly SIZE with CRLF lines, whether sent with CRLF or bare LF: accepted.
      expect((await sendRaw(sized('size-crlf', 2_000, '\r\n'))).code).toBe(250);
      const crlf = (text: string) => Buffer.byteLength(text.replace(/\r?\n/g, '\r\n'));
      expect(crlf(sized('size-crlf', 2_000, '\r\n'))).toBe(2_000);
      const lf = sized('size-lf', 2_000, '\n');
      expect([Buffer.byteLength(lf) < 2_000, crlf(lf)]).toEqual([true, 2_000]);
      expect((await sendRaw(lf)).code).toBe(250);
      // Bare LF lines, under 2,000 bytes on the wire, over it once CRLF: refused, the service never asked.
      const over = sized('size-lf-over', 2_048, '\n');
      expect(Buffer.byteLength(over)).toBeLessThan(2_000);
      const reply = await sendRaw(over);
      expect(reply.code).toBe(552);
      expect(reply.text).toMatch(
        /^5\.3\.4 The message is larger than SIZE \(2000 bytes, counted with CRLF line ends\)/,
      );
      expect(emu.messages().some((m) => m.subject === 'size-lf-over')).toBe(false);
    } finally {
      await small.close();
    }
  });

  it('a bare CR in a header is a line break for the service too: the field after it is read as a field', async () => {
    const dialog = await openData(['ann@example.test']);
    dialog.write(
      'From: shop@example.test\r\nTo: ann@example.test\r\nSubject: cr\rCc: eve@example.test\r\n' +
        'Message-ID: <bare-cr@example.test>\r\n\r\nHello\r\n.\r\n',
    );
    const reply = await dialog.reply();
    expect(reply.code).toBe(550);
    expect(reply.text).toMatch(/^5\.7\.1 .*eve@example\.test/);
    expect(emu.mailbox('eve@example.test')).toEqual([]);
  });
});

describe('recipients come only from the envelope: a header the relay cannot read is refused', () => {
  /** Sends a message whose header section is `head` (then From, Subject, Message-ID) to `rcpts`. */
  async function sendHead(head: string, rcpts: string[], id: string) {
    const dialog = await openData(rcpts);
    dialog.write(
      `${head}From: shop@example.test\r\nSubject: ${id}\r\nMessage-ID: <${id}@example.test>\r\n\r\nHello\r\n.\r\n`,
    );
    return dialog.reply();
  }
  const delivered = (id: string) => emu.messages().filter((m) => m.messageId === `<${id}@example.test>`);
  const b64 = (text: string) => Buffer.from(text).toString('base64');

  it.each([
    [
      'an encoded word holding 150 addresses (Cc: =?utf-8?B?...?=)',
      `To: ann@example.test\r\nCc: =?utf-8?B?${b64(Array.from({ length: 150 }, (_, i) => `<v${i}@example.test>`).join(', '))}?=\r\n`,
      /^5\.6\.0 .*Cc.*encoded word/,
    ],
    [
      'an encoded word in an address (Q encoding)',
      'To: ann@example.test\r\nCc: =?utf-8?Q?=3Cv1@example.test=3E?=\r\n',
      /^5\.6\.0 .*encoded word/,
    ],
    [
      'an encoded word as a group name',
      `To: =?utf-8?B?${b64('<v1@example.test>')}?=: ann@example.test;\r\n`,
      /^5\.6\.0 .*encoded word/,
    ],
    [
      'a field name without a colon, folded onto the next line (Cc⏎ : v@x)',
      'To: ann@example.test\r\nCc\r\n : v1@example.test\r\n',
      /^5\.6\.0 .*line 2.*neither a header field nor/,
    ],
    [
      'a first header line that starts with white space',
      ' Cc: v1@example.test\r\nTo: ann@example.test\r\n',
      /^5\.6\.0 .*line 1.*folded/,
    ],
    [
      'white space before the colon of a name the service still reads (Cc\\v:)',
      'To: ann@example.test\r\nCc\v: v1@example.test\r\n',
      /^5\.6\.0 .*line 2/,
    ],
    ['an entry with no address', 'To: ann@example.test, Ann Other\r\n', /^5\.6\.0 .*To.*no address/],
    ['an address in brackets after another address', 'To: v1@example.test <ann@example.test>\r\n', /^5\.6\.0 /],
  ])('%s: 554 5.6.0 with the reason, nothing delivered', async (label, head, reason) => {
    const id = `unreadable-${label.replace(/\W+/g, '-').slice(0, 40)}`;
    const reply = await sendHead(head, ['ann@example.test'], id);
    expect(reply.code).toBe(554);
    expect(reply.text).toMatch(reason);
    expect(delivered(id)).toEqual([]);
    expect(emu.mailbox('v1@example.test')).toEqual([]);
  });

  it('an empty group (To: undisclosed-recipients:;) is no recipient: the envelope recipients are added as Bcc and delivered', async () => {
    const reply = await sendHead('To: undisclosed-recipients:;\r\n', ['ann@example.test'], 'undisclosed');
    expect(reply.code).toBe(250);
    expect(delivered('undisclosed')[0]!.recipients).toEqual(['ann@example.test']);
  });

  it('encoded words in display names, groups, comments and quoted local parts are read as the service reads them', async () => {
    const head =
      `To: =?utf-8?B?${b64('Ann <not-this@example.test>')}?= <ann@example.test>, "Doe, Bob" <bob@example.test>\r\n` +
      'Cc: Team: "c,d"@example.test, dave@example.test (Dave);, =?utf-8?Q?Zo=C3=AB?= <zoe@example.test>\r\n';
    const rcpts = [
      'ann@example.test',
      'bob@example.test',
      '"c,d"@example.test',
      'dave@example.test',
      'zoe@example.test',
    ];
    const reply = await sendHead(head, rcpts, 'readable');
    expect(reply.code).toBe(250);
    expect([...delivered('readable')[0]!.recipients].sort()).toEqual([...rcpts].sort());
  });
});

describe('an ambiguous 451 is not a duplicate later', () => {
  const DATE = 'Date: Mon, 23 Nov 2026 10:00:00 +0000\r\n';
  /** A message as msmtp, mailx or cron send it: no Message-ID (and, from a bare script, no Date either). */
  const bare = (subject: string, date: string) =>
    `From: cron@example.test\r\nTo: ops@example.test\r\nSubject: ${subject}\r\n${date}\r\nbackup done\r\n`;
  async function send(port: number, message: string) {
    const dialog = await openData(['ops@example.test'], port);
    dialog.write(`${message}.\r\n`);
    return dialog.reply();
  }
  const sent = (subject: string) => emu.messages().filter((m) => m.subject === subject);
  const copies = (subject: string) => emu.mailbox('ops@example.test').filter((c) => c.subject === subject);

  /** The upload reaches the service, which delivers it, but its answer is lost: the relay answers 451. */
  async function loseTheAnswer(message: string, subject: string) {
    proxy.setAnswerDelay(5_000);
    const reply = await send(lossy.port, message);
    expect(reply.code).toBe(451);
    expect(reply.text).toMatch(/^4\.4\.2 /);
    await eventually(() => sent(subject).length === 1);
    proxy.setAnswerDelay(0);
    return sent(subject)[0]!;
  }

  it.each([
    ['with a Date (msmtp, mailx, cron)', DATE],
    ['without a Date either (a bare script)', ''],
  ])(
    'a message without Message-ID %s, retried after the answer was lost: delivered once, under a Message-ID the relay added',
    async (label, date) => {
      const subject = `lost answer ${label}`;
      const message = bare(subject, date);
      const first = await loseTheAnswer(message, subject);
      const retry = await send(lossy.port, message);
      expect(retry.code).toBe(250);
      expect(retry.text).toBe(`2.0.0 Ok: ${first.id}`);
      expect(copies(subject)).toHaveLength(1);
      expect(first.messageId).toMatch(/^<[0-9a-f]{32}\.eml-api-relay@example\.test>$/);
      // The field is added last in the header section; nothing else changes.
      const [head, ...rest] = message.split('\r\n\r\n');
      expect(first.raw.toString()).toBe([`${head}\r\nMessage-ID: ${first.messageId}`, ...rest].join('\r\n\r\n'));
    },
  );

  it('with a Date, the retry may reach another relay (or this one after a restart): delivered once', async () => {
    const subject = 'lost answer, retried elsewhere';
    const first = await loseTheAnswer(bare(subject, DATE), subject);
    const retry = await send(relay.port, bare(subject, DATE));
    expect(retry.text).toBe(`2.0.0 Ok: ${first.id}`);
    expect(copies(subject)).toHaveLength(1);
  });

  it('a message past the spool threshold (spooled to a file) gets its Message-ID too, every byte of its body kept', async () => {
    const subject = 'large, no Message-ID';
    const body = Array.from({ length: 12_000 }, (_, i) => `line ${i} ${'x'.repeat(60)}`).join('\r\n');
    const message = `From: cron@example.test\r\nTo: ops@example.test\r\nSubject: ${subject}\r\n${DATE}\r\n${body}\r\n`;
    expect(Buffer.byteLength(message)).toBeGreaterThan(512 * 1024);
    expect((await send(relay.port, message)).code).toBe(250);
    const [copy] = copies(subject);
    expect(copy!.messageId).toMatch(/^<[0-9a-f]{32}\.eml-api-relay@example\.test>$/);
    expect(copy!.raw.toString()).toBe(message.replace('\r\n\r\n', `\r\nMessage-ID: ${copy!.messageId}\r\n\r\n`));
  });

  it('a message without Message-ID or Date whose client left before the 250 (it never read it) is delivered once when retried', async () => {
    const subject = 'reply never read';
    emu.setFaults({ latencyMs: 500 });
    try {
      // The client writes the message and goes (its own timeout) while the service takes its time.
      const dialog = await openData(['ops@example.test']);
      dialog.write(`${bare(subject, '')}.\r\n`);
      dialog.close();
      await eventually(() => sent(subject).length === 1);
    } finally {
      emu.setFaults(undefined);
    }
    const first = sent(subject)[0]!;
    const retry = await send(relay.port, bare(subject, ''));
    expect(retry.code).toBe(250);
    expect(retry.text).toBe(`2.0.0 Ok: ${first.id}`);
    expect(copies(subject)).toHaveLength(1);
  });

  it('a message without Message-ID or Date sent again after a 250 (an hourly alert) is delivered again, under a new Message-ID', async () => {
    const subject = 'disk almost full';
    expect((await send(relay.port, bare(subject, ''))).code).toBe(250);
    expect((await send(relay.port, bare(subject, ''))).code).toBe(250);
    expect(copies(subject)).toHaveLength(2);
    expect(new Set(copies(subject).map((c) => c.messageId)).size).toBe(2);
  });
});

describe('the Message-ID the relay adds tells a recipient nothing of the hidden recipients', () => {
  /** The relay's identity as it was computed once: SHA-256 of length-prefixed parts, keyed by nothing. */
  const unkeyed = (label: string, ...parts: string[]) => {
    const h = createHash('sha256').update(label);
    for (const part of parts) h.update(`\0${Buffer.byteLength(part)}:${part}`);
    return h.digest('hex');
  };

  it('a To recipient rebuilding it from what it received and a guessed Bcc cannot confirm the guess', async () => {
    const message =
      'From: Payroll <payroll@example.test>\r\nTo: alice@example.test\r\nSubject: Your salary review\r\n' +
      'Date: Mon, 23 Nov 2026 10:00:00 +0000\r\n\r\nHi Alice, see attached.\r\n';
    const { dialog } = await SmtpDialog.open(relay.port);
    opened.push(dialog);
    await dialog.command('EHLO client.example');
    expect((await dialog.command('MAIL FROM:<payroll@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<alice@example.test>')).code).toBe(250);
    expect((await dialog.command('RCPT TO:<lawyer@example.test>')).code).toBe(250);
    expect((await dialog.data(message)).code).toBe(250);
    const [copy] = emu.mailbox('alice@example.test').filter((c) => c.subject === 'Your salary review');
    const raw = copy!.raw.toString('latin1');
    expect(raw).not.toContain('lawyer');
    const added = /^Message-ID: <([0-9a-f]{32})\.eml-api-relay@example\.test>$/m.exec(raw)![1];
    // What Alice can rebuild: the bytes uploaded are hers, less the Message-ID, plus the Bcc field she guesses.
    const [head, body] = raw.split('\r\n\r\n');
    const withoutId = head!.replace(/\r\nMessage-ID: [^\r]*/, '');
    for (const guess of ['hr@example.test', 'lawyer@example.test']) {
      const uploaded = `${withoutId}\r\nBcc: ${guess}\r\n\r\n${body}`;
      const digest = createHash('sha256').update(uploaded).digest('hex');
      const fingerprint = unkeyed('fingerprint', 'payroll@example.test', 'alice@example.test', guess, digest);
      expect(unkeyed('identity', fingerprint, '').slice(0, 32)).not.toBe(added);
    }
  });
});
