import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmlApiError } from '../src/index.js';
import { EmlApiTransport, type EmlApiLogger } from '../src/index.js';
import { startEmulator, type Emulator } from '../src/emulator/index.js';
import { closedPort, startFakeService, type FakeService } from './helpers/fake-service.js';

const SECRET = 'sk_live_SECRET_9f8e7d6c';
const FRAGMENT = 'SECRET_9f8e7d6c';

/** Every channel an error can reach a log or a screen through. */
function channels(value: unknown): string[] {
  return [
    String(value),
    JSON.stringify(value) ?? '',
    inspect(value, { depth: Infinity, showHidden: true }),
    value instanceof Error ? (value.stack ?? '') : '',
  ];
}

describe('the API key stays secret', () => {
  let emu: Emulator;
  let service: FakeService;
  const logLines: string[] = [];
  const logger: EmlApiLogger = {
    debug: (meta, message) => logLines.push(inspect([meta, message], { depth: Infinity })),
    info: (meta, message) => logLines.push(inspect([meta, message], { depth: Infinity })),
    warn: (meta, message) => logLines.push(inspect([meta, message], { depth: Infinity })),
    error: (meta, message) => logLines.push(inspect([meta, message], { depth: Infinity })),
  };
  beforeAll(async () => {
    emu = await startEmulator({ apiKeys: [{ key: SECRET, scopes: ['group:insert'] }] });
    service = await startFakeService();
  });
  afterAll(async () => {
    await emu.close();
    await service.close();
  });

  const transportTo = (baseUrl: string, extra: object = {}) =>
    new EmlApiTransport({ apiKey: SECRET, baseUrl, logger, retries: false, ...extra });
  const message = { from: 'a@example.test', to: 'b@example.test', subject: 's', text: 't' };

  it('is not in any error of any failure, nor in the logs', async () => {
    const failures: unknown[] = [];
    const collect = (p: Promise<unknown>) =>
      p.then(
        () => expect.fail('should have failed'),
        (e: unknown) => failures.push(e),
      );

    // 403: the key lacks the sender scope.
    await collect(nodemailer.createTransport(transportTo(emu.url)).sendMail(message));
    // A service that echoes the key in its error body, code and headers.
    service.script([
      {
        status: 401,
        body: { error: { code: `bad_key_${SECRET}`, message: `Key ${SECRET} is unknown` } },
        headers: { 'x-echo': SECRET },
      },
      { status: 500, body: `<html>${SECRET}</html>` },
      'reset-after-body',
      'hang',
    ]);
    await collect(nodemailer.createTransport(transportTo(service.url)).sendMail(message));
    await collect(nodemailer.createTransport(transportTo(service.url)).sendMail(message));
    await collect(nodemailer.createTransport(transportTo(service.url)).sendMail(message));
    await collect(
      nodemailer.createTransport(transportTo(service.url, { timeouts: { response: 100 } })).sendMail(message),
    );
    // Nothing listening.
    const port = await closedPort();
    await collect(nodemailer.createTransport(transportTo(`http://127.0.0.1:${port}`)).sendMail(message));
    // Aborted, refused envelope, unbuildable message, verify.
    const controller = new AbortController();
    controller.abort();
    await collect(nodemailer.createTransport(transportTo(emu.url)).sendMail({ ...message, signal: controller.signal }));
    await collect(
      nodemailer
        .createTransport(transportTo(emu.url))
        .sendMail({ ...message, envelope: { from: 'a@example.test', to: 'x@example.test' } }),
    );
    await collect(
      nodemailer
        .createTransport(transportTo(emu.url))
        .sendMail({ ...message, attachments: [{ path: '/nonexistent' }] }),
    );
    await collect(nodemailer.createTransport(transportTo(emu.url)).verify());

    expect(failures).toHaveLength(10);
    const codes = failures.map((e) => (e as EmlApiError).code);
    expect(codes).toEqual([
      'EAUTH',
      'EAUTH',
      'EAPI',
      'ECONNECTION',
      'ETIMEDOUT',
      'ECONNECTION',
      'EABORT',
      'EENVELOPE',
      'EMESSAGE',
      'EAUTH',
    ]);
    for (const failure of failures) {
      for (const text of channels(failure)) expect(text).not.toContain(FRAGMENT);
    }
    expect(logLines.length).toBeGreaterThan(0);
    for (const line of logLines) expect(line).not.toContain(FRAGMENT);
  });

  it('is not in util.inspect or JSON.stringify of the transport, its client or its options', () => {
    const transport = transportTo(emu.url);
    for (const value of [transport, transport.client, transport.client.options]) {
      for (const text of channels(value)) expect(text).not.toContain(FRAGMENT);
    }
  });

  it('is not echoed by option errors, even when apiKey and baseUrl are swapped', () => {
    const attempts = [
      () => new EmlApiTransport({ apiKey: 'https://api.example.test', baseUrl: SECRET }),
      () => new EmlApiTransport({ apiKey: `${SECRET}\n`, baseUrl: 'https://api.example.test' }),
      () => new EmlApiTransport({ apiKey: SECRET, baseUrl: `http://${SECRET}.example.test` }),
    ];
    for (const attempt of attempts) {
      let error: unknown;
      try {
        attempt();
      } catch (e) {
        error = e;
      }
      expect(error).toMatchObject({ code: 'ECONFIG' });
      for (const text of channels(error)) expect(text).not.toContain(FRAGMENT);
    }
  });

  it('is sent only in the X-API-KEY header, and a redirect is not followed with it', async () => {
    service.script([{ status: 307, headers: { location: `${service.url}/elsewhere` } }]);
    const before = service.requests.length;
    await expect(nodemailer.createTransport(transportTo(service.url)).sendMail(message)).rejects.toMatchObject({
      responseCode: 307,
    });
    const seen = service.requests.slice(before);
    expect(seen).toHaveLength(1);
    expect(seen[0]!.headers['x-api-key']).toBe(SECRET);
    const elsewhere = Object.entries(seen[0]!.headers).filter(
      ([name, v]) => name !== 'x-api-key' && String(v).includes(FRAGMENT),
    );
    expect(elsewhere).toEqual([]);
    expect(seen[0]!.body.toString()).not.toContain(FRAGMENT);
    expect(seen[0]!.url).not.toContain(FRAGMENT);
  });
});
