import { inspect } from 'node:util';
import nodemailer from 'nodemailer';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { EmlApiError } from '../src/index.js';
import { EmlApiClient, EmlApiTransport } from '../src/index.js';
import { startEmulator, type Emulator } from '../src/emulator/index.js';
import { rejectionOf, thrownBy } from './helpers/async.js';
import { clientFactory } from './helpers/clients.js';
import { closedPort, startFakeService, type FakeService } from './helpers/fake-service.js';
import { capturingLogger } from './helpers/logger.js';

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
  const logger = capturingLogger({ inspect: true });
  beforeAll(async () => {
    emu = await startEmulator({ apiKeys: [{ key: SECRET, scopes: ['group:insert'] }] });
    service = await startFakeService();
  });
  afterAll(async () => {
    await emu.close();
    await service.close();
  });

  const transportTo = (baseUrl: string, extra: object = {}) =>
    new EmlApiTransport({ apiKey: SECRET, baseUrl, logger, retry: false, ...extra });
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
    expect(logger.inspected().length).toBeGreaterThan(0);
    for (const line of logger.inspected()) expect(line).not.toContain(FRAGMENT);
  });

  it('is not in util.inspect or JSON.stringify of the transport, its client or its options', () => {
    const transport = transportTo(emu.url);
    for (const value of [transport, transport.client, transport.client.settings]) {
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

describe('the API key stays secret in what the client reports', () => {
  const API_KEY = 'sk_live_SECRET123';
  const KEY_FRAGMENT = 'SECRET123';
  const EML = 'From: a@example.test\r\nTo: b@example.test\r\nSubject: Hi\r\n\r\nHello ünïcødé\r\n';
  let service: FakeService;
  const { makeClient, closeClients } = clientFactory(() => ({ apiKey: API_KEY, baseUrl: service.url, retry: false }));
  beforeAll(async () => {
    service = await startFakeService();
  });
  beforeEach(() => service.clear());
  afterEach(() => closeClients());
  afterAll(() => service.close());

  function expectNoSecret(err: EmlApiError): void {
    expect(err.message).not.toContain(KEY_FRAGMENT);
    expect(err.response ?? '').not.toContain(KEY_FRAGMENT);
    expect(err.apiCode ?? '').not.toContain(KEY_FRAGMENT);
    expect(String(err.stack)).not.toContain(KEY_FRAGMENT);
    expect(JSON.stringify(err)).not.toContain(KEY_FRAGMENT);
    expect(inspect(err, { depth: 10 })).not.toContain(KEY_FRAGMENT);
  }

  it('redacts the key the service echoes in its error body and message', async () => {
    service.answer({
      status: 401,
      body: {
        error: { code: 'invalid_api_key', message: `The API key ${API_KEY} is not valid` },
        key: API_KEY,
      },
    });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAUTH');
    expectNoSecret(err);
  });

  it('redacts the key echoed in a plain-text error body', async () => {
    service.answer({
      status: 500,
      text: `upstream said: bad header x-api-key: ${API_KEY}`,
      headers: { 'content-type': 'text/plain' },
    });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expectNoSecret(err);
  });

  it('redacts the key echoed in a string-shaped { error: "..." } body', async () => {
    service.answer({ status: 401, body: { error: `Invalid API key: ${API_KEY}` } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAUTH');
    expectNoSecret(err);
  });

  it('redacts the key echoed in error.code', async () => {
    service.answer({ status: 403, body: { error: { code: `key_${API_KEY}_lacks_scope`, message: 'no scope' } } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAUTH');
    expectNoSecret(err);
  });

  it('keeps the key out of connection failure errors', async () => {
    const port = await closedPort();
    const err = await rejectionOf(makeClient({ baseUrl: `http://127.0.0.1:${port}` }).sendEml(EML));
    expect(err.code).toBe('ECONNECTION');
    expectNoSecret(err);
  });

  it("keeps the key out of a failure whose own message names it (a caller's dispatcher that quotes the request)", async () => {
    const agent = new Agent();
    // An interceptor that refuses the request and, as some proxies' do, quotes its headers in the error.
    const quoting = agent.compose(() => (options) => {
      throw new Error(`request refused by policy: ${JSON.stringify(options.headers)}`);
    });
    try {
      const err = await rejectionOf(makeClient({ dispatcher: quoting }).sendEml(EML));
      expect(err.code).toBe('ECONNECTION');
      expect(err.message).toContain('refused by policy');
      // Its message, stack, JSON, and its cause (the dispatcher's error, kept with the key taken out).
      expect(err.message).not.toContain(KEY_FRAGMENT);
      expect(String(err.stack)).not.toContain(KEY_FRAGMENT);
      expect(JSON.stringify(err)).not.toContain(KEY_FRAGMENT);
      expect(inspect(err, { depth: 10, showHidden: true })).not.toContain(KEY_FRAGMENT);
      expect((err.cause as Error).message).toContain('refused by policy');
    } finally {
      await agent.close();
    }
  });

  it('keeps the key out of util.inspect(client) and JSON.stringify(client)', async () => {
    const client = makeClient();
    await client.sendEml(EML);
    expect(inspect(client, { depth: 10, showHidden: true })).not.toContain(KEY_FRAGMENT);
    expect(JSON.stringify(client)).not.toContain(KEY_FRAGMENT);
    expect(JSON.stringify(client.settings)).not.toContain(KEY_FRAGMENT);
  });

  it.each([
    ['a line feed', 'sk_live\nSECRET123'],
    ['a carriage return', 'sk_live\rSECRET123'],
    ['a space', 'sk_live SECRET123'],
    ['a non-ASCII character', 'sk_live_é_SECRET123'],
    ['a trailing CRLF', 'sk_live_SECRET123\r\n'],
  ])('does not echo a key containing %s in the config error', (_what, apiKey) => {
    const err = thrownBy(() => new EmlApiClient({ apiKey, baseUrl: service.url }));
    expect(err.code).toBe('ECONFIG');
    expect(err.message).toContain('apiKey');
    expectNoSecret(err);
  });
});

describe('the API key stays secret when the service echoes it escaped', () => {
  let service: FakeService;
  beforeAll(async () => {
    service = await startFakeService();
  });
  afterAll(() => service.close());

  // Keys with characters that JSON, HTML and URLs escape.
  const KEYS = ['key"with\\quote_0123456789', 'key<with>&amp_0123456789', 'sk+live/base64=key0123456789=='];

  /** The ways a service or a proxy writes a string back: raw, JSON-, HTML- and URL-escaped. */
  function echoes(key: string): string[] {
    const html = key.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
    const numeric = [...key].map((c) => (/[A-Za-z0-9_]/.test(c) ? c : `&#${c.charCodeAt(0)};`)).join('');
    const hex = [...key].map((c) => (/[A-Za-z0-9_]/.test(c) ? c : `&#x${c.charCodeAt(0).toString(16)};`)).join('');
    const goJson = JSON.stringify(key)
      .slice(1, -1)
      .replace(/</g, '\\u003c')
      .replace(/>/g, '\\u003e')
      .replace(/&/g, '\\u0026');
    return [
      key,
      JSON.stringify(key).slice(1, -1),
      goJson,
      html,
      numeric,
      hex,
      encodeURIComponent(key),
      encodeURIComponent(key).toLowerCase(),
    ];
  }

  /** Every form of the key that must not be found. */
  const forms = (key: string) => [...new Set([...echoes(key), JSON.stringify(key)])];

  it.each(KEYS)('redacts %s in every escaped form from errors', async (key) => {
    const client = new EmlApiClient({ apiKey: key, baseUrl: service.url, retry: false });
    for (const echo of echoes(key)) {
      service.answer({ status: 400, text: `{"error":{"code":"bad","message":"no key ${echo} here"}} ${echo}` });
      const err = await rejectionOf(client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n'));
      for (const channel of channels(err)) for (const form of forms(key)) expect(channel).not.toContain(form);
      expect(err.response).toContain('[redacted]');
    }
    await client.close();
  });

  it.each(KEYS)('redacts %s echoed in a 2xx answer (result data and text, sendMail info)', async (key) => {
    const transport = new EmlApiTransport({ apiKey: key, baseUrl: service.url, retry: false });
    // Echoed inside a JSON string, as a JSON writer would put each form there (the raw key JSON-escaped).
    for (const echo of echoes(key).map((e) => (e === key ? JSON.stringify(key).slice(1, -1) : e))) {
      service.answer({ status: 202, text: `{"id":"x","note":"accepted for ${echo}"}` });
      const info = await nodemailer
        .createTransport(transport)
        .sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'hi' });
      for (const channel of channels(info)) for (const form of forms(key)) expect(channel).not.toContain(form);
      const result = await transport.client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n');
      for (const channel of channels(result)) for (const form of forms(key)) expect(channel).not.toContain(form);
      expect(JSON.stringify(result.data)).toContain('[redacted]');
    }
    await transport.close();
  });

  it('redacts a key of any length (12,000 characters: the most a request header carries), echoed raw and escaped', async () => {
    const key = `sk_live_${'A1b2+/='.repeat(2_000)}`.slice(0, 12_000);
    const client = new EmlApiClient({ apiKey: key, baseUrl: service.url, retry: false });
    for (const echo of [key, encodeURIComponent(key), JSON.stringify(key).slice(1, -1)]) {
      service.answer({ status: 400, text: `{"error":{"code":"bad","message":"no key ${echo} here"}}` });
      const err = await rejectionOf(client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n'));
      expect(err.code).toBe('EAPI');
      expect(err.message).toContain('no key [redacted] here');
      for (const channel of channels(err)) expect(channel).not.toContain('A1b2+/=A1b2');
    }
    await client.close();
  });

  it('does not mangle ordinary text for a very short key', async () => {
    const client = new EmlApiClient({ apiKey: 'e', baseUrl: service.url, retry: false });
    service.answer({
      status: 400,
      body: { error: { code: 'invalid_request', message: 'The request has a bad field' } },
    });
    const err = await rejectionOf(client.sendEml('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n'));
    expect(err.message).toContain('The request has a bad field');
    expect(err.apiCode).toBe('invalid_request');
    expect(err.response).not.toContain('[redacted]');
    await client.close();
  });
});
