import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { closedPort } from '../helpers/fake-service.js';
import { NODEMAILERS } from '../helpers/nodemailer-versions.js';

describe.each(NODEMAILERS)('$label: transporter.verify()', ({ nodemailer }) => {
  let emu: Emulator;
  beforeAll(async () => {
    emu = await startEmulator({
      apiKeys: [
        { key: 'k-send', scopes: ['sender'] },
        { key: 'k-groups-only', scopes: ['group:insert', 'group:remove', 'group.sender'] },
      ],
    });
  });
  afterAll(() => emu.close());

  // Retries off: a refused connection would otherwise be retried with backoff (covered in client/retries.test.ts).
  const transporterFor = (apiKey: string, baseUrl = emu.url) =>
    nodemailer.createTransport(new EmlApiTransport({ apiKey, baseUrl, retry: false }));

  it('resolves true for a key with the sender scope, without sending mail', async () => {
    await expect(transporterFor('k-send').verify()).resolves.toBe(true);
    await expect(transporterFor(emu.apiKey).verify()).resolves.toBe(true);
    expect(emu.messages()).toHaveLength(0);
  });

  it('calls back (null, true) when given a callback', async () => {
    const result = await new Promise<unknown[]>((resolve) => {
      transporterFor('k-send').verify((...args: unknown[]) => resolve(args));
    });
    expect(result).toEqual([null, true]);
  });

  it('fails with EAUTH and the 401 when the key is unknown', async () => {
    const err = await transporterFor('not-a-key')
      .verify()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({
      code: 'EAUTH',
      responseCode: 401,
      apiCode: 'invalid_api_key',
      command: 'POST /v1/send/eml',
      permanent: true,
    });
    expect((err as Error).message).toContain('refused the API key');
    expect((err as Error).message).not.toContain('not-a-key');
  });

  it('fails with EAUTH naming the missing scope when the key cannot send', async () => {
    const err = await transporterFor('k-groups-only')
      .verify()
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EAUTH', responseCode: 403, apiCode: 'missing_scope' });
    expect((err as Error).message).toContain('"sender"');
  });

  it('passes the EAUTH error to a callback', async () => {
    const err = await new Promise((resolve) => transporterFor('nope').verify((e: unknown) => resolve(e)));
    expect(err).toMatchObject({ code: 'EAUTH' });
  });

  it('fails with ECONNECTION when nothing listens at the base URL', async () => {
    const port = await closedPort();
    const err = await transporterFor('k-send', `http://127.0.0.1:${port}`)
      .verify()
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ECONNECTION', command: 'POST /v1/send/eml', permanent: false });
    expect((err as Error).message).toContain(`127.0.0.1:${port}`);
  });

  it('fails with EAPI 404 when the base URL points at the wrong path', async () => {
    const err = await transporterFor('k-send', `${emu.url}/not-the-api`)
      .verify()
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EAPI', responseCode: 404, apiCode: 'not_found' });
  });

  it('sends through the same key that verify accepted', async () => {
    const transporter = transporterFor('k-send');
    await transporter.verify();
    await transporter.sendMail({ from: 'a@example.test', to: 'verify@example.test', subject: 's', text: 't' });
    expect(emu.mailbox('verify@example.test')).toHaveLength(1);
  });

  it('refuses a send with a wrong key with EAUTH and delivers nothing', async () => {
    const err = await transporterFor('not-a-key')
      .sendMail({ from: 'a@example.test', to: 'nobody@example.test', subject: 's', text: 't' })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'EAUTH', responseCode: 401 });
    expect(emu.mailbox('nobody@example.test')).toHaveLength(0);
  });
});
