/**
 * A transactional email (an order confirmation) through the EML endpoint: the
 * same sendMail call an app makes with an SMTP relay.
 *
 * Run against the emulator: `npx eml-api serve`, then
 *   EML_API_URL=http://127.0.0.1:8025 EML_API_KEY=<printed key> npx tsx examples/transactional.ts
 */
import nodemailer from 'nodemailer';
import { EmlApiError, EmlApiTransport } from 'nodemailer-eml-api';

const transporter = nodemailer.createTransport(
  new EmlApiTransport({
    apiKey: process.env.EML_API_KEY ?? '',
    baseUrl: process.env.EML_API_URL ?? 'http://127.0.0.1:8025',
    // Retry what surely was not processed; time limits per attempt and per call.
    retry: { attempts: 4 },
    timeouts: { response: 15_000, total: 60_000 },
  }),
);

try {
  const info = await transporter.sendMail({
    from: '"Acme Shop" <orders@acme.example>',
    to: 'Ann Example <ann@customer.example>',
    bcc: 'archive@acme.example',
    subject: 'Order #1042 confirmed',
    text: 'Thank you for your order #1042.',
    html: '<p>Thank you for your order <b>#1042</b>.</p><img src="cid:logo">',
    attachments: [
      { filename: 'invoice-1042.txt', content: 'Invoice 1042\nTotal: 99.00 EUR\n' },
      {
        filename: 'logo.png',
        cid: 'logo',
        content: Buffer.from(
          'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
          'base64',
        ),
      },
    ],
    headers: { 'X-Order-Id': '1042' },
  });
  console.log(`Sent ${info.messageId}: ${info.response} (service id ${info.id})`);
} catch (err) {
  if (err instanceof EmlApiError && err.mayHaveBeenAccepted) {
    console.error('The service may have accepted the message; check before sending again:', err.message);
  } else {
    console.error('Not sent:', err instanceof Error ? err.message : err);
  }
  process.exitCode = 1;
} finally {
  transporter.close();
}
