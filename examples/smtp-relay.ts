/**
 * The SMTP relay in front of the emulator: an app that still speaks SMTP
 * (here Nodemailer's SMTP transport, standing in for PHP, Django or Postfix)
 * sends with a Bcc, and the relay hands the message to the service.
 *
 *   npx tsx examples/smtp-relay.ts
 */
import nodemailer from 'nodemailer';
import { startEmulator } from 'nodemailer-eml-api/emulator';
import { startEmlApiRelay } from 'nodemailer-eml-api/relay';

const emu = await startEmulator();
// Without apiKey the relay would ask each client to AUTH with its own key as the password.
const relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0 });
console.log(`SMTP relay on ${relay.host}:${relay.port}`);

const smtp = nodemailer.createTransport({ host: relay.host, port: relay.port, ignoreTLS: true });
const info = await smtp.sendMail({
  from: 'Billing <billing@shop.example>',
  to: 'ann@customer.example',
  bcc: 'audit@shop.example', // the SMTP client strips it; the relay adds it back for the service
  subject: 'Your invoice',
  text: 'Hello Ann, your invoice is attached.',
});
console.log(`SMTP reply: ${info.response}`);
for (const address of ['ann@customer.example', 'audit@shop.example']) {
  const [copy] = emu.mailbox(address);
  console.log(`${address} got "${copy?.subject}" (Bcc header visible: ${/^bcc:/im.test(copy?.raw.toString() ?? '')})`);
}

smtp.close();
await relay.close();
await emu.close();
