import { describe, expect, it } from 'vitest';
import { HeaderSectionFinder, headerSectionEnd } from '../../src/protocol/message-format.js';

/** The one header scanner of the spool and the relay, fed the same bytes in every cut into two and three chunks. */
describe('the header section finder', () => {
  const messages = [
    'From: a@example.test\r\nTo: b@example.test\r\n\r\nbody\r\n',
    'From: a@example.test\nTo: b@example.test\n\nbody\n',
    'From: a@example.test\nTo: b@example.test\r\n\r\nbody',
    'From: a@example.test\r\nSubject: folded\r\n line\r\n\nbody',
    'From: a@example.test\r\nTo: b@example.test\r\n',
    '\r\n\r\nbody only',
  ].map((text) => Buffer.from(text, 'latin1'));

  it('finds the same end as a scan of the whole message, wherever the chunks are cut', () => {
    for (const message of messages) {
      const expected = headerSectionEnd(message);
      for (let i = 0; i <= message.length; i++) {
        for (let j = i; j <= message.length; j += 3) {
          const finder = new HeaderSectionFinder();
          let found: number | undefined;
          for (const chunk of [message.subarray(0, i), message.subarray(i, j), message.subarray(j)]) {
            found ??= finder.push(chunk);
          }
          expect(found, `${JSON.stringify(message.toString('latin1'))} cut at ${i}, ${j}`).toBe(expected);
          // It holds every byte pushed until the end was found, in order.
          const held = finder.take();
          expect(message.subarray(0, held.length).equals(held)).toBe(true);
          expect(finder.size).toBe(0);
        }
      }
    }
  });
});
