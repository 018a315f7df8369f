import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { emulatorApi, expectError, groupEmail, sendGroupPath, standardEmail } from '../helpers/emulator-api.js';

/**
 * Real HTTP requests against the emulator's POST /v1/send/email (the JSON
 * standard send), checked against SERVICE-SPEC.md part 2.
 */

let emu: Emulator;
const { api, sendEmail, sendEmailOk, copyOf, address } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({ groups: ['newsletter'] });
});

afterAll(() => emu.close());

describe('POST /v1/send/email', () => {
  it('sends one message with every recipient in To and delivers a copy to each', async () => {
    const to = [address('std-a'), address('std-b'), address('std-c')];
    const sent = await sendEmailOk(to, 'Together', { html: '<p>Hi all</p>', text: 'Hi all' });
    expect(sent.recipients).toBe(3);
    const records = emu.messages().filter((m) => m.id === sent.id);
    expect(records).toHaveLength(1);
    expect(records[0]!.recipients).toEqual(to);
    expect(records[0]!.messageId).toBe(sent.messageId);
    for (const recipient of to) {
      const copy = copyOf(recipient, sent.id);
      expect(copy.messageId).toBe(sent.messageId);
      const parsed = await simpleParser(copy.raw);
      expect([parsed.to ?? []].flat().flatMap((a) => a.value.map((v) => v.address))).toEqual(to);
      expect(parsed.subject).toBe('Together');
      expect(parsed.text?.trim()).toBe('Hi all');
    }
  });

  it('does not deliver to a .invalid recipient and records it in failed', async () => {
    const good = address('std-good');
    const bad = address('std-bad', 'nowhere.invalid');
    const sent = await sendEmailOk([good, bad], 'Partly', { text: 'Hi' });
    const record = emu.messages().find((m) => m.id === sent.id)!;
    expect(record.failed).toEqual([bad]);
    expect(record.recipients).toEqual([good]);
    expect(emu.mailbox(bad)).toHaveLength(0);
    copyOf(good, sent.id);
  });

  it('records tracking: true on the message, and false when absent', async () => {
    const on = await sendEmailOk([address('track-on')], 'Tracked', { html: '<p>x</p>', tracking: true });
    const off = await sendEmailOk([address('track-off')], 'Untracked', { html: '<p>x</p>' });
    expect(emu.messages().find((m) => m.id === on.id)?.tracking).toBe(true);
    expect(emu.messages().find((m) => m.id === off.id)?.tracking).toBe(false);
  });

  it('refuses more than 50 recipients, its documented limit (400 invalid_request), delivering none; 50 go', async () => {
    const before = emu.messages().length;
    const many = (n: number) => Array.from({ length: n }, (_, i) => address(`limit-${n}-${i}`));
    const tooMany = await sendEmail(many(51), 'Hi', { text: 'Hi' });
    expect(expectError(tooMany, 400, 'invalid_request')).toMatch(/51 recipients; at most 50/);
    expect(emu.messages()).toHaveLength(before);
    await sendEmailOk(many(50), 'Hi', { text: 'Hi' });
  });

  it('names the field in validation errors', async () => {
    const before = emu.messages().length;
    const badTo = await api('POST', '/v1/send/email', {
      ...standardEmail([address('v-ok')], 'Hi', { text: 'Hi' }),
      to: [{ email: address('v-ok') }, { email: 'broken@' }],
    });
    expect(expectError(badTo, 400, 'invalid_address')).toContain('to[1].email');

    const noBody = await sendEmail([address('v-ok')], 'Hi', {});
    const noBodyMessage = expectError(noBody, 400, 'invalid_request');
    expect(noBodyMessage).toContain('textContent');
    expect(noBodyMessage).toMatch(/html or text/);

    const newline = await sendEmail([address('v-ok')], 'Hi\r\nBcc: victim@example.test', { text: 'Hi' });
    expect(expectError(newline, 400, 'invalid_request')).toContain('subject');

    const noTo = await api('POST', '/v1/send/email', { ...standardEmail([], 'Hi', { text: 'Hi' }) });
    expect(expectError(noTo, 400, 'no_recipients')).toContain('to');

    const badFrom = await api('POST', '/v1/send/email', {
      ...standardEmail([address('v-ok')], 'Hi', { text: 'Hi' }),
      from: { email: 'nobody' },
    });
    expect(expectError(badFrom, 400, 'invalid_address')).toContain('from.email');

    const withTo = await api('POST', sendGroupPath('newsletter'), {
      ...groupEmail('Hi', { text: 'Hi' }),
      to: [{ email: address('v-ok') }],
    });
    expect(expectError(withTo, 400, 'invalid_request')).toContain('to');

    expect(emu.messages()).toHaveLength(before);
  });
});
