/**
 * EmlApiClient against a scripted fake service.
 *
 * The real service's answer shapes are not known (SERVICE-SPEC.md says "not
 * shown" for responses and errors), so CONTRACT.md rule 1 says the client must
 * be lenient. This file stands in for that unknown service with the fake
 * service of helpers/fake-service.ts, whose every answer is set by the test:
 * odd statuses, empty bodies, HTML pages from a proxy, other error shapes,
 * redirects, slow answers. Each request it receives is recorded so the tests
 * can check what the client actually put on the wire.
 */
import { Readable } from 'node:stream';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { rejectionOf, eventually } from '../helpers/async.js';
import { clientFactory } from '../helpers/clients.js';
import { closedPort, startFakeService, type FakeRequest, type FakeService } from '../helpers/fake-service.js';

const API_KEY = 'sk_live_SECRET123';
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const EML = 'From: a@example.test\r\nTo: b@example.test\r\nSubject: Hi\r\n\r\nHello ünïcødé\r\n';

let service: FakeService;
// Retries are off here: this file is about reading answers; client/retries.test.ts covers retrying.
const { makeClient, closeClients } = clientFactory(() => ({ apiKey: API_KEY, baseUrl: service.url, retry: false }));

function decodedMail(req: FakeRequest | undefined): Buffer {
  const parsed = JSON.parse(req?.text ?? '') as { mail: string };
  return Buffer.from(parsed.mail, 'base64');
}

beforeAll(async () => {
  service = await startFakeService();
});

beforeEach(() => {
  service.clear();
  service.answer({ status: 202, body: { id: 'svc-1', messageId: '<m1@example.test>', recipients: 1 } });
});

afterEach(async () => {
  await closeClients();
});

afterAll(async () => {
  await service.close();
});

describe('sendEml request on the wire', () => {
  it('POSTs {"mail":"<base64>"} to {baseUrl}/v1/send/eml with key, JSON type, UUID idempotency key and user agent', async () => {
    const result = await makeClient().sendEml(Buffer.from(EML, 'utf8'));

    expect(service.requests).toHaveLength(1);
    const req = service.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/v1/send/eml');
    expect(req.headers['x-api-key']).toBe(API_KEY);
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['idempotency-key']).toMatch(UUID_RE);
    expect(req.headers['user-agent']).toMatch(/^nodemailer-eml-api\//);
    expect(req.text).toBe(`{"mail":"${Buffer.from(EML, 'utf8').toString('base64')}"}`);
    expect(Object.keys(JSON.parse(req.text) as object)).toEqual(['mail']);
    expect(decodedMail(req).toString('utf8')).toBe(EML);

    expect(result).toMatchObject({
      statusCode: 202,
      response: '202 Accepted',
      id: 'svc-1',
      messageId: '<m1@example.test>',
      idempotencyKey: req.headers['idempotency-key'],
    });
  });

  it('encodes a string input as its UTF-8 bytes', async () => {
    await makeClient().sendEml(EML);
    expect(decodedMail(service.requests[0]).equals(Buffer.from(EML, 'utf8'))).toBe(true);
  });

  it('reads a Readable input to the end and sends all of its bytes', async () => {
    const bytes = Buffer.from(EML.repeat(50), 'utf8');
    const chunks = [bytes.subarray(0, 7), bytes.subarray(7, 300), bytes.subarray(300)];
    await makeClient().sendEml(Readable.from(chunks));
    expect(decodedMail(service.requests[0]).equals(bytes)).toBe(true);
  });

  it('refuses a bad idempotencyKey with EMESSAGE before reading a stream or sending anything', async () => {
    const stream = Readable.from([Buffer.from(EML)]);
    const err = await makeClient()
      .sendEml(stream, { idempotencyKey: 'two\r\nlines' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect((err as EmlApiError).code).toBe('EMESSAGE');
    expect((err as EmlApiError).message).toMatch(/idempotencyKey/);
    expect(stream.readableEnded).toBe(false);
    expect(service.requests).toEqual([]);
  });

  it('sends binary bytes unchanged (no text re-encoding)', async () => {
    const bytes = Buffer.from([0x46, 0x3a, 0x20, 0xff, 0xfe, 0x00, 0x0d, 0x0a, 0x80]);
    await makeClient().sendEml(bytes);
    expect(decodedMail(service.requests[0]).equals(bytes)).toBe(true);
  });

  it('joins the path under a base URL with a path prefix and trailing slash', async () => {
    await makeClient({ baseUrl: `${service.url}/api/` }).sendEml(EML);
    expect(service.requests.map((r) => r.url)).toEqual(['/api/v1/send/eml']);
  });

  it('joins the path under a base URL with a path prefix and no trailing slash', async () => {
    await makeClient({ baseUrl: `${service.url}/api` }).sendEml(EML);
    expect(service.requests.map((r) => r.url)).toEqual(['/api/v1/send/eml']);
  });

  it('gives two sends two different idempotency keys', async () => {
    const client = makeClient();
    const a = await client.sendEml(EML);
    const b = await client.sendEml(EML);
    const keys = service.requests.map((r) => r.headers['idempotency-key']);
    expect(keys).toHaveLength(2);
    expect(keys[0]).not.toBe(keys[1]);
    expect([a.idempotencyKey, b.idempotencyKey]).toEqual(keys);
  });

  it('uses an explicit idempotencyKey as is', async () => {
    const result = await makeClient().sendEml(EML, { idempotencyKey: 'k1' });
    expect(service.requests[0]?.headers['idempotency-key']).toBe('k1');
    expect(result.idempotencyKey).toBe('k1');
  });
});

describe('lenient reading of success answers', () => {
  it('accepts 200 with a JSON body', async () => {
    service.answer({ status: 200, body: { id: 'x-200', messageId: '<a@b>' } });
    const result = await makeClient().sendEml(EML);
    expect(result).toMatchObject({ statusCode: 200, response: '200 OK', id: 'x-200', messageId: '<a@b>' });
    expect(result.data).toEqual({ id: 'x-200', messageId: '<a@b>' });
  });

  it('accepts 202 with an empty body', async () => {
    service.answer({ status: 202 });
    const result = await makeClient().sendEml(EML);
    expect(result).toMatchObject({ statusCode: 202, response: '202 Accepted', text: '' });
    expect(result.data).toBeUndefined();
    expect(result.id).toBeUndefined();
    expect(result.messageId).toBeUndefined();
  });

  it('accepts 201 with a text/plain "OK" body and keeps the text', async () => {
    service.answer({ status: 201, text: 'OK', headers: { 'content-type': 'text/plain' } });
    const result = await makeClient().sendEml(EML);
    expect(result).toMatchObject({ statusCode: 201, response: '201 Created', text: 'OK' });
    expect(result.data).toBeUndefined();
    expect(result.id).toBeUndefined();
  });

  it('accepts 204 No Content', async () => {
    service.answer({ status: 204 });
    const result = await makeClient().sendEml(EML);
    expect(result).toMatchObject({ statusCode: 204, text: '' });
    expect(result.id).toBeUndefined();
  });

  it('gives id undefined for a JSON body without id, without crashing', async () => {
    service.answer({ status: 202, body: { status: 'queued' } });
    const result = await makeClient().sendEml(EML);
    expect(result.id).toBeUndefined();
    expect(result.messageId).toBeUndefined();
    expect(result.data).toEqual({ status: 'queued' });
  });

  it('does not crash on JSON bodies that are not objects or have odd field types', async () => {
    const client = makeClient();
    for (const body of [null, 'queued', 42, [], { id: 7, messageId: { x: 1 } }]) {
      service.answer({ status: 202, body });
      const result = await client.sendEml(EML);
      expect(result.statusCode).toBe(202);
      expect(result.id).toBeUndefined();
      expect(result.messageId).toBeUndefined();
    }
  });

  it('keeps the text of a 2xx body that claims JSON but is not', async () => {
    service.answer({ status: 202, text: '{"id": "trunc', headers: { 'content-type': 'application/json' } });
    const result = await makeClient().sendEml(EML);
    expect(result.data).toBeUndefined();
    expect(result.text).toBe('{"id": "trunc');
    expect(result.id).toBeUndefined();
  });
});

describe('lenient reading of error answers', () => {
  const HTML = '<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1>nginx</body></html>';

  it('rejects an HTML 502 page from a proxy with EAPI, responseCode 502 and the HTML in response', async () => {
    service.answer({ status: 502, text: HTML, headers: { 'content-type': 'text/html' } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(502);
    expect(err.response).toContain('<h1>Bad Gateway</h1>');
    expect(err.command).toBe('POST /v1/send/eml');
    expect(err.apiCode).toBeUndefined();
    expect(err.permanent).toBe(false);
  });

  it('reads { error: { code, message } } into apiCode and the message', async () => {
    service.answer({ status: 500, body: { error: { code: 'internal_error', message: 'boom' } } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(500);
    expect(err.apiCode).toBe('internal_error');
    expect(err.message).toContain('boom');
    expect(err.response).toBe('{"error":{"code":"internal_error","message":"boom"}}');
    expect(err.permanent).toBe(false);
  });

  it('reflects a string-shaped { error: "bad_thing" } body without crashing', async () => {
    service.answer({ status: 400, body: { error: 'bad_thing' } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(400);
    expect(err.apiCode).toBe('bad_thing');
    expect(err.message).toContain('bad_thing');
    expect(err.response).toContain('bad_thing');
  });

  it('reflects a { message: "x" } body without crashing', async () => {
    service.answer({ status: 422, body: { message: 'x' } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(422);
    expect(err.message).toMatch(/: x$/);
    expect(err.response).toBe('{"message":"x"}');
  });

  it('does not crash on error bodies of other shapes', async () => {
    const client = makeClient();
    const bodies: [string, string][] = [
      ['null', 'application/json'],
      ['[]', 'application/json'],
      ['{"error":null}', 'application/json'],
      ['{"error":{"code":42,"message":["a"]}}', 'application/json'],
      ['{"errors":[{"detail":"nope"}]}', 'application/json'],
      ['{not json', 'application/json'],
      ['', 'application/json'],
      ['Service Unavailable', 'text/plain'],
    ];
    for (const [body, type] of bodies) {
      service.answer({ status: 503, text: body, headers: { 'content-type': type } });
      const err = await rejectionOf(client.sendEml(EML));
      expect(err.code).toBe('EAPI');
      expect(err.responseCode).toBe(503);
      expect(err.response).toBe(body);
      expect(err.message).toContain('503');
    }
  });

  it('truncates a huge error body in response', async () => {
    service.answer({ status: 500, text: 'x'.repeat(100_000), headers: { 'content-type': 'text/plain' } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.response!.length).toBeLessThan(2100);
  });
});

describe('status codes map to code and permanent', () => {
  it('401 → EAUTH, responseCode 401, permanent', async () => {
    service.answer({ status: 401, body: { error: { code: 'invalid_api_key', message: 'unknown key' } } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAUTH');
    expect(err.responseCode).toBe(401);
    expect(err.permanent).toBe(true);
    expect(err.apiCode).toBe('invalid_api_key');
    expect(err.command).toBe('POST /v1/send/eml');
  });

  it('403 → EAUTH, permanent', async () => {
    service.answer({ status: 403, body: { error: { code: 'missing_scope', message: 'needs sender' } } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAUTH');
    expect(err.responseCode).toBe(403);
    expect(err.permanent).toBe(true);
    expect(err.apiCode).toBe('missing_scope');
  });

  it('429 → EAPI, not permanent', async () => {
    service.answer({
      status: 429,
      text: '{"error":{"code":"rate_limited","message":"slow down"}}',
      headers: {
        'content-type': 'application/json',
        'retry-after': '1',
      },
    });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(429);
    expect(err.permanent).toBe(false);
  });

  it('400 → EAPI, permanent', async () => {
    service.answer({ status: 400, body: { error: { code: 'invalid_eml', message: 'no From' } } });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(400);
    expect(err.permanent).toBe(true);
  });

  it('408 → not permanent', async () => {
    service.answer({ status: 408 });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.responseCode).toBe(408);
    expect(err.permanent).toBe(false);
  });
});

describe('redirects', () => {
  it.each([302, 307])('does not follow a %i redirect and rejects with EAPI', async (status) => {
    service.script([{ status, headers: { location: '/elsewhere/v1/send/eml' } }], {
      status: 202,
      body: { id: 'followed' },
    });
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(status);
    expect(service.requests).toHaveLength(1);
    expect(service.requests[0]?.url).toBe('/v1/send/eml');
  });
});

describe('connection failures and aborts', () => {
  it('rejects with ECONNECTION naming ECONNREFUSED when nothing listens', async () => {
    const port = await closedPort();
    const err = await rejectionOf(makeClient({ baseUrl: `http://127.0.0.1:${port}` }).sendEml(EML));
    expect(err.code).toBe('ECONNECTION');
    expect(err.message).toContain('ECONNREFUSED');
    expect(err.command).toBe('POST /v1/send/eml');
    expect(err.permanent).toBe(false);
    expect(err.responseCode).toBeUndefined();
  });

  it('rejects with ECONNECTION when the service drops the connection without answering', async () => {
    service.answer('reset-after-body');
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err.code).toBe('ECONNECTION');
  });

  it('rejects with EABORT, sending nothing, when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const err = await rejectionOf(makeClient().sendEml(EML, { signal: controller.signal }));
    expect(err.code).toBe('EABORT');
    expect(service.requests).toHaveLength(0);
  });

  it('rejects with EABORT when aborted while the service delays its answer', async () => {
    service.answer({ status: 202, body: { id: 'late' }, delayMs: 5000 });
    const controller = new AbortController();
    const pending = rejectionOf(makeClient().sendEml(EML, { signal: controller.signal }));
    await eventually(() => service.requests.length === 1);
    const started = Date.now();
    controller.abort();
    const err = await pending;
    expect(err.code).toBe('EABORT');
    expect(err.command).toBe('POST /v1/send/eml');
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('rejects with EABORT when aborted with a custom reason while the service delays', async () => {
    // RequestOptions.signal is documented as "the call rejects with EABORT", whatever the reason given to abort().
    service.answer({ status: 202, body: { id: 'late' }, delayMs: 5000 });
    const controller = new AbortController();
    const pending = rejectionOf(makeClient().sendEml(EML, { signal: controller.signal }));
    await eventually(() => service.requests.length === 1);
    controller.abort(new Error('user cancelled'));
    const err = await pending;
    expect(err.code).toBe('EABORT');
  });

  it('rejects with EABORT when a send is aborted while it waits in the maxConnections queue', async () => {
    service.answer({ status: 202, body: { id: 'ok' }, delayMs: 200 });
    const client = makeClient({ maxConnections: 1 });
    const first = client.sendEml(EML);
    await eventually(() => service.requests.length === 1);
    const controller = new AbortController();
    const queued = rejectionOf(client.sendEml(EML, { signal: controller.signal }));
    await eventually(() => client.queuedRequests === 1);
    controller.abort();
    const err = await queued;
    expect(err.code).toBe('EABORT');
    await expect(first).resolves.toMatchObject({ statusCode: 202 });
    expect(service.requests).toHaveLength(1);
  });

  it('rejects with an EmlApiError when an AbortSignal.timeout() signal fires while the service delays', async () => {
    // The documented example of RequestOptions is `{ signal: AbortSignal.timeout(10_000) }`.
    service.answer({ status: 202, body: { id: 'late' }, delayMs: 5000 });
    const err = await rejectionOf(makeClient().sendEml(EML, { signal: AbortSignal.timeout(100) }));
    expect(['EABORT', 'ETIMEDOUT']).toContain(err.code);
  });
});

describe('maxConnections', () => {
  it('never has more than maxConnections requests at the service, and every send succeeds', async () => {
    service.answer({ status: 202, body: { id: 'ok' }, delayMs: 100 });
    const client = makeClient({ maxConnections: 2 });
    const results = await Promise.all(Array.from({ length: 6 }, () => client.sendEml(EML)));
    expect(results.map((r) => r.statusCode)).toEqual([202, 202, 202, 202, 202, 202]);
    expect(service.requests).toHaveLength(6);
    expect(service.maxOpen).toBe(2);
    expect(new Set(service.requests.map((r) => r.headers['idempotency-key'])).size).toBe(6);
  });
});
