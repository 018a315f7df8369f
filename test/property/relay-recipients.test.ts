/**
 * Property-based tests (fast-check) of the relay's central promise: mail
 * goes only to the envelope's recipients. The service reads recipients from
 * the To, Cc and Bcc headers with its own parser (the emulator's is
 * mailparser), so the relay and the service must never read a message's
 * recipients differently. For header sections of every shape (folding,
 * encoded words in names and where addresses stand, groups, comments —
 * nested, escaped, unbalanced, holding addresses and separators — quoted
 * strings, `;` in quoted strings and comments inside groups, obsolete syntax,
 * duplicate fields, mixed and bare line ends, white space before the colon,
 * lines that are no field, IDN and Unicode spellings, non-ASCII and non-UTF-8
 * bytes), either the relay refuses the message, or:
 *
 * 1. what the relay reads equals what mailparser reads from the bytes the
 *    relay would upload (its header section rewritten, envelope-only
 *    recipients added as Bcc) — thousands of cases, in process;
 * 2. through the real relay over SMTP, the emulator delivers to exactly the
 *    `RCPT TO` recipients — a few hundred cases, each a real SMTP transaction
 *    and upload (one session, reset between cases), with `RCPT TO` short of
 *    some header recipients so that a misreading relay would be caught
 *    mailing them.
 *
 * Mailboxes compare as the emulator delivers: the address mailparser reads
 * (its `xn--` domains decoded), lower-cased; two spellings it keeps apart
 * are two deliveries, however alike they look.
 */
import { createRequire } from 'node:module';
import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import fc from 'fast-check';
import { simpleParser, type AddressObject, type EmailAddress } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { planEnvelope } from '../../src/relay/envelope-plan.js';
import { MessageRewriter } from '../../src/relay/message-rewriter.js';
import { readRelayHeaders } from '../../src/relay/relay-headers.js';
import { SmtpDialog } from '../relay/relay-harness.js';

const PROPERTY_TIMEOUT = 240_000;

// ---------------------------------------------------------------------------
// Header sections of every shape

const b64 = (text: string) => `=?utf-8?B?${Buffer.from(text).toString('base64')}?=`;
const qp = (text: string) =>
  `=?utf-8?Q?${[...Buffer.from(text)].map((b) => (/[A-Za-z0-9]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `=${b.toString(16).toUpperCase().padStart(2, '0')}`)).join('')}?=`;

/** A few mailboxes, so that fields name the same people in different spellings. */
const local = fc.constantFrom(
  'ann',
  'Bob',
  'c.d',
  'e+tag',
  '"f g"',
  '"h,i"',
  '"j\\"k"',
  'jörg',
  'zoë',
  'zoe\u0308',
  '"ann"',
);
const domain = fc.constantFrom(
  'example.test',
  'EXAMPLE.test',
  'bücher.example',
  'xn--bcher-kva.example',
  '[192.0.2.1]',
  'sub.example.test',
);
const addrSpec = fc.tuple(local, domain).map(([l, d]) => `${l}@${d}`);
const listOf = (addresses: string[]) => addresses.map((a) => `<${a}>`).join(', ');
/** Text split over two Base64 encoded words, which decoders join (the white space between them goes). */
const splitB64 = (text: string) => `${b64(text.slice(0, 3))} ${b64(text.slice(3))}`;

const word = fc.constantFrom('Ann', 'Doe', 'Dr.', 'Jörg', 'Müller', "O'Brien", 'x', 'Team', 'Ann\u00a0Doe');
const displayName = fc.oneof(
  fc.array(word, { minLength: 1, maxLength: 3 }).map((w) => w.join(' ')),
  fc.constantFrom('"Doe, Ann"', '"a@evil.test"', '"<evil@example.test>"', '"Ann \\"the\\" Doe"', '""'),
  word.map(b64),
  word.map(qp),
  fc.array(addrSpec, { minLength: 1, maxLength: 3 }).map((a) => b64(listOf(a))),
  addrSpec.map((a) => qp(`<${a}>`)),
  fc.constantFrom('(comment) Ann', 'Ann (x@y.test)'),
  fc.array(addrSpec, { minLength: 1, maxLength: 2 }).map((a) => `"${b64(listOf(a))}"`),
  addrSpec.map((a) => splitB64(`<${a}>`)),
  addrSpec.map((a) => `=?ISO-8859-1?b?${Buffer.from(`<${a}>`, 'latin1').toString('base64')}?=`),
  word.map((w) => `x${b64(w)}`),
);

/**
 * Comments: plain ones, and the shapes Nodemailer's parsers split differently
 * (10.0 ends a comment at the first `)` and takes no escape in it, 10.6 counts
 * nesting): nested, escaped and unbalanced parentheses, addresses, separators
 * and quotes inside.
 */
const plainComment = fc.constantFrom('(Ann)', '(Sales team)', '(desk 4)', '(Jörg)');
const comment = fc.oneof(
  plainComment,
  fc.constantFrom('(a (nested) comment)', '(\\) escaped)', '(<evil@example.test>)'),
  addrSpec.map((a) => `(${a})`),
  addrSpec.map((a) => `(${b64(`<${a}>`)})`),
  addrSpec.map((a) => `(c (d) <${a}>)`),
  addrSpec.map((a) => `(\\) <${a}>)`),
  fc.array(addrSpec, { minLength: 1, maxLength: 3 }).map((a) => `(c (d) ${listOf(a)} (z))`),
  addrSpec.map((a) => `(;<${a}>)`),
  addrSpec.map((a) => `(x, <${a}>; y)`),
  fc.constantFrom('((x)', '(x))', '(x', '("q)', '(a:b)', '(\\(<evil@example.test>)'),
);

/** An entry of an address list that the relay is meant to read. */
const readable = fc.oneof(
  { weight: 6, arbitrary: addrSpec },
  { weight: 6, arbitrary: fc.tuple(displayName, addrSpec).map(([n, a]) => `${n} <${a}>`) },
  { weight: 2, arbitrary: fc.tuple(displayName, addrSpec).map(([n, a]) => `${n}<${a}>`) },
  { weight: 2, arbitrary: addrSpec.map((a) => `<${a}>`) },
  { weight: 2, arbitrary: fc.tuple(addrSpec, plainComment).map(([a, c]) => `${a} ${c}`) },
  { weight: 1, arbitrary: fc.tuple(plainComment, addrSpec).map(([c, a]) => `${c} <${a}>`) },
  { weight: 1, arbitrary: fc.tuple(addrSpec, comment).map(([a, c]) => `${a} ${c}`) },
  { weight: 1, arbitrary: fc.tuple(comment, addrSpec).map(([c, a]) => `${c} <${a}>`) },
  { weight: 1, arbitrary: addrSpec.map((a) => `< ${a} >`) },
);

/** Entries parsers read differently, or that hide addresses. */
const hostile = fc.oneof(
  fc.tuple(comment, addrSpec).map(([c, a]) => `${c} ${a}`),
  fc.tuple(addrSpec, addrSpec).map(([a, b]) => `${a} <${b}>`),
  fc.tuple(addrSpec, addrSpec).map(([a, b]) => `<${a}> <${b}>`),
  fc.tuple(addrSpec, addrSpec).map(([a, b]) => `${a} ${b}`),
  fc.tuple(addrSpec, word).map(([a, w]) => `<${a}> ${w}`),
  addrSpec.map((a) => `<@route.test:${a}>`),
  addrSpec.map((a) => a.replace('@', ' @ ')),
  addrSpec.map((a) => a.replace('@', '(c)@')),
  addrSpec.map((a) => `<${a}`),
  addrSpec.map((a) => `${a}>`),
  addrSpec.map((a) => `"${a}`),
  addrSpec.map((a) => `${a}@extra.test`),
  addrSpec.map((a) => b64(`<${a}>`)),
  addrSpec.map((a) => qp(`<${a}>`)),
  addrSpec.map((a) => qp(a)),
  addrSpec.map((a) => `${qp(a.split('@')[0]!)}@${a.split('@')[1]!}`),
  fc.array(addrSpec, { minLength: 1, maxLength: 4 }).map((a) => b64(listOf(a))),
  fc.array(addrSpec, { minLength: 1, maxLength: 3 }).map((a) => `${b64(listOf(a))} <>`),
  comment,
  word,
  addrSpec.map((a) => splitB64(`<${a}>`)),
  addrSpec.map((a) => `${a}\u0000`),
  fc.constantFrom('<>', '""', '@', 'root', 'a@', '@b.test', '\u202eann@example.test', 'ann\u200b@example.test'),
);

/** One entry of an address list: mostly readable ones, some of every shape parsers read differently. */
const mailbox: fc.Arbitrary<string> = fc.oneof({ weight: 12, arbitrary: readable }, { weight: 1, arbitrary: hostile });

const separator = fc.constantFrom(', ', ',', ';', ' ; ', ',,', ', ,', ',\t');

const groupOf = (entries: string[], name: string, close: string) => `${name}: ${entries.join(', ')}${close}`;

/** Entries written inside a group to end it early for parsers that read `;` in a quoted string or a comment as its end. */
const inGroupOnly = fc.oneof(
  addrSpec.map((a) => `"x;<${a}>" <ann@example.test>`),
  fc.tuple(addrSpec, addrSpec).map(([a, b]) => `${a} (;<${b}>)`),
  addrSpec.map((a) => `"a;b"@${a.split('@')[1]!}`),
  fc.tuple(addrSpec, addrSpec).map(([a, b]) => `"Doe; Ann" <${a}>, <${b}>`),
);
const entry: fc.Arbitrary<string> = fc.oneof(
  { weight: 16, arbitrary: mailbox },
  {
    weight: 3,
    arbitrary: fc
      .tuple(
        fc.array(fc.oneof({ weight: 6, arbitrary: mailbox }, { weight: 1, arbitrary: inGroupOnly }), { maxLength: 3 }),
        fc.oneof(
          word,
          word.map(b64),
          addrSpec.map((a) => b64(`<${a}>`)),
          fc.constantFrom('undisclosed-recipients', '"Team, A"', 'Team (x@y.test)'),
        ),
        fc.constantFrom(';', '', ';;'),
      )
      .map(([m, name, close]) => groupOf(m, name, close)),
  },
  { weight: 1, arbitrary: fc.tuple(mailbox, word, word).map(([m, a, b]) => `${a}: ${b}: ${m};;`) },
);

const addressList = fc
  .tuple(fc.array(entry, { minLength: 0, maxLength: 5 }), fc.array(separator, { minLength: 5, maxLength: 5 }))
  .map(([entries, seps]) => entries.map((e, i) => (i === 0 ? e : `${seps[i % seps.length]}${e}`)).join(''));

/**
 * Folds a value: mostly where it has white space (a fold is a line break before
 * white space), sometimes anywhere, inside a token too (unfolded, it leaves a space there).
 */
const folded = (value: fc.Arbitrary<string>) =>
  fc
    .tuple(
      value,
      fc.array(fc.nat(), { maxLength: 3 }),
      fc.constantFrom('\r\n ', '\r\n\t', '\r\n   ', '\n '),
      fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
    )
    .map(([v, picks, fold, atSpaces]) => {
      const spaces = [...v.matchAll(/ /g)].map((m) => m.index);
      const cuts = atSpaces
        ? picks.map((p) => spaces[p % Math.max(spaces.length, 1)] ?? -1)
        : picks.map((p) => p % (v.length + 1));
      let out = v;
      for (const cut of [...new Set(cuts)].filter((c) => c >= 0).sort((x, y) => y - x)) {
        out =
          out[cut] === ' '
            ? `${out.slice(0, cut)}${fold}${out.slice(cut + 1)}`
            : `${out.slice(0, cut)}${fold}${out.slice(cut)}`;
      }
      return out;
    });

const recipientName = fc.oneof(
  fc.constantFrom('To', 'Cc', 'Bcc'),
  fc.constantFrom('to', 'CC', 'bCC', 'To ', 'Cc\t', 'BCC  ', 'Resent-To', 'Reply-To'),
);
const otherField = fc.oneof(
  fc.constantFrom(
    'Subject: Hello',
    'Subject: =?utf-8?B?SGVsbG8=?=',
    'Subject: Größer, Cc: v@example.test',
    'Date: Mon, 23 Nov 2026 10:00:00 +0000',
    'Message-ID: <m@example.test>',
    'X-Note: To: v@example.test',
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
  ),
);

/** A line that is no field: what a lenient parser skips or joins somewhere. */
const brokenLine = fc.oneof(
  addrSpec.map((a) => `Cc\r\n : ${a}`),
  addrSpec.map((a) => ` Cc: ${a}`),
  addrSpec.map((a) => `Cc ${a}`),
  addrSpec.map((a) => `Cc\v: ${a}`),
  addrSpec.map((a) => `C c: ${a}`),
  addrSpec.map((a) => `Cc\u00a0: ${a}`),
  addrSpec.map((a) => `From ${a} Mon Nov 23 10:00:00 2026`),
  addrSpec.map((a) => `: ${a}`),
  fc.constant('just text'),
);

const line = fc.oneof(
  { weight: 8, arbitrary: fc.tuple(recipientName, folded(addressList)).map(([n, v]) => `${n}: ${v}`) },
  { weight: 1, arbitrary: fc.tuple(recipientName, addressList).map(([n, v]) => `${n}:${v}`) },
  { weight: 3, arbitrary: otherField },
  { weight: 1, arbitrary: brokenLine.chain((l) => fc.constantFrom(l, 'X-Fine: 1')) },
);

const lineEnd = fc.oneof(
  { weight: 16, arbitrary: fc.constant('\r\n') },
  { weight: 1, arbitrary: fc.constant('\n') },
  { weight: 1, arbitrary: fc.constant('\r') },
);

/** A whole header section (From included), as bytes, ending with its blank line, and a body. */
const message = fc
  .record({
    lines: fc.array(fc.tuple(line, lineEnd), { minLength: 1, maxLength: 6 }),
    fromAt: fc.nat(),
    latin1: fc.oneof({ weight: 9, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
  })
  .map(({ lines, fromAt, latin1 }) => {
    const all = lines.map(([l, e]) => `${l}${e}`);
    all.splice(fromAt % (all.length + 1), 0, 'From: Shop <shop@example.test>\r\n');
    // Some senders write their header in Latin-1: bytes that are no UTF-8.
    return Buffer.from(`${all.join('')}\r\nHello\r\n`, latin1 ? 'latin1' : 'utf8');
  });

// ---------------------------------------------------------------------------
// Readings

/**
 * The relay's handling of a message, without the sockets: the rewriter makes
 * its line ends CRLF, the relay reads the recipients of its header section,
 * and plans its upload for the envelope `rcptTo` makes of them (envelope-only
 * recipients added as Bcc). Undefined when the relay refuses the message.
 */
async function relayUpload(
  bytes: Buffer,
  rcptTo: (recipients: string[]) => string[],
): Promise<{ uploaded: Buffer; recipients: string[]; envelope: string[] } | undefined> {
  let recipients: string[] = [];
  let envelope: string[] = [];
  const rewriter = new MessageRewriter(
    (head) => {
      recipients = readRelayHeaders(head).recipients;
      envelope = rcptTo(recipients);
      return planEnvelope(head, envelope).head;
    },
    () => undefined,
  );
  try {
    const uploaded = await buffer(Readable.from([bytes]).pipe(rewriter));
    return { uploaded, recipients, envelope };
  } catch (err) {
    if (err instanceof EmlApiError && err.code === 'EMESSAGE' && err.permanent) {
      const why = /\((?:the \S+ header |header line \d+ )?(\S+ \S+ \S+ \S+)/.exec(err.message)?.[1] ?? err.message;
      reasons.set(why, (reasons.get(why) ?? 0) + 1);
      return undefined;
    }
    throw err;
  }
}

/** What mailparser reads as recipients: every To, Cc and Bcc entry's address, '' for an entry without one. */
async function mailparserRecipients(bytes: Buffer): Promise<string[] | undefined> {
  let parsed;
  try {
    parsed = await simpleParser(bytes, { skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true });
  } catch {
    return undefined;
  }
  const out: string[] = [];
  const walk = (list: EmailAddress[]) => {
    for (const e of list) {
      if (e.group) walk(e.group);
      else out.push(e.address ?? '');
    }
  };
  for (const value of [parsed.to, parsed.cc, parsed.bcc] as (AddressObject | AddressObject[] | undefined)[]) {
    if (!value) continue;
    for (const object of Array.isArray(value) ? value : [value]) walk(object.value);
  }
  return out;
}

// The address parser and the IDN decoder mailparser (the emulator's parser) runs, from its own dependencies.
const fromMailparser = createRequire(createRequire(import.meta.url).resolve('mailparser'));
const mailparserAddresses = fromMailparser('nodemailer/lib/addressparser') as (
  text: string,
) => { address?: string; group?: unknown[] }[];
const mailparserPunycode = fromMailparser('punycode.js') as { toUnicode(domain: string): string };

/**
 * The mailbox the emulator delivers to when an address is written in a To,
 * Cc or Bcc field, as it delivers: mailparser's address parser reads it (and
 * drops quotes no local part needs), mailparser decodes a domain written
 * `@xn--…` to Unicode, and the mailbox is that address lower-cased. Two
 * spellings are one recipient only when they land in one mailbox: a relay
 * that let the service mail `victim@𝐞xample.test` for `RCPT TO:<victim@example.test>`
 * is caught, as is one that read `"f g"@x` where the service reads `fg@x`.
 */
function deliveredMailbox(address: string): string {
  const [entry] = mailparserAddresses(address);
  let read = entry && !entry.group && entry.address ? entry.address : address;
  const at = read.lastIndexOf('@');
  if (/@xn--/.test(read)) {
    try {
      read = read.slice(0, at + 1) + mailparserPunycode.toUnicode(read.slice(at + 1));
    } catch {
      // mailparser keeps a domain it cannot decode as it is
    }
  }
  return read.toLowerCase();
}

/** Whether to keep a header recipient in RCPT TO: mostly, so that many messages go through. */
const mostlyTrue = fc.oneof({ weight: 5, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) });

/** The mailboxes the service delivered to (mailparser's addresses, which the emulator lower-cases), once each. */
const mailboxes = (addresses: string[]) => [...new Set(addresses.map((a) => a.toLowerCase()))].sort();
/** The mailboxes an envelope names: each RCPT TO as the service would deliver it, written into a header. */
const envelopeMailboxes = (addresses: string[]) => [...new Set(addresses.map(deliveredMailbox))].sort();

// ---------------------------------------------------------------------------
// Properties

const reasons = new Map<string, number>();
const stats = { cases: 0, refused: 0, accepted: 0, recipients: 0, smtp: { cases: 0, accepted: 0, refused: 0 } };

afterAll(() => {
  console.log(
    `property-relay-recipients: ${stats.cases} header sections, ${stats.refused} refused by the relay, ` +
      `${stats.accepted} read as mailparser reads them (${stats.recipients} recipients); over SMTP: ${stats.smtp.cases} ` +
      `sessions, ${stats.smtp.accepted} delivered to exactly RCPT TO, ${stats.smtp.refused} refused; ` +
      `refusals: ${[...reasons]
        .sort((a, b) => b[1] - a[1])
        .map(([r, n]) => `${n}× ${r}`)
        .join('; ')}`,
  );
});

describe('the relay reads the recipients mailparser reads, or refuses the message', () => {
  it(
    'for header sections of every shape, with an envelope-only recipient added or not',
    async () => {
      await fc.assert(
        fc.asyncProperty(message, fc.boolean(), async (bytes, extra) => {
          stats.cases++;
          const relay = await relayUpload(bytes, (r) => (extra ? [...r, 'extra@example.test'] : r));
          if (!relay) {
            stats.refused++;
            return;
          }
          const service = await mailparserRecipients(relay.uploaded);
          // mailparser failing on the message is the service refusing it: nobody gets it.
          if (service === undefined) return;
          stats.accepted++;
          stats.recipients += service.length;
          expect(mailboxes(service), JSON.stringify(bytes.toString('latin1'))).toEqual(
            envelopeMailboxes(relay.envelope),
          );
          expect(service.every((a) => a.length > 0)).toBe(true);
        }),
        { numRuns: 4000 },
      );
    },
    PROPERTY_TIMEOUT,
  );
});

describe('through the relay over SMTP, the emulator delivers to exactly RCPT TO, or the relay refuses the message', () => {
  let emu: Emulator;
  let relay: EmlApiRelay;
  let open: SmtpDialog | undefined;

  /** One SMTP session for all the cases (smtp-server holds each greeting 100 ms), transactions reset between them. */
  const session = async (): Promise<SmtpDialog> => {
    if (open && !open.closed) return open;
    open = (await SmtpDialog.open(relay.port)).dialog;
    expect((await open.command('EHLO client.example')).code).toBe(250);
    return open;
  };

  beforeAll(async () => {
    emu = await startEmulator();
    relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false, maxRecipients: 50 });
  });
  afterAll(async () => {
    open?.close();
    await relay?.close();
    await emu?.close();
  });

  it(
    'with RCPT TO short of some header recipients, and with one that only the envelope names',
    async () => {
      await fc.assert(
        fc.asyncProperty(message, fc.array(mostlyTrue, { maxLength: 12 }), fc.boolean(), async (bytes, keep, extra) => {
          stats.smtp.cases++;
          // The envelope: what mailparser reads from the message the service would get, some of it left out.
          const crlf = Buffer.from(bytes.toString('latin1').replace(/\r\n|\r|\n/g, '\r\n'), 'latin1');
          const read = [...new Set((await mailparserRecipients(crlf)) ?? [])];
          const wanted = [...read.filter((_, i) => keep[i] ?? true), ...(extra ? ['extra@example.test'] : [])];
          const dialog = await session();
          expect((await dialog.command('RSET')).code).toBe(250);
          expect((await dialog.command('MAIL FROM:<shop@example.test> SMTPUTF8')).code).toBe(250);
          const rcptTo: string[] = [];
          for (const address of wanted) {
            if (address.length === 0 || /[\r\n]/.test(address)) continue;
            if ((await dialog.command(`RCPT TO:<${address}>`)).code === 250) rcptTo.push(address);
          }
          if (rcptTo.length === 0) {
            expect((await dialog.command('RCPT TO:<fallback@example.test>')).code).toBe(250);
            rcptTo.push('fallback@example.test');
          }
          const before = emu.messages().length;
          const reply = await dialog.data(bytes);
          const added = emu.messages().slice(before);
          if (reply.code !== 250) {
            stats.smtp.refused++;
            expect(added, `${reply.code} ${reply.text}`).toEqual([]);
            return;
          }
          stats.smtp.accepted++;
          // A message sent again (same bytes, same envelope) is the same send to the service: its first answer.
          const id = /^2\.0\.0 Ok: (\S+)$/.exec(reply.text)?.[1];
          const sent = emu.messages().find((m) => m.id === id);
          expect(added.map((m) => m.id)).toEqual(added.length === 0 ? [] : [id]);
          expect(mailboxes(sent!.recipients), JSON.stringify(bytes.toString('latin1'))).toEqual(
            envelopeMailboxes(rcptTo),
          );
        }),
        { numRuns: 600 },
      );
    },
    PROPERTY_TIMEOUT,
  );
});
