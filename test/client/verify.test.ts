/**
 * EmlApiClient.verify(): a POST of the empty body {} that the service must
 * refuse with 400 when the key is good, against a fake service.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { rejectionOf } from '../helpers/async.js';
import { clientFactory } from '../helpers/clients.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';

const API_KEY = 'sk_live_SECRET123';

let service: FakeService;
const { makeClient, closeClients } = clientFactory(() => ({ apiKey: API_KEY, baseUrl: service.url, retry: false }));

beforeAll(async () => {
  service = await startFakeService();
});

beforeEach(() => {
  service.clear();
});

afterEach(async () => {
  await closeClients();
});

afterAll(async () => {
  await service.close();
});

describe('verify()', () => {
  it('resolves true when the service answers 400 to the empty body {}', async () => {
    service.answer({ status: 400, body: { error: { code: 'invalid_request', message: 'mail is required' } } });
    await expect(makeClient().verify()).resolves.toBe(true);
    expect(service.requests).toHaveLength(1);
    expect(service.requests[0]).toMatchObject({ method: 'POST', url: '/v1/send/eml', text: '{}' });
    expect(service.requests[0]?.headers['x-api-key']).toBe(API_KEY);
  });

  it('rejects with EAUTH on 401', async () => {
    service.answer({ status: 401, body: { error: { code: 'invalid_api_key', message: 'unknown key' } } });
    const err = await rejectionOf(makeClient().verify());
    expect(err.code).toBe('EAUTH');
    expect(err.responseCode).toBe(401);
  });

  it('rejects with EAUTH on 403', async () => {
    service.answer({ status: 403, body: { error: { code: 'missing_scope', message: 'needs sender' } } });
    const err = await rejectionOf(makeClient().verify());
    expect(err.code).toBe('EAUTH');
    expect(err.responseCode).toBe(403);
  });

  it('rejects with EAPI on a 2xx: an empty send is never accepted, so a 2xx is not the service (a wrong baseUrl)', async () => {
    // A web server, a single-page app or a captive portal behind a wrong baseUrl answers every path 200:
    // verify() must not pass it (eml-api worker would then "send" and delete every queued message).
    service.answer({
      status: 200,
      text: '<!doctype html><html><body>Welcome</body></html>',
      headers: { 'content-type': 'text/html' },
    });
    const err = await rejectionOf(makeClient().verify());
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(200);
    expect(err.message).toMatch(/answered 200 OK .*baseUrl/);
    service.answer({ status: 202, body: { id: 'x' } });
    expect((await rejectionOf(makeClient().verify())).responseCode).toBe(202);
  });

  it('rejects with EAPI on a 5xx', async () => {
    service.answer({ status: 502, text: '<html>bad gateway</html>', headers: { 'content-type': 'text/html' } });
    const err = await rejectionOf(makeClient().verify());
    expect(err.code).toBe('EAPI');
    expect(err.responseCode).toBe(502);
  });
});
