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

// ---------------------------------------------------------------------------
// Part 2: a newsletter to a group.
console.log('\n\n##### Newsletter #####');
emu.createGroup('newsletter'); // groups are created in the service's dashboard, not through the API
const client = transporter.transporter instanceof EmlApiTransport ? transporter.transporter.client : undefined;
if (!client) throw new Error('unexpected transport');

const added = await client.addToGroup(
  'newsletter',
  [
    { email: 'ann@customer.example', name: 'Ann', substitutions: { first_name: 'Ann', plan: 'Gold' } },
    { email: 'bob@customer.example', name: 'Bob', substitutions: { first_name: 'Bob', plan: 'Basic' } },
    { email: 'old@mailbox.invalid', name: 'Olga', substitutions: { first_name: 'Olga', plan: 'Basic' } },
    'not-an-address',
  ],
  { onFailure: 'SKIP' },
);
console.log(`addToGroup: added ${added.added.join(', ')}`);
for (const s of added.skipped) console.log(`addToGroup: skipped ${JSON.stringify(s.email)}: ${s.reason}`);
console.log(
  `Members: ${emu
    .members('newsletter')
    .map((m) => m.email)
    .join(', ')}`,
);

const news = await transporter.sendMail({
  from: '"Acme News" <news@acme.example>',
  subject: '{{first_name}}, your {{plan}} plan news',
  html: '<p>Hello {{first_name}},</p><p>news for {{plan}} members.</p><img src="cid:logo@acme"><p><a href="{{unsubscribe}}">Unsubscribe</a></p>',
  text: 'Hello {{first_name}}, news for {{plan}} members.\nUnsubscribe: {{unsubscribe}}',
  attachments: [{ filename: 'logo.png', content: PIXEL, cid: 'logo@acme' }],
  group: 'newsletter',
});
console.log(`\nGroup send: ${news.response}, ${JSON.stringify(news.apiResponse)}`);
console.log('(old@mailbox.invalid is undeliverable: the service removed it from the group)');
console.log(
  `Members now: ${emu
    .members('newsletter')
    .map((m) => m.email)
    .join(', ')}`,
);

for (const address of ['ann@customer.example', 'bob@customer.example']) {
  const copy = emu.mailbox(address).at(-1)!;
  const headers = copy.raw.toString('latin1').split(/\r?\n\r?\n/, 1)[0]!;
  const listUnsubscribe = /^List-Unsubscribe:(.*(?:\r?\n[ \t].*)*)/im.exec(headers)?.[1]?.replace(/\s+/g, ' ').trim();
  console.log(`\n=== ${address} ===`);
  console.log(`  Subject: ${copy.subject}`);
  console.log(`  text: ${JSON.stringify(copy.text?.trim())}`);
  console.log(`  List-Unsubscribe: ${listUnsubscribe}`);
}

// Bob clicks "Unsubscribe" in his mail client: an RFC 8058 one-click POST to his link.
const bobCopy = emu.mailbox('bob@customer.example').at(-1)!;
const bobLink = /https?:\/\/\S+\/unsubscribe\/[A-Za-z0-9_-]+/.exec(bobCopy.text ?? '')![0];
const unsubscribed = await fetch(bobLink, {
  method: 'POST',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: 'List-Unsubscribe=One-Click',
});
console.log(`\nBob unsubscribed (one-click POST): HTTP ${unsubscribed.status}`);
console.log(`isInGroup(bob): ${await client.isInGroup('newsletter', 'bob@customer.example')}`);
console.log(
  `Members now: ${emu
    .members('newsletter')
    .map((m) => m.email)
    .join(', ')}`,
);

await transporter.close();
await emu.close();
