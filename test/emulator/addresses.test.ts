import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiTransport } from '../../src/index.js';
import { checkPath, emulatorApi, eml, expectAccepted, expectError, FROM, mailBody } from '../helpers/emulator-api.js';

/**
 * The contract's "Addresses": what Nodemailer writes and SMTP servers accept
 * (quoted local parts, international addresses) is accepted; control,
 * bidirectional and zero-width characters are refused with 400 invalid_address.
 */

let emu: Emulator;
const { api, post, address } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({ groups: ['addr'] });
});

afterAll(() => emu.close());

const QUOTED = ['"a,b"@good.example', '"john doe"@example.test', '"a\\"b"@example.test', '"@"@example.test'];

describe('addresses the emulator accepts', () => {
  it.each(QUOTED)('delivers to the quoted local part %s in an EML To header', async (address) => {
    expectAccepted(await post('/v1/send/eml', mailBody(eml([`To: ${address}`]))));
    expect(emu.mailbox(address)).toHaveLength(1);
  });

  it('delivers a message Nodemailer built for a quoted local part, sent through the transport', async () => {
    const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
    const info = await transporter.sendMail({ from: 'shop@example.test', to: '"x,y"@quoted.example', text: 'hi' });
    expect(info.accepted).toEqual(['"x,y"@quoted.example']);
    expect(emu.mailbox('"x,y"@quoted.example')).toHaveLength(1);
    transporter.close();
  });

  it('accepts quoted local parts and international addresses in JSON sends and group members', async () => {
    const to = [{ email: '"a,b"@json.example' }, { email: 'ünïcode@exämple.test' }];
    expectAccepted(await api('POST', '/v1/send/email', { to, from: FROM, subject: 's', textContent: { text: 'x' } }));
    expect(emu.mailbox('"a,b"@json.example')).toHaveLength(1);
    expect(emu.mailbox('ünïcode@exämple.test')).toHaveLength(1);
    const added = await api('POST', '/v1/group/addr', { entries: [{ email: '"m,n"@group.example' }] });
    expect(added.status, added.text).toBe(200);
    expect(emu.members('addr').map((m) => m.email)).toContain('"m,n"@group.example');
  });
});

const FORBIDDEN: [string, string][] = [
  ['NUL', '\u0000'],
  ['BEL', '\u0007'],
  ['DEL', '\u007f'],
  ['NEL (C1)', '\u0085'],
  ['RIGHT-TO-LEFT OVERRIDE', '\u202e'],
  ['ZERO WIDTH SPACE', '\u200b'],
  ['BYTE ORDER MARK', '\ufeff'],
];

describe('addresses the emulator refuses with 400 invalid_address', () => {
  it.each(FORBIDDEN)('refuses %s in an EML To header, delivering to no one', async (_name, ch) => {
    const answer = await post('/v1/send/eml', mailBody(eml([`To: a${ch}b@forbidden.example`])));
    expect(expectError(answer, 400, 'invalid_address')).toMatch(/To header contains/);
    expect(emu.mailbox('ab@forbidden.example')).toHaveLength(0);
    expect(emu.mailbox(`a${ch}b@forbidden.example`)).toHaveLength(0);
  });

  it.each(FORBIDDEN)('refuses %s in JSON sends, group adds and removes', async (_name, ch) => {
    const email = `a${ch}b@forbidden.example`;
    const send = await api('POST', '/v1/send/email', {
      to: [{ email }],
      from: FROM,
      subject: 's',
      textContent: { text: 'x' },
    });
    expect(expectError(send, 400, 'invalid_address')).toContain('to[0].email contains');
    const add = await api('POST', '/v1/group/addr', { entries: [{ email }] });
    expect(expectError(add, 400, 'invalid_address')).toContain('entries[0].email contains');
    expectError(await api('DELETE', '/v1/group/addr', { email }), 400, 'invalid_address');
  });

  it.each(FORBIDDEN)('refuses %s in the address of a membership check, as the client does', async (_name, ch) => {
    const message = expectError(
      await api('GET', checkPath('addr', `a${ch}b@forbidden.example`)),
      400,
      'invalid_address',
    );
    expect(message).toContain('contains');
  });

  it.each([
    ['no @', 'not-an-address'],
    ['no domain', 'a@'],
    ['no local part', '@b.example'],
    ['an unquoted space', 'a b@example.test'],
    ['263 characters', `${'x'.repeat(250)}@example.test`],
  ])('refuses an address with %s in a membership check, as a remove does', async (_label, email) => {
    expectError(await api('GET', checkPath('addr', email)), 400, 'invalid_address');
    expectError(await api('DELETE', '/v1/group/addr', { email }), 400, 'invalid_address');
  });
});

describe('display names the emulator refuses with 400 invalid_address, as the client does', () => {
  it.each(FORBIDDEN)('refuses %s in a display name of JSON sends and group adds', async (_name, ch) => {
    const name = `Ann${ch}Smith`;
    const to = address('name-to');
    const send = await api('POST', '/v1/send/email', {
      to: [{ email: to, name }],
      from: FROM,
      subject: 's',
      textContent: { text: 'x' },
    });
    expect(expectError(send, 400, 'invalid_address')).toContain('to[0].name contains');
    const from = await api('POST', '/v1/send/email', {
      to: [{ email: to }],
      from: { email: FROM.email, name },
      subject: 's',
      textContent: { text: 'x' },
    });
    expect(expectError(from, 400, 'invalid_address')).toContain('from.name contains');
    expect(emu.mailbox(to)).toHaveLength(0);
    const member = address('name-member');
    const add = await api('POST', '/v1/group/addr', { entries: [{ email: member, name }] });
    expect(expectError(add, 400, 'invalid_address')).toContain('entries[0].name contains');
    expect(emu.members('addr').map((m) => m.email)).not.toContain(member);
  });

  it('refuses a display name longer than a header line (998 characters) and accepts one of 998', async () => {
    const long = 'n'.repeat(999);
    const send = await api('POST', '/v1/send/email', {
      to: [{ email: address('long-name'), name: long }],
      from: FROM,
      subject: 's',
      textContent: { text: 'x' },
    });
    expect(expectError(send, 400, 'invalid_address')).toContain('to[0].name is longer than 998');
    const add = await api('POST', '/v1/group/addr', { entries: [{ email: address('long-member'), name: long }] });
    expect(expectError(add, 400, 'invalid_address')).toContain('entries[0].name is longer than 998');
    expectAccepted(
      await api('POST', '/v1/send/email', {
        to: [{ email: address('max-name'), name: long.slice(1) }],
        from: FROM,
        subject: 's',
        textContent: { text: 'x' },
      }),
    );
  });

  it('accepts a tab and non-ASCII letters in a display name', async () => {
    const to = address('tab-name');
    expectAccepted(
      await api('POST', '/v1/send/email', {
        to: [{ email: to, name: 'Zoë\tÅström' }],
        from: FROM,
        subject: 's',
        textContent: { text: 'x' },
      }),
    );
    expect(emu.mailbox(to)).toHaveLength(1);
  });
});
