import nodemailer from 'nodemailer';
import { Agent, type Dispatcher } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiTransport } from '../../src/index.js';
import { backoffDelay, parseRetryAfter } from '../../src/http/requester.js';
import { rejectionOf, eventually } from '../helpers/async.js';
import { clientFactory } from '../helpers/clients.js';
import { closedPort, startFakeService, type FakeService } from '../helpers/fake-service.js';

const EML = 'From: a@example.test\r\nTo: b@example.test\r\nSubject: s\r\n\r\nbody\r\n';
const FAST = { attempts: 4, delay: 10, maxDelay: 2000 };

let service: FakeService;
const { makeClient, closeClients } = clientFactory(() => ({ apiKey: 'k', baseUrl: service.url, retry: FAST }));

beforeEach(async () => {
  service = await startFakeService();
});
afterEach(async () => {
  await closeClients({ abort: true });
  await service.close();
});

describe('retries of failures the service surely did not process', () => {
  it('retries a 503 and succeeds, sending the same Idempotency-Key each time', async () => {
    service.script([{ status: 503 }, { status: 503 }]);
    const result = await makeClient().sendEml(EML);
    expect(result.statusCode).toBe(202);
    expect(service.requests).toHaveLength(3);
    const keys = new Set(service.requests.map((r) => r.headers['idempotency-key']));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toBe(result.idempotencyKey);
  });

  it('waits as long as Retry-After says on a 429 before retrying', async () => {
    service.script([{ status: 429, headers: { 'retry-after': '1' } }]);
    await makeClient().sendEml(EML);
    expect(service.requests).toHaveLength(2);
    // A lower bound only: the retry must not come before the service allowed it.
    expect(service.requests[1]!.at - service.requests[0]!.at).toBeGreaterThanOrEqual(950);
  });

  it('gives up at once when Retry-After is longer than retries.maxDelay, saying so', async () => {
    service.script([
      {
        status: 429,
        headers: { 'retry-after': '120' },
        body: { error: { code: 'rate_limited', message: 'slow down' } },
      },
    ]);
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err).toMatchObject({ code: 'EAPI', responseCode: 429, apiCode: 'rate_limited', permanent: false });
    expect(err.message).toContain('retry after 120 s');
    expect(service.requests).toHaveLength(1);
    // The wait the service asked for travels on the error (the outbox pauses its queue that long).
    expect(err.retryAfter).toBe(120_000);
  });

  it('carries no retryAfter when the failing answer had no Retry-After', async () => {
    service.script([{ status: 503 }]);
    const err = await rejectionOf(makeClient({ retry: false }).sendEml(EML));
    expect(err.retryAfter).toBeUndefined();
  });

  it('stops after retries.limit retries and reports the attempts', async () => {
    service.script([], { status: 503 });
    const err = await rejectionOf(makeClient({ retry: { ...FAST, attempts: 3 } }).sendEml(EML));
    expect(err).toMatchObject({ code: 'EAPI', responseCode: 503, attempts: 3, mayHaveBeenAccepted: false });
    expect(err.message).toContain('after 3 attempts');
    expect(service.requests).toHaveLength(3);
  });

  it('does not retry at all with retry: false', async () => {
    service.script([{ status: 503 }]);
    await rejectionOf(makeClient({ retry: false }).sendEml(EML));
    expect(service.requests).toHaveLength(1);
  });

  it('retries a refused connection and reports ECONNREFUSED after the last attempt', async () => {
    const port = await closedPort();
    const err = await rejectionOf(
      makeClient({ baseUrl: `http://127.0.0.1:${port}`, retry: { ...FAST, attempts: 3 } }).sendEml(EML),
    );
    expect(err).toMatchObject({ code: 'ECONNECTION', attempts: 3, mayHaveBeenAccepted: false, permanent: false });
    expect(err.message).toContain('ECONNREFUSED');
  });

  it('retries a reset that came before the request was fully written, delivering once', async () => {
    service.script(['reset-on-headers']);
    // Large enough that the reset arrives while the body is still being written.
    const big = EML + 'x'.repeat(4 * 1024 * 1024);
    const result = await makeClient().sendEml(big);
    expect(result.statusCode).toBe(202);
    expect(service.processed).toBe(1);
  });
});

describe('with a dispatcher the caller passed', () => {
  // Large enough that the body is streamed and a reset arrives while it is still being written.
  const BIG = EML + 'x'.repeat(4 * 1024 * 1024);
  const agents: Agent[] = [];
  const callerAgent = () => {
    const agent = new Agent({ connections: 2 });
    agents.push(agent);
    return agent;
  };
  /** An Agent behind an interceptor: undici's handler wrapping then drops `onRequestSent`. */
  const composed = (): Dispatcher =>
    callerAgent().compose((dispatch) => (options, handler) => dispatch(options, handler));
  afterEach(async () => {
    await Promise.all(agents.splice(0).map((agent) => agent.close()));
  });

  it.each([
    ['an Agent', callerAgent],
    ['an Agent with an interceptor', composed],
  ])('%s: retries a reset before the request was fully written, delivering once', async (_label, dispatcher) => {
    service.script(['reset-on-headers']);
    const result = await makeClient({ dispatcher: dispatcher() }).sendEml(BIG);
    expect(result.statusCode).toBe(202);
    expect(service.requests).toHaveLength(2);
    expect(service.processed).toBe(1);
  });

  it.each([
    ['an Agent', callerAgent],
    ['an Agent with an interceptor', composed],
  ])('%s: retries a refused connection', async (_label, dispatcher) => {
    const port = await closedPort();
    const err = await rejectionOf(
      makeClient({
        dispatcher: dispatcher(),
        baseUrl: `http://127.0.0.1:${port}`,
        retry: { ...FAST, attempts: 3 },
      }).sendEml(EML),
    );
    expect(err).toMatchObject({ code: 'ECONNECTION', attempts: 3, mayHaveBeenAccepted: false });
  });

  it.each([
    ['a small message', EML],
    ['a streamed one', BIG],
  ])('an Agent with an interceptor: does not retry a reset after %s was sent', async (_label, eml) => {
    service.script(['reset-after-body']);
    const err = await rejectionOf(makeClient({ dispatcher: composed() }).sendEml(eml));
    expect(err).toMatchObject({ code: 'ECONNECTION', mayHaveBeenAccepted: true, attempts: 1 });
    expect(service.requests).toHaveLength(1);
  });

  it('an Agent with an interceptor: does not retry a response timeout', async () => {
    service.script(['hang']);
    const err = await rejectionOf(makeClient({ dispatcher: composed(), timeouts: { response: 200 } }).sendEml(EML));
    expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true, attempts: 1 });
    expect(service.requests).toHaveLength(1);
  });
});

describe('ambiguous failures', () => {
  it('does not retry a reset after the request was sent, and says the message may have been accepted', async () => {
    service.script(['reset-after-body']);
    const err = await rejectionOf(makeClient().sendEml(EML));
    expect(err).toMatchObject({ code: 'ECONNECTION', mayHaveBeenAccepted: true, attempts: 1 });
    expect(err.message).toContain('may have accepted it');
    expect(service.requests).toHaveLength(1);
  });

  it('does not retry 502 or 504 by default', async () => {
    for (const status of [502, 504]) {
      service.script([{ status }]);
      const before = service.requests.length;
      const err = await rejectionOf(makeClient().sendEml(EML));
      expect(err).toMatchObject({ code: 'EAPI', responseCode: status, mayHaveBeenAccepted: true });
      expect(service.requests.length - before).toBe(1);
    }
  });

  it('retries them with retryAmbiguous, reusing the Idempotency-Key', async () => {
    service.script(['reset-after-body', { status: 502 }, { status: 504 }]);
    const result = await makeClient({ retry: { ...FAST, retryAmbiguous: true } }).sendEml(EML);
    expect(result.statusCode).toBe(202);
    expect(service.requests).toHaveLength(4);
    expect(new Set(service.requests.map((r) => r.headers['idempotency-key'])).size).toBe(1);
  });

  it('retries a membership check, which is safe to repeat, but not a removal', async () => {
    service.script(['reset-after-body'], { status: 200, body: { member: true } });
    await expect(makeClient().isInGroup('g', 'a@example.test')).resolves.toBe(true);
    expect(service.requests).toHaveLength(2);
    service.script(['reset-after-body'], { status: 200, body: { removed: true } });
    const err = await rejectionOf(makeClient().removeFromGroup('g', 'a@example.test'));
    expect(err.mayHaveBeenAccepted).toBe(true);
    expect(service.requests).toHaveLength(3);
  });

  it('does not say "not retried" of an ambiguous failure it retried until the attempts ran out', async () => {
    service.script([], { status: 502, text: '<html>Bad Gateway</html>', headers: { 'content-type': 'text/html' } });
    const check = await rejectionOf(makeClient().isInGroup('g', 'a@example.test'));
    expect(check).toMatchObject({ code: 'EAPI', responseCode: 502, attempts: 4 });
    expect(check.message).not.toContain('not retried');
    const send = await rejectionOf(makeClient({ retry: { ...FAST, retryAmbiguous: true } }).sendEml(EML));
    expect(send).toMatchObject({ code: 'EAPI', responseCode: 502, attempts: 4 });
    expect(send.message).not.toContain('not retried');
    expect(send.message).toContain('the service may have accepted it');
    service.script([], 'reset-after-body');
    const reset = await rejectionOf(makeClient().isInGroup('g', 'a@example.test'));
    expect(reset).toMatchObject({ code: 'ECONNECTION', attempts: 4 });
    expect(reset.message).not.toContain('not retried');
  });
});

describe('timeouts', () => {
  it('fails with ETIMEDOUT naming the response timeout, without retrying', async () => {
    service.script(['hang']);
    const err = await rejectionOf(makeClient({ timeouts: { response: 200 } }).sendEml(EML));
    expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true, attempts: 1 });
    expect(err.message).toContain('response timeout (timeouts.response, 200 ms)');
    expect(service.requests).toHaveLength(1);
  });

  it('fails with ETIMEDOUT naming the overall timeout, retries and backoff included', async () => {
    service.script([], { status: 503 });
    const err = await rejectionOf(
      makeClient({ timeouts: { total: 300 }, retry: { attempts: 101, delay: 50, maxDelay: 50 } }).sendEml(EML),
    );
    expect(err.code).toBe('ETIMEDOUT');
    expect(err.message).toContain('overall timeout (timeouts.total, 300 ms)');
    expect(service.requests.length).toBeGreaterThan(1);
  });

  it('rejects bad timeout and retry options naming them', () => {
    expect(() => makeClient({ timeouts: { response: 0 } })).toThrow(/timeouts\.response/);
    expect(() => makeClient({ timeouts: { idle: 5 } as never })).toThrow(/timeouts\.idle: unknown option/);
    expect(() => makeClient({ retry: { attempts: 0 } })).toThrow(/retry\.attempts/);
    expect(() => makeClient({ retry: { delay: 100, maxDelay: 10 } })).toThrow(/retry\.maxDelay/);
    expect(() => makeClient({ retry: { jitter: 2 } })).toThrow(/retry\.jitter/);
    expect(() => makeClient({ rateLimit: { max: 0, duration: 1000 } })).toThrow(/rateLimit\.max/);
    expect(() => makeClient({ rateLimit: { max: 1 } as never })).toThrow(/rateLimit\.duration/);
  });
});

describe('cancellation', () => {
  it('aborts during the backoff wait with EABORT', async () => {
    service.script([], { status: 503 });
    const controller = new AbortController();
    const client = makeClient({ retry: { attempts: 6, delay: 5000, maxDelay: 5000 } });
    const backingOff = new Promise<void>((resolve) => client.observe({ retry: () => resolve() }));
    const pending = client.sendEml(EML, { signal: controller.signal });
    await backingOff;
    controller.abort();
    const err = await rejectionOf(pending);
    expect(err.code).toBe('EABORT');
    expect(service.requests).toHaveLength(1);
  });

  it('aborts a send in flight through sendMail({ signal }) with EABORT', async () => {
    service.script(['hang']);
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url });
    expect(transport.supportsAbortSignal).toBe(true);
    const transporter = nodemailer.createTransport(transport);
    const controller = new AbortController();
    const sending = transporter.sendMail({
      from: 'a@example.test',
      to: 'b@example.test',
      subject: 's',
      text: 't',
      signal: controller.signal,
    });
    await eventually(() => service.requests.length > 0);
    controller.abort();
    await expect(sending).rejects.toMatchObject({ code: 'EABORT' });
    await transport.close({ abort: true });
  });

  it('aborts a queued sendMail before it is sent', async () => {
    service.script(['hang']);
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: service.url, maxConnections: 1 });
    const transporter = nodemailer.createTransport(transport);
    const message = { from: 'a@example.test', to: 'b@example.test', subject: 's', text: 't' };
    const first = transporter.sendMail(message).catch((e: unknown) => e);
    const controller = new AbortController();
    const second = transporter.sendMail({ ...message, signal: controller.signal });
    await eventually(() => service.requests.length > 0);
    controller.abort();
    await expect(second).rejects.toMatchObject({ code: 'EABORT' });
    expect(service.requests).toHaveLength(1);
    await transport.close({ abort: true });
    await expect(first).resolves.toMatchObject({ code: 'EABORT' });
  });
});

describe('close()', () => {
  it('lets a send in flight finish, refuses new ones, then resolves', async () => {
    const client = makeClient();
    service.script(['hang']);
    const pending = client.sendEml(EML).catch((e: unknown) => e);
    await eventually(() => service.requests.length > 0);
    let closed = false;
    const closing = client.close().then(() => (closed = true));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(closed).toBe(false);
    await expect(client.sendEml(EML)).rejects.toMatchObject({ code: 'ECONNECTION' });
    // Abort what hangs, so the graceful close can end.
    await client.close({ abort: true });
    await closing;
    expect(await pending).toMatchObject({ code: 'EABORT' });
    expect(closed).toBe(true);
  });

  it('waits for queued sends too before closing', async () => {
    const client = makeClient({ maxConnections: 1 });
    const results = [client.sendEml(EML), client.sendEml(EML), client.sendEml(EML)];
    await client.close();
    await expect(Promise.all(results)).resolves.toHaveLength(3);
    expect(service.processed).toBe(3);
  });
});

describe('many calls at once', () => {
  it('runs 60 concurrent sends without an EventTarget listener-leak warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    const client = makeClient({ maxConnections: 50 });
    const controller = new AbortController();
    await Promise.all(Array.from({ length: 60 }, () => client.sendEml(EML, { signal: controller.signal })));
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    expect(warnings).not.toContain('MaxListenersExceededWarning');
  });
});

describe('pacing', () => {
  it('starts at most rateLimit.max sends per rateLimit.duration', async () => {
    const client = makeClient({ rateLimit: { max: 20, duration: 1000 }, maxConnections: 10 });
    const start = performance.now();
    await Promise.all(Array.from({ length: 10 }, () => client.sendEml(EML)));
    // Ten starts at 20 per second span nine intervals of 50 ms; unpaced, they all finish within a few ms.
    // Measured from the caller's side, a busy machine only lengthens the span (arrivals at the server
    // can bunch up behind a slow first connection). 5 ms is the timers' rounding.
    expect(performance.now() - start).toBeGreaterThanOrEqual(9 * 50 - 5);
    expect(service.requests).toHaveLength(10);
  });
});

describe('backoff arithmetic', () => {
  it('doubles the delay with jitter between half and all of it, capped at maxDelay', () => {
    const retry = { attempts: 11, delay: 100, maxDelay: 1000, jitter: 0.5, retryAmbiguous: false };
    expect(backoffDelay(0, retry, () => 0)).toBe(50);
    expect(backoffDelay(0, retry, () => 1)).toBe(100);
    expect(backoffDelay(2, retry, () => 1)).toBe(400);
    expect(backoffDelay(9, retry, () => 1)).toBe(1000);
    expect(backoffDelay(9, retry, () => 0)).toBe(500);
    // No jitter: the whole delay.
    expect(backoffDelay(2, { ...retry, jitter: 0 }, () => 0)).toBe(400);
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    expect(parseRetryAfter('3')).toBe(3000);
    expect(parseRetryAfter(new Date(10_000 + 5000).toUTCString(), 10_000)).toBe(5000);
    expect(parseRetryAfter('soon')).toBeUndefined();
    expect(parseRetryAfter(undefined)).toBeUndefined();
  });
});

describe('an https:// URL at a server that speaks plain HTTP', () => {
  it('says the server answered without TLS, not OpenSSL’s record-layer text', async () => {
    const client = makeClient({ baseUrl: service.url.replace(/^http:/, 'https:'), retry: false });
    const err = await rejectionOf(client.sendEml(EML));
    expect(err.code).toBe('ECONNECTION');
    expect(err.message).toMatch(
      /^POST \/v1\/send\/eml to https:\/\/127\.0\.0\.1:\d+ failed: the server answered without TLS: does the URL need http:\/\/ instead of https:\/\/\? \(ERR_SSL_\w+\)$/,
    );
    expect(service.requests).toHaveLength(0);
  });
});
