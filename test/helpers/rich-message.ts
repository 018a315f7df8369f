import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

export const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));

/**
 * A message using every Nodemailer feature a relay user relies on. Built anew
 * for each send because a stream attachment can be read once.
 */
export function richMessage() {
  return {
    from: { name: 'Zoë Ångström, Shop', address: 'shop@example.test' },
    to: ['"Ann Ü. Müller" <ann@example.test>', 'carl@example.test'],
    cc: 'Bob <bob@example.test>',
    bcc: ['hidden@example.test', 'Secret Sam <sam@example.test>'],
    replyTo: 'support@example.test',
    subject: 'Your order ✓ — Übersicht 📦',
    messageId: '<order-1234@example.test>',
    date: new Date('2026-11-20T10:00:00Z'),
    priority: 'high' as const,
    text: 'Hello Ann,\nyour order is on its way.\n\nGrüße',
    html: '<p>Hello <b>Ann</b>,</p><p>your order is on its way.</p><img src="cid:logo@shop"><p>Grüße</p>',
    headers: {
      'X-Campaign': 'autumn',
      'X-Repeated': ['first value', 'second value'],
      'X-Unicode': 'Fußball ⚽',
    },
    list: {
      unsubscribe: [{ url: 'https://example.test/unsub?u=1', comment: 'Unsubscribe' }, 'unsub@example.test'],
      help: 'help@example.test?subject=help',
      id: { url: 'orders.example.test', comment: 'Order notices' },
    },
    icalEvent: {
      method: 'REQUEST',
      filename: 'delivery.ics',
      content:
        'BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Shop//EN\r\nMETHOD:REQUEST\r\nBEGIN:VEVENT\r\nUID:order-1234@example.test\r\nDTSTAMP:20261120T100000Z\r\nDTSTART:20261125T090000Z\r\nDTEND:20261125T100000Z\r\nSUMMARY:Delivery window\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n',
    },
    attachments: [
      { filename: 'invoice.txt', content: Buffer.from('Invoice 1234\nTotal: 42.00 EUR\n') },
      {
        filename: 'notes-ü.txt',
        content: 'Plain string attachment with ünïcödé',
        contentType: 'text/plain; charset=utf-8',
      },
      { filename: 'report.bin', path: `${FIXTURES}report.bin`, contentType: 'application/octet-stream' },
      { filename: 'streamed.csv', content: Readable.from([Buffer.from('id,total\n'), Buffer.from('1234,42.00\n')]) },
      { filename: 'logo.png', path: `${FIXTURES}logo.png`, cid: 'logo@shop' },
    ],
  };
}
