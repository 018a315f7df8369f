/**
 * npm run demo: starts the emulator in-process, sends one message through the
 * transport with HTML, text, an attachment, an inline image, Cc and Bcc, and
 * prints what Nodemailer returned and what each recipient received.
 */
import nodemailer from 'nodemailer';
import { simpleParser } from 'mailparser';
import { EmlApiTransport } from '../src/index.js';
import { startEmulator } from '../src/emulator/index.js';

// A 1x1 transparent PNG, inline through cid:
const PIXEL = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
  'base64',
);

const emu = await startEmulator();
console.log(`Emulator running at ${emu.url}\n`);

const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
await transporter.verify();

const info = await transporter.sendMail({
  from: '"Acme Shop" <shop@acme.example>',
  to: 'Ann Example <ann@customer.example>',
  cc: 'bob@customer.example',
  bcc: 'audit@acme.example',
  subject: 'Your invoice #1042 ✓',
  text: 'Hello Ann,\n\nyour invoice is attached.\n\nAcme',
  html: '<p>Hello <b>Ann</b>,</p><p>your invoice is attached.</p><img src="cid:logo@acme" alt="Acme">',
  attachments: [
    { filename: 'invoice-1042.txt', content: 'Invoice 1042\nTotal: 99.00 EUR\n' },
    { filename: 'logo.png', content: PIXEL, cid: 'logo@acme' },
  ],
  headers: { 'X-Order-Id': '1042' },
});

console.log('sendMail() resolved with:');
console.log(
  JSON.stringify(
    {
      messageId: info.messageId,
      response: info.response,
      envelope: info.envelope,
      accepted: info.accepted,
      rejected: info.rejected,
      id: info.id,
    },
    null,
    2,
  ),
);

const uploaded = emu.messages()[0]!;
console.log(
  `\nThe uploaded EML (${uploaded.raw.length} bytes) carries Bcc: ${/^bcc:/im.test(uploaded.raw.toString('latin1')) ? 'yes' : 'no'}`,
);

for (const address of info.envelope.to) {
  const [copy] = emu.mailbox(address);
  if (!copy) {
    console.log(`\n${address}: nothing delivered`);
    continue;
  }
  const parsed = await simpleParser(copy.raw);
  console.log(`\n=== Mailbox of ${address} ===`);
  for (const line of parsed.headerLines) {
    if (/^(from|to|cc|bcc|message-id|x-order-id)$/i.test(line.key)) console.log(`  ${line.line}`);
  }
  console.log(`  Subject (decoded): ${parsed.subject}`);
  console.log(`  Bcc header present: ${/^bcc:/im.test(copy.raw.toString('latin1')) ? 'yes' : 'no'}`);
  console.log(`  text: ${JSON.stringify(parsed.text?.trim())}`);
  console.log(`  html: ${typeof parsed.html === 'string' ? `${parsed.html.length} characters` : 'none'}`);
  for (const a of parsed.attachments) {
    console.log(
      `  attachment: ${a.filename} (${a.contentType}, ${a.size} bytes${a.cid ? `, inline cid:${a.cid}` : ''})`,
    );
  }
}

await transporter.close();
await emu.close();
