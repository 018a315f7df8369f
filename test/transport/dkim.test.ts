import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// mailauth verifies DKIM the way receiving servers do; its DNS lookup is replaced
// by a resolver answering with our test key, since there is no DNS here.
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { EmlApiTransport } from '../../src/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';
import { richMovable } from '../helpers/message-corpus.js';
import { richMessage } from '../helpers/rich-message.js';

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const privatePem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const publicB64 = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');

async function verifyDkim(raw: Buffer) {
  const result = await dkimVerify(raw, {
    resolver: async (name: string, type: string) => {
      if (type === 'TXT' && name === 'sel1._domainkey.example.test') return [[`v=DKIM1; k=rsa; p=${publicB64}`]];
      throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    },
  });
  return result.results as { status: { result: string }; signingDomain: string }[];
}

describe.each(
  NODEMAILERS.flatMap((versions) => [
    { ...versions, build: 'on the sending thread', buildThreads: undefined, message: richMessage, onThread: false },
    { ...versions, build: 'on a build thread', buildThreads: 1, message: richMovable, onThread: true },
  ]),
)(
  '$label, signed $build: DKIM from createTransport(transport, { dkim })',
  ({ nodemailer, buildThreads, message, onThread }) => {
    let emu: Emulator;
    const logger = capturingLogger();
    const sending = () =>
      logger
        .at('debug')
        .filter((l) => l.message === 'Sending message')
        .map((l) => l.meta);
    beforeAll(async () => {
      emu = await startEmulator();
      const transporter = nodemailer.createTransport(
        new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, buildThreads, logger }),
        { dkim: { domainName: 'example.test', keySelector: 'sel1', privateKey: privatePem } },
      );
      await transporter.sendMail(message());
      await transporter.close();
    });

    it(`is signed ${onThread ? 'on a build thread' : 'on the sending thread'}`, () => {
      expect(sending()).toEqual([expect.objectContaining({ builtOnThread: onThread })]);
    });
    afterAll(() => emu.close());

    it('uploads the signed message, and the signature verifies', async () => {
      const uploaded = emu.messages()[0]!.raw;
      expect(uploaded.toString('latin1')).toMatch(/^DKIM-Signature: /m);
      const results = await verifyDkim(uploaded);
      expect(results).toHaveLength(1);
      expect(results[0]).toMatchObject({ signingDomain: 'example.test', status: { result: 'pass' } });
    });

    it('still verifies in the delivered copies, where Bcc was removed', async () => {
      for (const address of ['ann@example.test', 'sam@example.test']) {
        const results = await verifyDkim(emu.mailbox(address)[0]!.raw);
        expect(results[0]!.status.result).toBe('pass');
      }
    });

    it('fails verification when a signed header is altered, so the check is real', async () => {
      const altered = Buffer.from(
        emu
          .messages()[0]!
          .raw.toString('latin1')
          .replace(/^Subject: .*$/m, 'Subject: changed'),
        'latin1',
      );
      expect((await verifyDkim(altered))[0]!.status.result).not.toBe('pass');
    });
  },
);
