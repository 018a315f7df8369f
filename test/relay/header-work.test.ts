/**
 * Reading a header section is bounded in work, not only in bytes: the
 * address fields are capped in entries (empty groups included), words and
 * characters, counted while they are read, and the reading is done in
 * slices of the event loop, so that a client sending 1 MiB header sections
 * does not hold up the greetings of the others or the health port.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { serviceAddressReaders } from '../../src/relay/relay-headers.js';
import { SmtpDialog, type Reply } from './relay-harness.js';

const MiB = 1024 * 1024;

let emu: Emulator;
let relay: EmlApiRelay;

beforeAll(async () => {
  emu = await startEmulator();
  relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false, http: { port: 0 } });
});
afterAll(async () => {
  await relay?.close();
  await emu?.close();
});

/** `lines` repeated until the header section is about `size` bytes, after a From field. */
function section(line: (i: number) => string, size = MiB - 4096): string {
  const parts = ['From: shop@example.test'];
  let length = parts[0]!.length;
  for (let i = 0; length < size; i++) {
    const next = line(i);
    parts.push(next);
    length += next.length + 2;
  }
  return parts.join('\r\n');
}

/** The 1 MiB shapes of the review, and what each is answered. */
const SHAPES: { name: string; head: () => string; reply: RegExp }[] = [
  {
    name: 'a To field of 340,000 empty groups',
    head: () => `From: shop@example.test\r\nTo: ${'g:;'.repeat(340_000)}`,
    reply: /^554 5\.6\.0 .*hold more than 65536 characters/,
  },
  {
    name: 'the same folded over 17,000 lines',
    head: () => section((i) => (i === 0 ? 'To: g:;' : ` ${'g:;'.repeat(20)}`)),
    reply: /^554 5\.6\.0 .*hold more than 65536 characters/,
  },
  {
    name: '1,200 empty groups, within the characters',
    head: () => `From: shop@example.test\r\nTo: ${'g:;'.repeat(1200)}, ann@example.test`,
    reply: /^554 5\.6\.0 .*hold more than 1000 entries \(addresses and groups\)/,
  },
  {
    name: '55,000 times the one recipient',
    head: () => `From: shop@example.test\r\nTo: ${'ann@example.test, '.repeat(55_000)}ann@example.test`,
    reply: /^554 5\.6\.0 .*hold more than 65536 characters/,
  },
  {
    name: '50,000 To fields',
    head: () => section(() => 'To: ann@example.test'),
    reply: /^554 5\.6\.0 .*hold more than 1000 entries/,
  },
  {
    name: 'a display name of 1 MiB',
    head: () => `From: shop@example.test\r\nTo: "${'n'.repeat(MiB - 200)}" <ann@example.test>`,
    reply: /^554 5\.6\.0 .*hold more than 65536 characters/,
  },
  {
    name: '12,000 comments',
    head: () => `From: shop@example.test\r\nTo: ann@example.test${' (c)'.repeat(12_000)}`,
    reply: /^554 5\.6\.0 .*hold more than 10240 words, separators and comments/,
  },
  {
    name: 'a From of 1 MiB',
    head: () => `From: ${'shop@example.test, '.repeat(50_000)}\r\nTo: ann@example.test`,
    reply: /^554 5\.6\.0 .*hold more than 65536 characters/,
  },
  {
    name: '2,500 From fields, each with an xn-- domain (mailparser would be asked about each)',
    head: () => `${'From: shop@xn--80ak6aa92e.com\r\n'.repeat(2500)}To: ann@example.test`,
    reply: /^554 5\.6\.0 .*more than 10 From fields/,
  },
  {
    name: '100,000 other fields (read, and sent)',
    head: () => section((i) => `X-Field-${i}: v`),
    reply: /^250 2\.0\.0 Ok: msg_/,
  },
  {
    name: 'a Subject folded over 100,000 lines (read, and sent)',
    head: () => `To: ann@example.test\r\n${section((i) => (i === 0 ? 'Subject: x' : ' x'))}`,
    reply: /^250 2\.0\.0 Ok: msg_/,
  },
];

/** Opens a session and sends one message with `head` to ann@example.test; resolves with the reply to its final dot. */
async function sendHead(head: string, id: string): Promise<{ reply: Reply; dialog: SmtpDialog }> {
  const { dialog } = await SmtpDialog.open(relay.port);
  await dialog.command('EHLO client.example');
  expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
  expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
  const reply = await dialog.data(Buffer.from(`${head}\r\nMessage-ID: <${id}@example.test>\r\n\r\nhi\r\n`, 'latin1'));
  return { reply, dialog };
}

describe('header sections of 1 MiB', () => {
  it('each shape is answered for what it is, while other clients keep being greeted', async () => {
    const sending = SHAPES.map(async ({ name, head, reply }, i) => {
      const { reply: got, dialog } = await sendHead(head(), `shape-${i}`);
      dialog.close();
      return { name, reply: `${got.code} ${got.text}`, expected: reply };
    });
    let done = false;
    const all = Promise.all(sending).finally(() => (done = true));
    // Newcomers connect one after another while the shapes are read: each is greeted.
    const greetings: number[] = [];
    while (!done) {
      const { dialog, greeting } = await SmtpDialog.open(relay.port);
      greetings.push(greeting.code);
      dialog.close();
    }
    for (const { name, reply, expected } of await all)
      expect([name, reply]).toEqual([name, expect.stringMatching(expected)]);
    expect(greetings.length).toBeGreaterThan(0);
    expect(new Set(greetings)).toEqual(new Set([220]));
    const sent = emu.messages().map((m) => m.messageId);
    expect(SHAPES.map((s, i) => sent.includes(`<shape-${i}@example.test>`))).toEqual(
      SHAPES.map((s) => s.reply.source.startsWith('^250')),
    );
  });

  it('a client connecting while a header section is read is greeted, and /healthz answered, before that message is', async () => {
    // 700 To fields of one recipient with a display name (within every limit), then a Cc the relay refuses: the
    // reading takes some 2,000 steps (dozens of turns of the event loop) through every field, then answers 554 at once.
    const fields = Array.from({ length: 700 }, (_, i) => `To: "Customer number ${i} of the shop" <ann@example.test>`);
    const head = ['From: shop@example.test', ...fields, 'Cc: Nobody'].join('\r\n');
    const order: string[] = [];
    let newcomer: Promise<void> | undefined;
    // A probe: the newcomer connects, and /healthz is asked, from inside the relay's reading (its first run of a
    // parser of the service's side), the one moment this test cannot otherwise see.
    const [reader] = serviceAddressReaders();
    const read = reader!.read;
    reader!.read = (value) => {
      newcomer ??= Promise.all([
        SmtpDialog.open(relay.port).then(({ dialog, greeting }) => {
          order.push(`greeting ${greeting.code}`);
          dialog.close();
        }),
        fetch(`http://127.0.0.1:${relay.http!.port}/healthz`).then((res) => void order.push(`healthz ${res.status}`)),
      ]).then(() => undefined);
      return read.call(reader, value);
    };
    try {
      const { reply, dialog } = await sendHead(head, 'while-reading');
      order.push(`message ${reply.code}`);
      expect(reply.text).toMatch(/^5\.6\.0 .*the Cc header has an entry with no address/);
      dialog.close();
      await newcomer;
    } finally {
      reader!.read = read;
    }
    expect(order.slice(0, 2).sort()).toEqual(['greeting 220', 'healthz 200']);
    expect(order[2]).toBe('message 554');
  });
});
