/**
 * A newsletter to a group: members with substitutions, one personalised copy
 * each, an unsubscribe link the service hosts. Runs against a local emulator.
 *
 *   npx tsx examples/newsletter.ts
 */
import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';

const emu = await startEmulator({ groups: ['newsletter'] });
const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
const transporter = nodemailer.createTransport(transport);

await transport.client.addToGroup('newsletter', [
  { email: 'ann@customer.example', name: 'Ann', substitutions: { first_name: 'Ann' } },
  { email: 'bob@customer.example', name: 'Bob', substitutions: { first_name: 'Bob' } },
]);

const info = await transporter.sendMail({
  from: '"Acme News" <news@acme.example>',
  subject: '{{first_name}}, our autumn news',
  html: '<p>Hi {{first_name}},</p><p>…</p><p><a href="{{unsubscribe}}">Unsubscribe</a></p>',
  text: 'Hi {{first_name}},\n…\nUnsubscribe: {{unsubscribe}}',
  group: 'newsletter',
});
console.log(`Group send: ${info.response}`, info.apiResponse);
for (const member of emu.members('newsletter')) {
  console.log(`${member.email} got: ${emu.mailbox(member.email)[0]?.subject}`);
}

await transport.close();
await emu.close();
