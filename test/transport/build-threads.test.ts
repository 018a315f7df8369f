import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { writeFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defaultSpoolSettings } from '../../src/body/message-spool.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { buildMessage } from '../../src/transport/build-message.js';
import { BuildThreadPool } from '../../src/transport/build-threads/pool.js';
import { BUILD_FIELDS, portableMail } from '../../src/transport/build-threads/portable-mail.js';
import type { NodemailerMail } from '../../src/transport/nodemailer-types.js';
import { rejectionOf, eventually } from '../helpers/async.js';
import { neutralEml, spooledBytes, streamBytes } from '../helpers/eml-bytes.js';
import { corpus, type CorpusContext, type CorpusMessage } from '../helpers/message-corpus.js';
import { capturingLogger, silentLogger } from '../helpers/logger.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';
import { startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js';

/**
 * `buildThreads`: messages built on worker threads are the bytes the sending
 * thread builds (the same Date, Message-ID and boundaries, DKIM included),
 * and the bytes Nodemailer's SMTP transport sends, apart from what is random
 * per build. What a thread cannot reproduce is built on the sending thread,
 * with the reason in the debug log.
 */

type Mailer = (typeof NODEMAILERS)[number]['nodemailer'];

let emu: Emulator;
let smtp: SmtpSink;
let files: Server;
/** Requests to `/stall` are held here and never answered. */
const stalled: { closed: boolean }[] = [];
let context: CorpusContext;
const bigFile = join(tmpdir(), `build-threads-${process.pid}.bin`);

beforeAll(async () => {
  emu = await startEmulator();
  smtp = await startSmtpSink();
  files = createServer((req, res) => {
    if (req.url === '/stall') {
      const entry = { closed: false };
      stalled.push(entry);
      res.on('close', () => (entry.closed = true));
      return;
    }
    res.end(`remote file at ${req.url}\n`);
  });
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
  await writeFile(bigFile, Buffer.alloc(3 * 1024 * 1024, 'q'));
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  context = {
    hrefBase: `http://127.0.0.1:${(files.address() as AddressInfo).port}`,
    bigFile,
    dkimKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
});

afterAll(async () => {
  await emu?.close();
  await smtp?.close();
  files?.closeAllConnections();
  await new Promise((resolve) => files?.close(resolve));
  await rm(bigFile, { force: true });
});

/** The mail Nodemailer hands its transport, compiled with the entry's defaults and plugins. */
function compiled(mailer: Mailer, entry: CorpusMessage): Promise<NodemailerMail> {
  return new Promise((resolve, reject) => {
    const capture = {
      name: 'capture',
      version: '1',
      send(mail: NodemailerMail, callback: (err: Error | null, info: unknown) => void) {
        resolve(mail);
        callback(null, {});
      },
    };
    const transporter = mailer.createTransport(capture as never, entry.defaults as never);
    entry.plugins?.(transporter as never);
    transporter.sendMail(entry.message() as never).catch(reject);
  });
}

const spool = defaultSpoolSettings();
const silent = silentLogger;

describe.each(NODEMAILERS)('$label: a build thread', ({ nodemailer: mailer }) => {
  let pool: BuildThreadPool;
  beforeAll(() => {
    pool = new BuildThreadPool(2, silent);
  });
  afterAll(() => pool.close());

  const entries = () => corpus(context);

  it.each(corpus({ hrefBase: '', bigFile: '', dkimKey: '' }).map((e) => [e.name, e.staysBecause === undefined]))(
    'builds "%s" byte for byte as the sending thread and Nodemailer do (moves: %s)',
    async (name) => {
      const entry = entries().find((e) => e.name === name)!;
      const mail = await compiled(mailer, entry);
      const portable = portableMail(mail);
      if (entry.staysBecause) {
        expect(portable).toMatchObject({ movable: false, reason: expect.stringMatching(entry.staysBecause) });
        return;
      }
      expect(portable, JSON.stringify(portable)).toMatchObject({ movable: true });
      // Nodemailer's own bytes of this very mail, as its SMTP transport reads them (Bcc kept, as the upload does).
      mail.message.keepBcc = true;
      const reference = await streamBytes(mail.message.createReadStream());
      const onThread = await buildMessage(mail, spool, new AbortController().signal, { pool, logger: silent });
      const here = await buildMessage(mail, spool, new AbortController().signal);
      try {
        expect(onThread.onThread).toBe(true);
        expect(here.onThread).toBe(false);
        const threadBytes = await spooledBytes(onThread.spooled);
        // Not a neutralised comparison: the same Date, Message-ID, boundaries and DKIM signature.
        expect(threadBytes.equals(await spooledBytes(here.spooled))).toBe(true);
        expect(threadBytes.equals(reference)).toBe(true);
        expect(onThread.envelope).toEqual(here.envelope);
        expect(onThread.messageId).toBe(here.messageId);
      } finally {
        await onThread.spooled.body.dispose();
        await here.spooled.body.dispose();
      }
    },
  );

  describe('sent through one transport', () => {
    // One transport for every message: a thread starts once (from source it loads tsx, which is slow).
    const logger = capturingLogger();
    let transport: EmlApiTransport;
    beforeAll(() => {
      transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads: 2, logger });
    });
    afterAll(() => transport.close());

    it.each(corpus({ hrefBase: '', bigFile: '', dkimKey: '' }).map((e) => [e.name]))(
      'sends "%s" as Nodemailer sends it over SMTP, apart from what is random per build',
      async (name) => {
        const entry = entries().find((e) => e.name === name)!;
        logger.clear();
        const { lines } = logger;
        const viaApi = mailer.createTransport(transport, entry.defaults as never);
        const viaSmtp = mailer.createTransport(
          { host: '127.0.0.1', port: smtp.port, secure: false, ignoreTLS: true },
          entry.defaults as never,
        );
        entry.plugins?.(viaApi as never);
        entry.plugins?.(viaSmtp as never);
        emu.reset();
        const before = smtp.received.length;
        try {
          await viaSmtp.sendMail(entry.message() as never);
          await viaApi.sendMail(entry.message() as never);
        } finally {
          viaSmtp.close();
          // What this test's Nodemailer listens to on the transport (it forwards log, error, idle and clear).
          transport.removeAllListeners();
        }
        const sending = lines.find((l) => l.message === 'Sending message')!;
        expect(sending.meta.builtOnThread).toBe(entry.staysBecause === undefined);
        const why = lines.find((l) => l.message.startsWith('Building the message on the sending thread'));
        if (entry.staysBecause) expect(why?.meta.reason).toMatch(entry.staysBecause);
        else expect(why).toBeUndefined();
        if (entry.smtpComparable === false) return;
        const uploaded = emu.messages()[0]!.raw;
        const overSmtp = smtp.received[before]!.raw;
        // The upload keeps Bcc (the service removes it); Nodemailer's SMTP build leaves it out (not from a raw message).
        const dropBcc = !/^Bcc:/im.test(overSmtp.toString('latin1'));
        // Each build signs its own Date, Message-ID and boundaries: the signatures are checked in the test above.
        const options = { dropDkim: true, smtpLineBreaks: true };
        expect(neutralEml(uploaded, { ...options, dropBcc })).toBe(neutralEml(overSmtp, options));
      },
    );
  });
});

describe('a build that fails on a thread', () => {
  const message = (to: string, extra: Record<string, unknown> = {}) => ({
    from: 'a@example.test',
    to,
    subject: 'fails',
    text: 'x',
    ...extra,
  });

  // One thread for the refusals below: a thread starts once (from source it loads tsx, which is slow); each
  // refusal leaves it as it was. The sending thread's transport is made anew each time.
  const threadLogger = capturingLogger();
  let threaded: EmlApiTransport;
  beforeAll(() => {
    threaded = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads: 1, logger: threadLogger });
  });
  afterAll(() => threaded.close());
  /** The rejection of `mail` by a transport that builds on the sending thread, then on a build thread. */
  const refusals = async (mail: Record<string, unknown>) => {
    const nodemailer = (await import('nodemailer')).default;
    const logger = capturingLogger();
    const here = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, logger });
    const errors = [await rejectionOf(nodemailer.createTransport(here).sendMail(mail))];
    await here.close();
    threadLogger.clear();
    errors.push(await rejectionOf(nodemailer.createTransport(threaded).sendMail(mail)));
    threaded.removeAllListeners();
    return { errors, logged: [...logger.lines, ...threadLogger.lines] };
  };

  it('fails the send with the error the sending thread gives (EMESSAGE naming the missing file)', async () => {
    const { errors } = await refusals(
      message('missing@example.test', { attachments: [{ path: '/nonexistent/invoice.pdf' }] }),
    );
    expect(errors[1]).toMatchObject({ code: 'EMESSAGE', permanent: true, message: errors[0]!.message });
    expect(errors[1]!.message).toContain('/nonexistent/invoice.pdf');
    expect(emu.mailbox('missing@example.test')).toHaveLength(0);
  });

  it.each([
    ['no From', { from: undefined }],
    ['no recipient', { to: undefined }],
    [
      'an envelope recipient missing from the headers',
      { envelope: { from: 'a@example.test', to: ['eve@example.test'] } },
    ],
    ['a From that is no address', { from: 'a@' }],
  ])(
    'refuses a message with %s as the sending thread does, the envelope checked on the thread',
    async (_label, extra) => {
      const { errors, logged } = await refusals(message('refused@example.test', extra));
      expect(logged.some((l) => l.message.startsWith('Building the message on the sending thread'))).toBe(false);
      expect(errors[0]).toBeInstanceOf(EmlApiError);
      expect(errors[1]).toBeInstanceOf(EmlApiError);
      const fields = (err: Error) => {
        const { code, command, permanent, responseCode } = err as EmlApiError;
        return { code, command, permanent, responseCode, message: err.message };
      };
      expect(fields(errors[1]!)).toEqual(fields(errors[0]!));
      expect(emu.mailbox('refused@example.test')).toHaveLength(0);
    },
  );

  it.each(NODEMAILERS)(
    '$label: fails only that send with ESTREAM when its thread dies; a new thread builds the next one',
    async ({ label, nodemailer: mailer }) => {
      const major = label.replace(/\D+/g, '');
      const logger = capturingLogger();
      const { lines } = logger;
      const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads: 1, logger });
      const transporter = mailer.createTransport(transport);
      // A mail compiled by a stand-in Nodemailer whose tree throws, uncaught, in the thread.
      const mail = await compiled(mailer, { name: 'crash', message: () => message(`crash-${major}@example.test`) });
      const fixture = new URL('../fixtures/crashing-nodemailer/lib/mime-node/index.js', import.meta.url).href;
      const crashing = (await import(fixture)) as { default: (base: unknown) => { prototype: object } };
      Object.setPrototypeOf(mail.message, crashing.default(mail.message.constructor).prototype);
      const unhandled = vi.fn();
      process.on('unhandledRejection', unhandled);
      try {
        const err = await rejectionOf(
          new Promise((resolve, reject) => transport.send(mail as never, (e, info) => (e ? reject(e) : resolve(info)))),
        );
        expect(err).toMatchObject({ code: 'ESTREAM', permanent: false });
        expect(err.message).toContain('build thread crash test');
        expect(lines.some((l) => l.level === 'warn' && l.message === 'A build thread stopped')).toBe(true);
        await transporter.sendMail(message(`after-crash-${major}@example.test`));
        expect(emu.mailbox(`after-crash-${major}@example.test`)).toHaveLength(1);
        expect(lines.filter((l) => l.message === 'Sending message').at(-1)!.meta.builtOnThread).toBe(true);
      } finally {
        process.off('unhandledRejection', unhandled);
        await transport.close();
      }
      expect(unhandled).not.toHaveBeenCalled();
      expect(emu.mailbox(`crash-${major}@example.test`)).toHaveLength(0);
    },
  );

  it.each(NODEMAILERS)(
    '$label: ends with EABORT when aborted while the thread builds; the thread builds on',
    async ({ label, nodemailer: mailer }) => {
      const major = label.replace(/\D+/g, '');
      const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads: 1 });
      const transporter = mailer.createTransport(transport);
      const controller = new AbortController();
      const waiting = stalled.length;
      const sending = transporter.sendMail({
        ...message(`aborted-${major}@example.test`),
        attachments: [{ filename: 'slow.txt', href: `${context.hrefBase}/stall` }],
        signal: controller.signal,
      } as never);
      try {
        // The thread is reading the attachment: the request reached the file server.
        await eventually(() => stalled.length > waiting);
        controller.abort();
        const err = await sending.catch((e: unknown) => e as Error & { code?: string });
        expect(err).toMatchObject({ code: 'EABORT' });
        await transporter.sendMail(message(`after-abort-${major}@example.test`));
        expect(emu.mailbox(`after-abort-${major}@example.test`)).toHaveLength(1);
      } finally {
        await transport.close();
      }
      expect(emu.mailbox(`aborted-${major}@example.test`)).toHaveLength(0);
    },
  );

  it('ends with ETIMEDOUT naming the build when timeouts.total passes while the thread builds', async () => {
    const transport = new EmlApiTransport({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      buildThreads: 1,
      timeouts: { total: 500 },
    });
    const nodemailer = (await import('nodemailer')).default;
    const err = await rejectionOf(
      nodemailer.createTransport(transport).sendMail({
        ...message('slow@example.test'),
        attachments: [{ filename: 'slow.txt', href: `${context.hrefBase}/stall` }],
      }),
    );
    await transport.close();
    expect(err.code).toBe('ETIMEDOUT');
    expect(err.message).toContain('while the message was being built');
  });
});

describe('the build thread pool', () => {
  it('starts threads only when builds need them, reuses them, and ends them with close()', async () => {
    const nodemailer = (await import('nodemailer')).default;
    const pool = new BuildThreadPool(2, silent);
    expect(pool.threads).toBe(0);
    const entry: CorpusMessage = {
      name: 'small',
      message: () => ({ from: 'a@example.test', to: 'b@example.test', subject: 'pool', text: 'x' }),
    };
    const build = async () => {
      const portable = portableMail(await compiled(nodemailer, entry));
      if (!portable.movable) throw new Error(portable.reason);
      return pool.build(portable, new AbortController().signal);
    };
    // One at a time: one thread does it all.
    for (let i = 0; i < 5; i++) expect(await build()).toMatchObject({ kind: 'whole' });
    expect(pool.threads).toBe(1);
    // Several at once: a second thread starts, and no more than the pool's size.
    const results = await Promise.all(Array.from({ length: 6 }, () => build()));
    expect(results.every((r) => r.kind === 'whole')).toBe(true);
    expect(pool.threads).toBe(2);
    await pool.close();
    expect(pool.threads).toBe(0);
  });

  it('sends the threads no API key: none in what is posted to them', async () => {
    const posted: string[] = [];
    const original = Worker.prototype.postMessage;
    const spying = vi.spyOn(Worker.prototype, 'postMessage').mockImplementation(function (this: Worker, ...args) {
      posted.push(
        JSON.stringify(args[0], (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString() : v)),
      );
      return original.apply(this, args);
    });
    const nodemailer = (await import('nodemailer')).default;
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads: 1 });
    try {
      await nodemailer.createTransport(transport).sendMail({
        from: 'a@example.test',
        to: 'keyless@example.test',
        subject: 'no key',
        text: 'x',
        attachments: [{ filename: 'a.bin', content: Buffer.from('attachment bytes') }],
      });
    } finally {
      spying.mockRestore();
      await transport.close();
    }
    expect(posted.some((p) => p.includes('attachment bytes'))).toBe(true);
    expect(posted.filter((p) => p.includes(emu.apiKey))).toEqual([]);
  });
});

describe('the fields a thread carries', () => {
  it.each([
    ['nodemailer 10', 'nodemailer'],
    ['nodemailer 6.9', 'nodemailer6'],
  ])('are every field of mail.data the composer and MailMessage of %s read', (_label, name) => {
    const require = createRequire(import.meta.url);
    const read = new Set<string>();
    for (const module of ['lib/mail-composer', 'lib/mailer/mail-message']) {
      const source = readFileSync(require.resolve(`${name}/${module}`), 'utf8');
      for (const [, key] of source.matchAll(/this\.(?:mail|data)\.([A-Za-z_]\w*)/g)) read.add(key!);
      // The composer's root headers, read as this.mail[key] from a list of header names.
      const list = /\[('from', 'sender'[^\]]*)\]\.forEach/.exec(source)?.[1];
      if (module === 'lib/mail-composer') {
        expect(list).toBeDefined();
        for (const [, header] of list!.matchAll(/'([^']+)'/g)) {
          read.add(header!.replace(/-(\w)/g, (_m, c: string) => c.toUpperCase()));
        }
      }
    }
    expect(read.size).toBeGreaterThan(20);
    expect([...read].filter((key) => !(BUILD_FIELDS as readonly string[]).includes(key))).toEqual([]);
  });
});

describe('the buildThreads option', () => {
  it('takes a whole number, auto or false, and names itself when wrong', () => {
    const base = { apiKey: 'k', baseUrl: 'https://api.example.test' };
    for (const good of [undefined, false, 0, 1, 8, 'auto'] as const) {
      expect(() => new EmlApiTransport({ ...base, buildThreads: good })).not.toThrow();
    }
    for (const bad of [-1, 1.5, 1000, 'many', true, '2']) {
      expect(() => new EmlApiTransport({ ...base, buildThreads: bad as never })).toThrow(
        expect.objectContaining({ code: 'ECONFIG', message: expect.stringMatching(/^Invalid option buildThreads/) }),
      );
    }
    expect(() => new EmlApiTransport({ ...base, buildThread: 2 } as never)).toThrow(/did you mean buildThreads\?/);
  });
});
