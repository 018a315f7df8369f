/** The throughput benchmarks' message: 10 KB of HTML, a text part and a 2 KB attachment. */
import { randomBytes } from 'node:crypto';

const ATTACHMENT = randomBytes(2048);
const HTML = `<html><body>${Array.from({ length: 120 }, (_, i) => `<p>Paragraph ${i}: your order is on its way, thank you for shopping with us.</p>`).join('')}</body></html>`;

/** Message `n` of a run: the same content with its own recipient and subject. */
export const benchMessage = (n: number) => ({
  from: 'Shop <shop@example.test>',
  to: `customer${n % 100}@example.test`,
  subject: `Order ${n}`,
  html: HTML,
  text: 'Your order is on its way.',
  attachments: [{ filename: 'receipt.bin', content: ATTACHMENT }],
});
