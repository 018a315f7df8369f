/**
 * DKIM signing: Nodemailer signs the message it builds, and the transport
 * uploads exactly those signed bytes.
 *
 *   npx tsx examples/dkim.ts
 */
import { generateKeyPairSync } from 'node:crypto';
import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';

// In production the key comes from your secrets store and its public half is in DNS.
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });

const emu = await startEmulator();
const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }), {
  dkim: {
    domainName: 'acme.example',
    keySelector: '2026',
    privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  },
});

await transporter.sendMail({
  from: 'orders@acme.example',
  to: 'ann@customer.example',
  subject: 'Signed',
  text: 'Hello',
});
const uploaded = emu.messages()[0]!.raw.toString('latin1');
console.log(uploaded.split(/\r?\n/).find((line) => line.startsWith('DKIM-Signature:')));

transporter.close();
await emu.close();
