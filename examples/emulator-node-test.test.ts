/**
 * Using the emulator with Node's own test runner:
 *   node --import tsx --test examples/emulator-node-test.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator, type Emulator } from 'nodemailer-eml-api/emulator';

let emu: Emulator;
before(async () => {
  emu = await startEmulator();
});
after(() => emu.close());

test('the welcome email reaches the new user, and the Bcc copy stays hidden', async () => {
  const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
  await transporter.sendMail({
    from: 'hello@acme.example',
    to: 'ann@customer.example',
    bcc: 'crm@acme.example',
    subject: 'Welcome',
    html: '<h1>Welcome!</h1>',
  });
  assert.equal(emu.mailbox('ann@customer.example').length, 1);
  assert.equal(emu.mailbox('crm@acme.example').length, 1);
  assert.doesNotMatch(emu.mailbox('ann@customer.example')[0]!.raw.toString(), /^bcc:/im);
  transporter.close();
});
