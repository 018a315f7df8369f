import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiTransport, type EmlApiError, type EmlApiTransportOptions } from '../../src/index.js';
import { startEmulator } from '../../src/emulator/index.js';
import { Base64Encoder } from '../../src/body/eml-upload-body.js';
import { eventually } from '../helpers/async.js';
import { startEarlyAnswerServer } from '../helpers/early-answer-server.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';

/** A fixed message of about `size` bytes, so two builds are the same bytes. */
function fixedEml(size: number): Buffer {
  const head =
    'From: a@example.test\r\nTo: b@example.test\r\nBcc: c@example.test\r\nSubject: big\r\nMessage-ID: <big@example.test>\r\n\r\n';
  const line = `${'x'.repeat(74)}\r\n`;
  return Buffer.from(head + line.repeat(Math.ceil(size / line.length)));
}

const expectedBody = (eml: Buffer) => Buffer.from(`{"mail":"${eml.toString('base64')}"}`);

let service: FakeService;
let spoolDir: string;
beforeEach(async () => {
  service = await startFakeService();
  spoolDir = await mkdtemp(join(tmpdir(), 'eml-api-spool-test-'));
});
afterEach(async () => {
  await service.close();
  await rm(spoolDir, { recursive: true, force: true });
});

const transportWith = (spoolThreshold: number, extra: Partial<EmlApiTransportOptions> = {}) =>
  new EmlApiTransport({
    apiKey: 'k',
    baseUrl: service.url,
    spool: { threshold: spoolThreshold, directory: spoolDir },
    retry: { attempts: 3, delay: 5, maxDelay: 50 },
    ...extra,
  });

describe('large messages', () => {
  it('uploads byte-identical bodies whether the message is spooled to disk or kept in memory', async () => {
    const eml = fixedEml(3 * 1024 * 1024);
    for (const threshold of [0, 64 * 1024 * 1024]) {
      const transport = transportWith(threshold);
      await nodemailer.createTransport(transport).sendMail({ raw: eml });
      await transport.close();
    }
    // And through the client: a Buffer (sliced Base64) and a stream in odd chunk sizes (spooled).
    const client = new EmlApiClient({
      apiKey: 'k',
      baseUrl: service.url,
      spool: { threshold: 0, directory: spoolDir },
    });
    await client.sendEml(eml);
    const odd = Array.from({ length: Math.ceil(eml.length / 7919) }, (_, i) => eml.subarray(i * 7919, (i + 1) * 7919));
    await client.sendEml(Readable.from(odd));
    await client.close();
    expect(service.requests).toHaveLength(4);
    const expected = expectedBody(eml);
    for (const request of service.requests) {
      expect(request.headers['content-length']).toBe(String(expected.length));
      expect(request.body.equals(expected)).toBe(true);
    }
  });

  it('resends exactly the same bytes when a spooled message is retried', async () => {
    service.script([{ status: 503 }, { status: 429, headers: { 'retry-after': '0' } }]);
    const eml = fixedEml(2 * 1024 * 1024);
    const transport = transportWith(0);
    await nodemailer.createTransport(transport).sendMail({ raw: eml });
    await transport.close();
    expect(service.requests).toHaveLength(3);
    for (const request of service.requests) expect(request.body.equals(expectedBody(eml))).toBe(true);
  });

  it('really spools: the file exists while the upload is in flight, and is removed after an abort', async () => {
    service.script(['hang']);
    const transport = transportWith(1024);
    const controller = new AbortController();
    const sending = nodemailer
      .createTransport(transport)
      .sendMail({ raw: fixedEml(512 * 1024), signal: controller.signal })
      .catch((e: unknown) => e);
    await eventually(() => service.requests.length > 0);
    const during = await readdir(spoolDir);
    expect(during).toHaveLength(1);
    expect(await readdir(join(spoolDir, during[0]!))).toEqual(['message.eml']);
    controller.abort();
    expect(await sending).toMatchObject({ code: 'EABORT' });
    expect(await readdir(spoolDir)).toEqual([]);
    await transport.close({ abort: true });
  });

  it('removes the spool file after a success and after a failure', async () => {
    const transport = transportWith(0);
    const transporter = nodemailer.createTransport(transport);
    await transporter.sendMail({ raw: fixedEml(100 * 1024) });
    expect(await readdir(spoolDir)).toEqual([]);
    service.script([{ status: 400, body: { error: { code: 'invalid_eml', message: 'no' } } }]);
    await expect(transporter.sendMail({ raw: fixedEml(100 * 1024) })).rejects.toMatchObject({ code: 'EAPI' });
    expect(await readdir(spoolDir)).toEqual([]);
    service.script([], { status: 503 });
    await expect(transporter.sendMail({ raw: fixedEml(100 * 1024) })).rejects.toMatchObject({ responseCode: 503 });
    expect(await readdir(spoolDir)).toEqual([]);
    await transport.close();
  });

  it('removes the spool file when building the message fails half-way', async () => {
    const transport = transportWith(1024);
    let sent = 0;
    const failing = new Readable({
      read() {
        sent++;
        if (sent < 20) this.push(Buffer.alloc(4096, 97));
        else this.destroy(new Error('disk on fire'));
      },
    });
    const err = await nodemailer
      .createTransport(transport)
      .sendMail({
        from: 'a@example.test',
        to: 'b@example.test',
        subject: 's',
        attachments: [{ filename: 'x.bin', content: failing }],
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EMESSAGE' });
    expect(await readdir(spoolDir)).toEqual([]);
    expect(service.requests).toHaveLength(0);
    await transport.close();
  });

  it('delivers a 25 MB attachment through the emulator intact', async () => {
    const emu = await startEmulator();
    const transport = new EmlApiTransport({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      spool: { threshold: 1024 * 1024, directory: spoolDir },
    });
    const attachment = randomBytes(25 * 1024 * 1024);
    await nodemailer.createTransport(transport).sendMail({
      from: 'a@example.test',
      to: 'b@example.test',
      subject: 'big',
      text: 'see attachment',
      attachments: [{ filename: 'big.bin', content: attachment }],
    });
    const [copy] = emu.mailbox('b@example.test');
    expect(copy!.attachments).toEqual([expect.objectContaining({ filename: 'big.bin', size: attachment.length })]);
    expect(await readdir(spoolDir)).toEqual([]);
    await transport.close();
    await emu.close();
  }, 60_000);
});

describe('a service that refuses an upload before reading it all', () => {
  // A server over its body limit answers 413 as soon as it knows, stops reading and resets the
  // connection while the client is still writing: the write fails (EPIPE, ECONNRESET) with the
  // answer already in the socket. It used to be lost (ECONNECTION, retried as "not processed"), so
  // a message that can never be sent was retried; before the fix nearly every one of these failed so.
  it('reads the early 413, whether the message is spooled or in memory: EAPI 413, not retried', async () => {
    const early = await startEarlyAnswerServer(1024 * 1024);
    try {
      for (const threshold of [0, 64 * 1024 * 1024]) {
        const transport = transportWith(threshold, { baseUrl: early.url });
        const transporter = nodemailer.createTransport(transport);
        const eml = fixedEml(6 * 1024 * 1024);
        const codes: string[] = [];
        for (let i = 0; i < 10; i++) {
          const err = (await transporter.sendMail({ raw: eml }).catch((e: unknown) => e)) as EmlApiError;
          codes.push(`${err.code} ${err.responseCode} ${err.apiCode} ${err.permanent}`);
        }
        await transport.close();
        expect(codes).toEqual(Array(10).fill('EAPI 413 payload_too_large true'));
      }
      // One request per send: 413 is permanent, never retried.
      expect(early.answered).toBe(20);
    } finally {
      await early.close();
    }
  });
});

describe.each(NODEMAILERS)('with $label, large Buffer contents', ({ nodemailer: mailer }) => {
  // 1.5 MB of Cyrillic text (sliced: over 1 MiB): Nodemailer picks Base64 for it (QP would take 9 bytes for each 2-byte letter).
  const cyrillic = Buffer.from('Съешь же ещё этих мягких французских булок, да выпей чаю. '.repeat(15_000));
  const message = {
    from: 'a@example.test',
    to: 'b@example.test',
    subject: 'Report',
    messageId: '<same@example.test>',
    date: new Date('2026-01-01T00:00:00Z'),
    text: cyrillic,
    attachments: [
      { filename: 'report.csv', content: cyrillic, contentType: 'text/csv; charset=utf-8' },
      { filename: 'data.bin', content: randomBytes(1_500_000) },
    ],
  };

  it('are uploaded in the same encoding, to the byte, as Nodemailer builds them unsliced', async () => {
    const service = await startFakeService();
    try {
      const reference = await mailer
        .createTransport({ streamTransport: true, buffer: true })
        .sendMail({ ...message, baseBoundary: 'fixed' } as never);
      const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url });
      await mailer.createTransport(transport).sendMail({ ...message, baseBoundary: 'fixed' } as never);
      await transport.close();
      const uploaded = Buffer.from(
        (JSON.parse(service.requests[0]!.body.toString()) as { mail: string }).mail,
        'base64',
      );
      const expected = reference.message as Buffer;
      expect(uploaded.toString().match(/^Content-Transfer-Encoding: .*$/gim)).toEqual(
        expected.toString().match(/^Content-Transfer-Encoding: .*$/gim),
      );
      expect(uploaded.length).toBe(expected.length);
      expect(uploaded.equals(expected)).toBe(true);
    } finally {
      await service.close();
    }
  });

  // 1.7 MB, mostly ASCII with a few accented letters, so Nodemailer picks quoted-printable; a space ends
  // every 192 KiB slice, where Nodemailer 6 writes "=20" in a stream and " " in a whole Buffer.
  const latin = Buffer.from(`${'Café crème, naïve façade; '.repeat(3)}${'word '.repeat(25)}\r\n`.repeat(8_000));
  for (let at = 3 * 64 * 1024 - 1; at < latin.length; at += 3 * 64 * 1024) latin[at] = 0x20;
  /** Quoted-printable decoded: soft line breaks dropped, `=XX` read as the byte XX. */
  const decodeQp = (body: Buffer) => {
    const digit = (c = -1) => (c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1);
    const out = Buffer.alloc(body.length);
    let n = 0;
    for (let i = 0; i < body.length; i++) {
      const [high, low] = body[i] === 0x3d ? [digit(body[i + 1]), digit(body[i + 2])] : [-1, -1];
      if (body[i] === 0x3d && body[i + 1] === 0x0d && body[i + 2] === 0x0a) i += 2;
      else if (high >= 0 && low >= 0) {
        out[n++] = high * 16 + low;
        i += 2;
      } else out[n++] = body[i]!;
    }
    return out.subarray(0, n);
  };
  const bodyOf = (eml: Buffer) => eml.subarray(eml.indexOf('\r\n\r\n') + 4);

  it('are uploaded quoted-printable when Nodemailer picks it: the soft line breaks may fall elsewhere, the content is the same', async () => {
    const service = await startFakeService();
    try {
      const qp = { ...message, text: latin, attachments: [], baseBoundary: 'fixed' };
      const reference = (await mailer.createTransport({ streamTransport: true, buffer: true }).sendMail(qp as never))
        .message as Buffer;
      const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url });
      await mailer.createTransport(transport).sendMail(qp as never);
      await transport.close();
      const uploaded = Buffer.from(
        (JSON.parse(service.requests[0]!.body.toString()) as { mail: string }).mail,
        'base64',
      );
      expect(uploaded.toString().match(/^Content-Transfer-Encoding: .*$/gim)).toEqual([
        'Content-Transfer-Encoding: quoted-printable',
      ]);
      expect(reference.toString().match(/^Content-Transfer-Encoding: .*$/gim)).toEqual([
        'Content-Transfer-Encoding: quoted-printable',
      ]);
      const content = decodeQp(bodyOf(uploaded));
      expect(content.equals(decodeQp(bodyOf(reference)))).toBe(true);
      expect(content.subarray(0, latin.length).equals(latin)).toBe(true);
      expect(
        bodyOf(uploaded)
          .toString('latin1')
          .split('\r\n')
          .every((line) => line.length <= 76),
      ).toBe(true);
    } finally {
      await service.close();
    }
  });
});

describe('streaming Base64', () => {
  it('encodes any chunking of the input exactly like Buffer.toString("base64")', async () => {
    const data = randomBytes(100_003);
    for (const sizes of [[1], [2], [3], [5, 7], [4096], [100_003]]) {
      const chunks: Buffer[] = [];
      for (let at = 0, i = 0; at < data.length; i++) {
        const size = sizes[i % sizes.length]!;
        chunks.push(data.subarray(at, at + size));
        at += size;
      }
      const out: Buffer[] = [];
      for await (const part of Readable.from(chunks).pipe(new Base64Encoder())) out.push(part as Buffer);
      expect(Buffer.concat(out).toString('latin1')).toBe(data.toString('base64'));
    }
  });
});
