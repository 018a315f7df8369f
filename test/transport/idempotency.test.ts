import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { rejectionOf } from '../helpers/async.js';

let emu: Emulator;
let transport: EmlApiTransport;
const transporter = {
  sendMail: (message: Parameters<ReturnType<typeof nodemailer.createTransport>['sendMail']>[0]) =>
    nodemailer.createTransport(transport).sendMail(message),
  close: () => transport.close(),
};

beforeAll(async () => {
  emu = await startEmulator();
  transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
});

afterAll(async () => {
  await transporter.close();
  await emu.close();
});

describe('sendMail({ idempotencyKey })', () => {
  it('carries the caller key, so the same message sent again is delivered once', async () => {
    // A message built once (as the outbox does) is the same bytes on every attempt.
    const raw = await new MailComposer({
      from: 'shop@example.test',
      to: 'idem-ann@example.test',
      subject: 'Receipt',
      text: 'Thank you',
    })
      .compile()
      .build();
    const first = await transporter.sendMail({ raw, idempotencyKey: 'order-1001-receipt' });
    const again = await transporter.sendMail({ raw, idempotencyKey: 'order-1001-receipt' });
    expect(first.idempotencyKey).toBe('order-1001-receipt');
    expect(again.idempotencyKey).toBe('order-1001-receipt');
    expect(again.id).toBe(first.id);
    expect(emu.mailbox('idem-ann@example.test')).toHaveLength(1);
  });

  it('refuses a different message under a used key with EAPI 422 idempotency_key_reused, sending nothing', async () => {
    const message = { from: 'shop@example.test', to: 'idem-bob@example.test', subject: 'Hi', text: 'one' };
    await transporter.sendMail({ ...message, idempotencyKey: 'reused-key' });
    const err = await rejectionOf(transporter.sendMail({ ...message, text: 'two', idempotencyKey: 'reused-key' }));
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(422);
    expect(err.apiCode).toBe('idempotency_key_reused');
    expect(emu.mailbox('idem-bob@example.test')).toHaveLength(1);
  });

  it('refuses a key that cannot be a header value with EMESSAGE before building anything', async () => {
    const err = await rejectionOf(
      transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x', idempotencyKey: 'two\nlines' }),
    );
    expect(err.code).toBe('EMESSAGE');
    expect(err.message).toContain('idempotencyKey');
  });

  it('carries the key on group and tracked sends too', async () => {
    emu.createGroup('idem-news');
    await transporter.sendMail({
      from: 'n@example.test',
      to: 'idem-t@example.test',
      subject: 's',
      html: '<p>x</p>',
      tracking: true,
      idempotencyKey: 'tracked-1',
    });
    const group = await transporter.sendMail({
      from: 'n@example.test',
      subject: 's',
      html: '<p>x</p>',
      group: 'idem-news',
      idempotencyKey: 'group-1',
    });
    expect(group.idempotencyKey).toBe('group-1');
    const tracked = await transporter.sendMail({
      from: 'n@example.test',
      to: 'idem-t@example.test',
      subject: 's',
      html: '<p>x</p>',
      tracking: true,
      idempotencyKey: 'tracked-1',
    });
    expect(tracked.idempotencyKey).toBe('tracked-1');
    expect(emu.mailbox('idem-t@example.test')).toHaveLength(1);
  });
});
