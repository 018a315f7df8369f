/**
 * Using the emulator in your own Vitest suite: your app's mailer sends through
 * the transport, and the test reads the mailbox.
 */
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator, type Emulator } from 'nodemailer-eml-api/emulator';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator(); // 127.0.0.1, a free port
});
beforeEach(() => emu.reset());
afterAll(() => emu.close());

// Your app would build this from its config (EML_API_URL / EML_API_KEY).
const mailer = () => nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));

it('sends the password reset email', async () => {
  await mailer().sendMail({
    from: 'no-reply@acme.example',
    to: 'ann@customer.example',
    subject: 'Reset your password',
    text: 'Use this link: https://acme.example/reset/abc',
  });
  const [email] = emu.mailbox('ann@customer.example');
  expect(email?.subject).toBe('Reset your password');
  expect(email?.text).toContain('/reset/abc');
});
