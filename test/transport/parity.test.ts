import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiTransport } from '../../src/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { normalizeMessage } from '../helpers/normalize.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';
import { neutralEml } from '../helpers/eml-bytes.js';
import { richMovable } from '../helpers/message-corpus.js';
import { richMessage } from '../helpers/rich-message.js';
import { startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js';

/**
 * Built on the sending thread (a stream attachment among them), and on build
 * threads (the same message with that attachment as a Buffer, so it moves).
 */
const BUILDS = [
  { build: 'on the sending thread', buildThreads: undefined, message: richMessage, onThread: false },
  { build: 'on build threads', buildThreads: 2, message: richMovable, onThread: true },
];

describe.each(NODEMAILERS.flatMap((versions) => BUILDS.map((build) => ({ ...versions, ...build }))))(
  '$label, built $build: a message with every relay feature',
  ({ nodemailer, buildThreads, message, onThread }) => {
    let emu: Emulator;
    let smtp: SmtpSink;
    const logger = capturingLogger();
    const sending = () =>
      logger
        .at('debug')
        .filter((l) => l.message === 'Sending message')
        .map((l) => l.meta);

    beforeAll(async () => {
      emu = await startEmulator();
      smtp = await startSmtpSink();
      const viaSmtp = nodemailer.createTransport({
        host: '127.0.0.1',
        port: smtp.port,
        secure: false,
        ignoreTLS: true,
      });
      const viaApi = nodemailer.createTransport(
        new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads, logger }),
      );
      await viaSmtp.sendMail(message());
      await viaApi.sendMail(message());
      viaSmtp.close();
      await viaApi.close();
    });

    it(`is built ${onThread ? 'on a build thread' : 'on the sending thread'}`, () => {
      expect(sending()).toEqual([expect.objectContaining({ builtOnThread: onThread })]);
    });

    it('uploads the bytes Nodemailer sends over SMTP, apart from the random part of its boundaries and Bcc', () => {
      // Message-ID and Date are fixed by the message; SMTP's DATA makes bare line feeds CRLF.
      const options = { keepIds: true, smtpLineBreaks: true };
      expect(neutralEml(emu.messages()[0]!.raw, { ...options, dropBcc: true })).toBe(
        neutralEml(smtp.received[0]!.raw, options),
      );
    });

    afterAll(async () => {
      await emu?.close();
      await smtp?.close();
    });

    it('reaches every To, Cc and Bcc recipient, as the SMTP envelope does', () => {
      const expected = smtp.received[0]!.to.map((a) => a.toLowerCase()).sort();
      expect(expected).toEqual(
        ['ann@example.test', 'bob@example.test', 'carl@example.test', 'hidden@example.test', 'sam@example.test'].sort(),
      );
      expect(
        emu
          .messages()[0]!
          .recipients.map((a) => a.toLowerCase())
          .sort(),
      ).toEqual(expected);
      for (const address of expected) expect(emu.mailbox(address)).toHaveLength(1);
    });

    it('delivers the same parsed content as the SMTP relay, headers and attachments included', async () => {
      const fromSmtp = await normalizeMessage(smtp.received[0]!.raw);
      for (const address of ['ann@example.test', 'hidden@example.test']) {
        const fromApi = await normalizeMessage(emu.mailbox(address)[0]!.raw);
        expect(fromApi).toEqual(fromSmtp);
      }
      // Guard against comparing two empty parses: the features are really there.
      expect(fromSmtp.subject).toBe('Your order ✓ — Übersicht 📦');
      expect(fromSmtp.from).toEqual([{ name: 'Zoë Ångström, Shop', address: 'shop@example.test' }]);
      expect(fromSmtp.to.map((a) => a.name)).toEqual(['Ann Ü. Müller', '']);
      expect(fromSmtp.headerLines).toEqual(expect.arrayContaining(['X-Priority: 1 (Highest)', 'Importance: High']));
      expect(fromSmtp.messageId).toBe('<order-1234@example.test>');
      expect(fromSmtp.html).toContain('cid:logo@shop');
      expect(fromSmtp.headerLines.filter((l) => l.startsWith('X-Repeated:'))).toEqual([
        'X-Repeated: first value',
        'X-Repeated: second value',
      ]);
      expect(fromSmtp.headerLines.some((l) => l.startsWith('X-Unicode:'))).toBe(true);
      expect(fromSmtp.headerLines.some((l) => l.startsWith('List-Unsubscribe:'))).toBe(true);
      expect(fromSmtp.headerLines.some((l) => l.startsWith('List-Help:'))).toBe(true);
      expect(fromSmtp.headerLines.some((l) => l.startsWith('List-ID:'))).toBe(true);
      const names = fromSmtp.attachments.map((a) => a.filename);
      expect(names).toEqual(
        expect.arrayContaining([
          'invoice.txt',
          'notes-ü.txt',
          'report.bin',
          'streamed.csv',
          'logo.png',
          'delivery.ics',
        ]),
      );
      expect(fromSmtp.attachments.find((a) => a.filename === 'report.bin')!.size).toBe(20000);
      expect(fromSmtp.attachments.find((a) => a.filename === 'logo.png')).toMatchObject({
        cid: 'logo@shop',
        related: true,
      });
      expect(fromSmtp.attachments.some((a) => a.contentType === 'text/calendar')).toBe(true);
    });

    it('keeps Bcc in the upload but no delivered copy shows it', async () => {
      const uploaded = await normalizeMessage(emu.messages()[0]!.raw);
      expect(uploaded.bcc.map((a) => a.address)).toEqual(['hidden@example.test', 'sam@example.test']);
      for (const address of [
        'ann@example.test',
        'bob@example.test',
        'carl@example.test',
        'hidden@example.test',
        'sam@example.test',
      ]) {
        const raw = emu.mailbox(address)[0]!.raw.toString('latin1');
        expect(raw).not.toMatch(/^bcc:/im);
        expect(raw).not.toContain('sam@example.test>');
      }
    });

    it('answers with the Message-ID of the EML and the accepted recipients', () => {
      const [message] = emu.messages();
      expect(message!.messageId).toBe('<order-1234@example.test>');
      expect(message!.endpoint).toBe('/v1/send/eml');
    });
  },
);
