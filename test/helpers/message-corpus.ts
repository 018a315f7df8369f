import { Readable } from 'node:stream';
import { FIXTURES, richMessage } from './rich-message.js';

/**
 * The messages of the transport's tests, each in a fresh copy (a stream can
 * be read once), for the build-thread parity tests: every shape a build
 * thread must reproduce byte for byte, and the ones it must leave to the
 * sending thread (with the reason it gives).
 */

/** Transporter defaults and plugins a message is sent with. */
export interface CorpusSetup {
  /** createTransport's second argument (DKIM...). */
  defaults?: Record<string, unknown>;
  /** Registers plugins on the transporter. */
  plugins?: (transporter: { use(step: string, plugin: (mail: unknown, done: () => void) => void): unknown }) => void;
}

export interface CorpusMessage extends CorpusSetup {
  name: string;
  message: () => Record<string, unknown>;
  /** Why the message stays on the sending thread (a pattern of the debug log's reason); undefined when it moves. */
  staysBecause?: RegExp;
  /** Whether the message's bytes can be compared with an SMTP build (false: `newline` changes them for SMTP). */
  smtpComparable?: boolean;
}

/** What some messages point at: a local URL and a file larger than a thread's batch. */
export interface CorpusContext {
  /** Answers `GET /<name>` with a few bytes. */
  hrefBase: string;
  /** A 3 MB file. */
  bigFile: string;
  /** A PEM private key for DKIM. */
  dkimKey: string;
}

/** The rich message with its stream attachment given as a Buffer: every feature, and movable. */
export function richMovable(): Record<string, unknown> {
  const rich = richMessage();
  return {
    ...rich,
    attachments: rich.attachments.map((a) =>
      a.filename === 'streamed.csv' ? { filename: a.filename, content: Buffer.from('id,total\n1234,42.00\n') } : a,
    ),
  };
}

const PNG_DATA_URL =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

export function corpus(context: CorpusContext): CorpusMessage[] {
  const dkim = { domainName: 'example.test', keySelector: 'sel1', privateKey: context.dkimKey };
  return [
    { name: 'every feature (rich message, file and Buffer attachments)', message: richMovable },
    {
      name: 'plain text only',
      message: () => ({ from: 'a@example.test', to: 'b@example.test', subject: 'Hi', text: 'Hello' }),
    },
    {
      name: 'HTML only, long non-ASCII lines (quoted-printable)',
      message: () => ({
        from: '"Zoë" <zoe@example.test>',
        to: ['b@example.test', 'Ç <c@example.test>'],
        subject: 'Ünïcödé '.repeat(20),
        html: `<p>${'Grüße aus Köln, '.repeat(40)}</p>`,
      }),
    },
    {
      name: 'alternatives, watchHtml and AMP',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'Parts',
        text: 'text',
        html: '<p>html</p>',
        watchHtml: '<b>watch</b>',
        amp: '<!doctype html><html ⚡4email><head></head><body>amp</body></html>',
        alternatives: [{ contentType: 'text/x-web-markdown', content: '**markdown**' }],
      }),
    },
    {
      name: 'Base64 text and header encodings',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'Grüße',
        text: 'Grüße\r\n'.repeat(50),
        textEncoding: 'base64',
        encoding: 'base64',
      }),
    },
    {
      name: 'raw message with Bcc',
      message: () => ({
        raw: Buffer.from(
          'From: a@example.test\r\nTo: b@example.test\r\nBcc: c@example.test\r\nSubject: raw\r\nMessage-ID: <raw@example.test>\r\n\r\nraw body\r\n',
        ),
        // SMTP needs it (a raw message has no parsed headers); the upload checks it against the headers.
        envelope: { from: 'a@example.test', to: ['b@example.test', 'c@example.test'] },
      }),
    },
    {
      name: 'raw message ending in a bare CR (the final line break completed)',
      message: () => ({
        raw: 'From: a@example.test\r\nTo: b@example.test\r\nSubject: cr\r\nMessage-ID: <cr@example.test>\r\n\r\nends in CR\r',
        envelope: { from: 'a@example.test', to: ['b@example.test'] },
      }),
    },
    {
      name: 'a 1.5 MB Buffer attachment (sliced) and an X-Mailer',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'big buffer',
        text: 'see attachment',
        xMailer: 'Corpus Mailer 1.0',
        attachments: [{ filename: 'big.bin', content: Buffer.alloc(1_500_000, 7) }],
      }),
    },
    {
      name: 'a 3 MB file attachment (streamed back in chunks)',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'big file',
        text: 'see attachment',
        attachments: [{ filename: 'big.bin', path: context.bigFile }],
      }),
    },
    {
      name: 'prepared headers, In-Reply-To, References and a custom envelope',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        cc: 'c@example.test',
        subject: 'Re: thread',
        text: 'reply',
        inReplyTo: '<parent@example.test>',
        references: ['<root@example.test>', '<parent@example.test>'],
        headers: { 'X-Prepared': { prepared: true, value: 'as=is; folded=no' }, 'X-List': ['one', 'two'] },
        envelope: { from: 'bounce@example.test', to: ['b@example.test', 'c@example.test'] },
      }),
    },
    {
      name: 'a data: URL image (attachDataUrls, converted by the compile plugin)',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'inline',
        html: `<p>logo</p><img src="${PNG_DATA_URL}">`,
        attachDataUrls: true,
      }),
    },
    {
      name: 'an attachment from a URL (read by the thread)',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'href',
        text: 'see attachment',
        attachments: [{ filename: 'remote.txt', href: `${context.hrefBase}/remote.txt` }],
      }),
    },
    { name: 'DKIM-signed (createTransport defaults)', message: richMovable, defaults: { dkim } },
    {
      name: 'DKIM per message, with an icalEvent from a file',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'invite',
        text: 'invite',
        icalEvent: { method: 'PUBLISH', path: `${FIXTURES}report.bin` },
        dkim: { ...dkim, headerFieldNames: 'From:To:Subject' },
      }),
    },
    {
      name: 'Unix newlines (newline option)',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'nl',
        text: 'a\r\nb\nc',
        newline: 'unix',
      }),
      smtpComparable: false,
    },
    // The ones that stay on the sending thread.
    { name: 'a stream attachment', message: richMessage, staysBecause: /attachments\[3\]\.content is a stream/ },
    {
      name: 'a stream plugin',
      message: () => ({ from: 'a@example.test', to: 'b@example.test', subject: 'p', text: 'x' }),
      plugins: (transporter) =>
        transporter.use('stream', (mail, done) => {
          (mail as { message: { addHeader(k: string, v: string): void } }).message.addHeader('X-Plugin', 'yes');
          done();
        }),
      staysBecause: /a stream plugin is registered/,
    },
    {
      name: 'a header-key function',
      message: () => ({ from: 'a@example.test', to: 'b@example.test', subject: 'f', text: 'x' }),
      defaults: { normalizeHeaderKey: (key: string) => key.toUpperCase() },
      staysBecause: /normalizeHeaderKey is a function/,
    },
    {
      name: 'a value that is not plain data',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'u',
        text: 'x',
        headers: { 'X-Url': new URL('https://example.test/a') },
      }),
      staysBecause: /headers\.X-Url is a URL/,
    },
    {
      // Nodemailer reads attachment.content by name, enumerable or not; a copy of the enumerable keys would lose it.
      name: 'an attachment whose content is not enumerable',
      message: () => {
        const attachment = { filename: 'hidden.txt' };
        Object.defineProperty(attachment, 'content', { value: 'the attachment text', enumerable: false });
        return { from: 'a@example.test', to: 'b@example.test', subject: 'n', text: 'x', attachments: [attachment] };
      },
      staysBecause: /^attachments\[0\] has non-enumerable properties$/,
    },
    {
      name: 'in-memory contents over 2 MiB',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 'huge',
        text: 'x',
        attachments: [{ filename: 'huge.bin', content: Buffer.alloc(3 * 1024 * 1024, 1) }],
      }),
      staysBecause: /in-memory contents are over 2 MiB/,
    },
    {
      name: 'a text given as a stream',
      message: () => ({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 's',
        text: Readable.from([Buffer.from('streamed text')]),
      }),
      staysBecause: /^text is a stream$/,
    },
  ];
}
