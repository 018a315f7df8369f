import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

describe('custom envelopes', () => {
  let emu: Emulator;
  const logger = capturingLogger();
  beforeAll(async () => {
    emu = await startEmulator();
  });
  afterAll(() => emu.close());

  const transporter = () =>
    nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, logger }));

  it('rejects an envelope with recipients the headers lack, with EENVELOPE and nothing sent', async () => {
    const err = await transporter()
      .sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        subject: 'x',
        text: 'x',
        envelope: { from: 'shop@example.test', to: ['ann@example.test', 'audit@example.test'] },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'EENVELOPE', permanent: true });
    expect((err as Error).message).toContain('in the envelope only: audit@example.test');
    expect(emu.messages()).toHaveLength(0);
  });

  it('rejects an envelope that leaves out a header recipient', async () => {
    const err = await transporter()
      .sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        cc: 'bob@example.test',
        subject: 'x',
        text: 'x',
        envelope: { from: 'shop@example.test', to: 'ann@example.test' },
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EENVELOPE' });
    expect((err as Error).message).toContain('in the headers only: bob@example.test');
    expect(emu.messages()).toHaveLength(0);
  });

  it('accepts an envelope with the same recipients in another order and case', async () => {
    const info = await transporter().sendMail({
      from: 'shop@example.test',
      to: 'ann@example.test',
      bcc: 'Eve@Example.test',
      subject: 'same',
      text: 'x',
      envelope: { from: 'shop@example.test', to: ['eve@example.test', 'ANN@example.test'] },
    });
    expect(info.accepted).toEqual(['eve@example.test', 'ANN@example.test']);
    expect(emu.mailbox('eve@example.test')).toHaveLength(1);
  });

  it('accepts an envelope sender that differs from From and logs that it is not used', async () => {
    logger.clear();
    const info = await transporter().sendMail({
      from: 'shop@example.test',
      to: 'ann@example.test',
      subject: 'bounce',
      text: 'x',
      envelope: { from: 'bounces@example.test', to: 'ann@example.test' },
    });
    expect(info.envelope.from).toBe('bounces@example.test');
    expect(logger.messages('info', 'warn', 'error').some((m) => m.includes('Envelope sender differs from From'))).toBe(
      true,
    );
  });

  it('rejects a message without any recipient with EENVELOPE before any request', async () => {
    const before = emu.messages().length;
    const err = await transporter()
      .sendMail({ from: 'shop@example.test', subject: 'x', text: 'x' })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EENVELOPE' });
    expect((err as Error).message).toContain('No recipients defined');
    expect(emu.messages().length).toBe(before);
  });

  const RAW = 'From: shop@example.test\r\nTo: ann@example.test\r\nSubject: raw\r\n\r\nHello\r\n';

  it('rejects raw with to/cc/bcc naming other people than its headers, with EENVELOPE and nothing sent', async () => {
    const before = emu.messages().length;
    for (const extra of [{ to: 'bob@example.test' }, { cc: 'bob@example.test' }, { bcc: 'bob@example.test' }]) {
      const err = await transporter()
        .sendMail({ raw: RAW, ...extra })
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'EENVELOPE', permanent: true });
      expect((err as Error).message).toContain('bob@example.test');
    }
    expect(emu.messages().length).toBe(before);
    expect(emu.mailbox('bob@example.test')).toHaveLength(0);
  });

  it('sends raw with to/cc/bcc that name exactly its header recipients', async () => {
    const info = await transporter().sendMail({ raw: RAW, to: 'Ann <ANN@example.test>' });
    expect(info.accepted).toEqual(['ANN@example.test']);
    expect(emu.mailbox('ann@example.test').at(-1)!.subject).toBe('raw');
  });

  it.each([
    ['no From at all', { to: 'ann@example.test', subject: 'x', text: 'x' }],
    ['a From without an address', { from: 'Shop', to: 'ann@example.test', subject: 'x', text: 'x' }],
    ['a raw message without From', { raw: 'To: ann@example.test\r\nSubject: x\r\n\r\nx\r\n' }],
    // Nodemailer's envelope takes its sender from these when From gives none.
    ['no From, a Reply-To', { replyTo: 'help@example.test', to: 'ann@example.test', subject: 'x', text: 'x' }],
    ['no From, a Sender', { sender: 'bulk@example.test', to: 'ann@example.test', subject: 'x', text: 'x' }],
    [
      'a From without an address, a Reply-To',
      { from: 'Shop', replyTo: 'help@example.test', to: 'ann@example.test', subject: 'x', text: 'x' },
    ],
  ])('refuses %s with EMESSAGE before any request', async (_label, message) => {
    const before = emu.messages().length;
    const err = await transporter()
      .sendMail(message)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'EMESSAGE', permanent: true });
    expect((err as Error).message).toContain('From');
    expect(emu.messages().length).toBe(before);
  });
});
