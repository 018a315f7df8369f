/**
 * Real SMTP clients nobody on this project wrote (Python's smtplib, curl,
 * Nodemailer's SMTP transport) send through the relay to the emulator. What
 * each sent arrives unchanged (byte for byte what smtp-server, the reference
 * SMTP server, receives from the same client, bare line ends made CRLF), to
 * exactly the envelope recipients, with Bcc hidden.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js';
import { curlSend, smtplibSend } from './relay-harness.js';

let emu: Emulator;
let sink: SmtpSink;
/** Clients AUTH with their own key (the emulator's). */
let authRelay: EmlApiRelay;
/** Holds the emulator's key; loopback clients send without AUTH. */
let keyRelay: EmlApiRelay;
let dir: string;

beforeAll(async () => {
  emu = await startEmulator();
  sink = await startSmtpSink();
  authRelay = await startEmlApiRelay({ baseUrl: emu.url, port: 0, retry: false });
  keyRelay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false });
  dir = await mkdtemp(join(tmpdir(), 'relay-clients-'));
});
afterAll(async () => {
  await authRelay?.close();
  await keyRelay?.close();
  await sink?.close();
  await emu?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The copies the emulator delivered for one accepted message, by mailbox. */
function deliveredCopies(messageId: string) {
  const message = emu.messages().find((m) => m.messageId === messageId);
  expect(message, `message ${messageId} accepted`).toBeDefined();
  return {
    message: message!,
    copies: message!.recipients.map((r) => ({
      to: r,
      copies: emu.mailbox(r).filter((c) => c.messageId === messageId),
    })),
  };
}

/** Every envelope recipient got exactly one copy equal to `expected`, with no Bcc header. */
function expectDelivered(messageId: string, envelope: string[], expected: Buffer): void {
  const { message, copies } = deliveredCopies(messageId);
  const lower = (list: string[]) => list.map((a) => a.toLowerCase()).sort();
  expect(lower(message.recipients)).toEqual(lower(envelope));
  for (const { to, copies: got } of copies) {
    expect(got, to).toHaveLength(1);
    expect(got[0]!.raw.toString('latin1')).not.toMatch(/^bcc:/im);
    expect(got[0]!.raw.equals(expected), `${to} got the bytes the client sent`).toBe(true);
  }
}

describe("Python's smtplib", () => {
  const spec = (n: number, extra: Record<string, unknown> = {}) => ({
    host: '127.0.0.1',
    from: 'Shop <shop@example.test>',
    to: ['Ann <ann@example.test>'],
    cc: ['bob@example.test'],
    bcc: ['audit@example.test'],
    subject: `Invoice ${n}: größer als €100`,
    body: `Hello Ann,\n.\nA line with a leading dot above, and UTF-8: größer, €, 日本.\n`,
    message_id: `<py-${n}@example.test>`,
    date: 'Mon, 23 Nov 2026 10:00:00 +0000',
    ...extra,
  });

  it('send_message with Bcc (which it strips): delivered unchanged to every recipient, Bcc included and hidden', async () => {
    const reference = await smtplibSend({ ...spec(1), port: sink.port });
    expect(reference.error).toBeUndefined();
    const viaSink = sink.received.at(-1)!;
    expect(viaSink.raw.equals(Buffer.from(reference.sent, 'base64'))).toBe(true);
    expect(viaSink.raw.toString('latin1')).not.toMatch(/^bcc:/im);

    const result = await smtplibSend({ ...spec(1), port: authRelay.port, user: 'django', password: emu.apiKey });
    expect(result.error).toBeUndefined();
    expect(result.refused).toEqual({});
    expect(result.features).toEqual(expect.arrayContaining(['8bitmime', 'smtputf8', 'pipelining', 'size', 'auth']));
    expectDelivered('<py-1@example.test>', viaSink.to, viaSink.raw);
    expect(emu.mailbox('audit@example.test').at(-1)!.subject).toBe('Invoice 1: größer als €100');
  });

  it('an internationalised recipient (SMTPUTF8, IDN domain) is matched and delivered', async () => {
    const s = spec(2, { to: ['jörg@bücher.example'], cc: [], bcc: ['Zoë@Example.test'] });
    const reference = await smtplibSend({ ...s, port: sink.port });
    expect(reference.error).toBeUndefined();
    const result = await smtplibSend({ ...s, port: keyRelay.port });
    expect(result.error).toBeUndefined();
    expectDelivered('<py-2@example.test>', sink.received.at(-1)!.to, sink.received.at(-1)!.raw);
  });
});

describe('curl as an SMTP client', () => {
  const message = (id: string, lineBreak: string) =>
    [
      'From: Monitor <monitor@example.test>',
      'To: ops@example.test',
      'Subject: disk almost full',
      `Message-ID: <${id}@example.test>`,
      'Date: Mon, 23 Nov 2026 10:00:00 +0000',
      '',
      '/var is 93% full.',
      '.hidden files included',
      '',
    ].join(lineBreak);

  it.each([
    ['CRLF', '\r\n'],
    ['bare LF', '\n'],
  ])(
    'uploads a %s file to To plus an envelope-only recipient: delivered unchanged (bare LF lines as CRLF lines), the extra one as Bcc',
    async (label, lineBreak) => {
      const id = `curl-${label.replace(/\W/g, '')}`;
      const file = join(dir, `${id}.eml`);
      await writeFile(file, message(id, lineBreak));
      const rcpts = ['--mail-rcpt', 'ops@example.test', '--mail-rcpt', 'oncall@example.test'];
      const reference = await curlSend([
        `smtp://127.0.0.1:${sink.port}`,
        '--mail-from',
        'monitor@example.test',
        ...rcpts,
        '--upload-file',
        file,
      ]);
      expect(reference.exitCode).toBe(0);
      const viaSink = sink.received.at(-1)!;

      const sent = await curlSend([
        `smtp://127.0.0.1:${authRelay.port}`,
        '--user',
        `monitor:${emu.apiKey}`,
        '--mail-from',
        'monitor@example.test',
        ...rcpts,
        '--upload-file',
        file,
      ]);
      expect(sent.exitCode).toBe(0);
      const accepted = emu.messages().find((m) => m.messageId === `<${id}@example.test>`)!;
      expect(sent.replies).toContain(`250 2.0.0 Ok: ${accepted.id}`);
      // curl sends the file's line ends as they are; the relay makes them CRLF (smtpd_forbid_bare_newline = normalize).
      const crlf = Buffer.from(viaSink.raw.toString('latin1').replace(/\r?\n/g, '\r\n'), 'latin1');
      expect(crlf.equals(viaSink.raw)).toBe(lineBreak === '\r\n');
      expectDelivered(`<${id}@example.test>`, viaSink.to, crlf);
      // The service saw the envelope-only recipient as Bcc; its copy does not show it.
      expect(accepted.raw.toString('latin1')).toMatch(/^Bcc: oncall@example\.test\r?$/m);
    },
  );
});

describe("Nodemailer's SMTP transport", () => {
  it('a pooled transport with Bcc, three messages at once: delivered unchanged, Bcc hidden', async () => {
    const mail = (n: number) => ({
      from: 'Shop <shop@example.test>',
      to: 'ann@example.test',
      bcc: ['audit@example.test', 'archive@example.test'],
      subject: `Order ${n}`,
      text: 'Your order is on its way.',
      messageId: `<nm-${n}@example.test>`,
      date: new Date('2026-11-23T10:00:00Z'),
      headers: { 'X-Order': String(n) },
    });
    const reference = nodemailer.createTransport({ host: '127.0.0.1', port: sink.port, ignoreTLS: true });
    await reference.sendMail(mail(1));
    reference.close();
    const viaSink = sink.received.at(-1)!;

    const transporter = nodemailer.createTransport({
      host: '127.0.0.1',
      port: authRelay.port,
      pool: true,
      maxConnections: 2,
      ignoreTLS: true,
      auth: { user: 'shop', pass: emu.apiKey },
    });
    const infos = await Promise.all([1, 2, 3].map((n) => transporter.sendMail(mail(n))));
    transporter.close();
    for (const info of infos) expect(info.response).toMatch(/^250 2\.0\.0 Ok: msg_/);
    expect(infos[0]!.accepted).toEqual(['ann@example.test', 'audit@example.test', 'archive@example.test']);
    expectDelivered('<nm-1@example.test>', viaSink.to, viaSink.raw);
    expect(emu.mailbox('archive@example.test').map((c) => c.messageId)).toEqual(
      expect.arrayContaining(['<nm-1@example.test>', '<nm-2@example.test>', '<nm-3@example.test>']),
    );
  });
});
