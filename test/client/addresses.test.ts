import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiClient } from '../../src/index.js';
import { rejectionOf } from '../helpers/async.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';

/** The client checks addresses before any request: the contract's "Addresses". */

let service: FakeService;
let client: EmlApiClient;

beforeAll(async () => {
  service = await startFakeService();
  client = new EmlApiClient({ apiKey: 'k', baseUrl: service.url });
});

afterAll(async () => {
  await client.close();
  await service.close();
});

const FORBIDDEN: [string, string][] = [
  ['NUL', '\u0000'],
  ['BEL', '\u0007'],
  ['DEL', '\u007f'],
  ['NEL (C1)', '\u0085'],
  ['RIGHT-TO-LEFT OVERRIDE', '\u202e'],
  ['LEFT-TO-RIGHT ISOLATE', '\u2066'],
  ['ZERO WIDTH SPACE', '\u200b'],
  ['BYTE ORDER MARK', '\ufeff'],
];
const content = { text: 'x' };

describe('addresses the client refuses with EMESSAGE, sending nothing', () => {
  it.each(FORBIDDEN)('refuses %s in any address argument', async (_label, ch) => {
    service.clear();
    const address = `a${ch}b@example.test`;
    const calls = [
      client.sendEmail({ from: 'shop@example.test', to: address, subject: 's', textContent: content }),
      client.sendEmail({ from: `Shop <${address}>`, to: 'ann@example.test', subject: 's', textContent: content }),
      client.sendEmail({ from: { name: 'Shop', address }, to: 'ann@example.test', subject: 's', textContent: content }),
      client.addToGroup('news', [{ email: address }]),
      client.removeFromGroup('news', address),
      client.isInGroup('news', address),
    ];
    for (const call of calls) {
      const err = await rejectionOf(call);
      expect(err.code).toBe('EMESSAGE');
      expect(err.message).toMatch(
        /contains (the control character|the bidirectional control|the zero-width character) U\+/,
      );
    }
    expect(service.requests).toHaveLength(0);
  });

  it('refuses an address input longer than 998 characters before parsing it', async () => {
    const err = await rejectionOf(
      client.sendEmail({
        from: `${'x'.repeat(2000)} <shop@example.test>`,
        to: 'a@example.test',
        subject: 's',
        textContent: content,
      }),
    );
    expect(err.code).toBe('EMESSAGE');
    expect(err.message).toContain('more than the 998');
  });
});

describe('addresses the client reads as Nodemailer does', () => {
  it('sends display names, quoted local parts and lists in the forms Nodemailer accepts', async () => {
    service.clear();
    await client.sendEmail({
      from: '"Doe, Jane" <jane@example.test>',
      to: 'Ann <ann@example.test>, "x,y"@quoted.example, Team: b@example.test, c@example.test;',
      subject: 's',
      textContent: content,
    });
    const body = JSON.parse(service.requests[0]!.body.toString()) as { from: unknown; to: unknown };
    expect(body.from).toEqual({ email: 'jane@example.test', name: 'Doe, Jane' });
    expect(body.to).toEqual([
      { email: 'ann@example.test', name: 'Ann' },
      { email: '"x,y"@quoted.example' },
      { email: 'b@example.test' },
      { email: 'c@example.test' },
    ]);
  });
});
