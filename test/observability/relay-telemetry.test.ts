import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { redisServerMissing, startRedisServer } from '../helpers/redis-server.js';
import { eventually } from '../helpers/outbox.js';
import { installTracing, promtoolMissing, promtoolProblems, sample, type TestTracing } from '../helpers/telemetry.js';
import { capturingLogger } from '../helpers/logger.js';
import { recordQueue } from '../../src/queue/outbox-job.js';
import { HealthMonitor } from '../../src/observability/ops-server.js';

/** The relay's health port, metrics, spans and graceful stop, with real SMTP clients (Nodemailer's SMTP transport). */

let emu: Emulator;
let tracing: TestTracing;
const relays: EmlApiRelay[] = [];
/** API keys of other apps of the account, which clients give as their SMTP password. */
const APP_KEYS = ['sk_app_ONESECRET_1', 'sk_app_TWOSECRET_2', 'sk_app_THREESECRET_3'];
/** A login as the relay names it: a relay user's name, or `key:` and the first 24 hex digits of the key's SHA-256. */
const keyLogin = (key: string) => `key:${createHash('sha256').update(key).digest('hex').slice(0, 24)}`;

beforeAll(async () => {
  emu = await startEmulator({ apiKeys: APP_KEYS.map((key) => ({ key, scopes: ['sender'] })) });
  tracing = installTracing();
});
afterAll(async () => {
  await tracing?.shutdown();
  await emu?.close();
});
beforeEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.close({ abort: true })));
  emu.reset();
  emu.setFaults(undefined);
  tracing.reset();
});

async function relay(options: Partial<Parameters<typeof startEmlApiRelay>[0]> = {}) {
  const started = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    http: { port: 0, readyCacheMs: 0 },
    ...options,
  });
  relays.push(started);
  return started;
}
const smtp = (port: number) => nodemailer.createTransport({ host: '127.0.0.1', port, ignoreTLS: true });
const get = async (url: string) => {
  const res = await fetch(url);
  return { status: res.status, text: await res.text() };
};

describe('the relay with its http port', () => {
  it('counts messages by reply code, their size and time, and the connections open', async () => {
    const r = await relay();
    const url = `http://127.0.0.1:${r.http!.port}`;
    const sender = smtp(r.port);
    for (const to of ['ann@example.test', 'bob@example.test']) {
      await sender.sendMail({ from: 'cron@example.test', to, subject: 'Report', text: 'All jobs ran.' });
    }
    // Headers naming someone not in RCPT TO: refused 550.
    await expect(
      sender.sendMail({
        from: 'cron@example.test',
        to: 'cy@example.test',
        envelope: { from: 'cron@example.test', to: 'dee@example.test' },
        text: 'x',
      }),
    ).rejects.toMatchObject({ responseCode: 550 });
    sender.close();
    const { status, text } = await get(`${url}/metrics`);
    expect(status).toBe(200);
    expect(sample(text, 'eml_api_relay_messages_total', { outcome: 'accepted', code: '250' })).toBe(2);
    expect(sample(text, 'eml_api_relay_messages_total', { outcome: 'refused', code: '550' })).toBe(1);
    expect(sample(text, 'eml_api_relay_message_bytes_count')).toBe(3);
    expect(sample(text, 'eml_api_relay_message_bytes_sum')).toBeGreaterThan(3 * 50);
    expect(sample(text, 'eml_api_relay_message_duration_seconds_count')).toBe(3);
    expect(sample(text, 'eml_api_upload_bytes_count', { component: 'relay' })).toBe(2);
    expect(emu.messages()).toHaveLength(2);
    expect(text).not.toContain(emu.apiKey);
    if (!promtoolMissing) expect(promtoolProblems(text)).toBe('');
    // A connection held open (greeted, saying nothing) shows in the gauge.
    const held = connect(r.port, '127.0.0.1');
    await once(held, 'data');
    await eventually(async () => sample((await get(`${url}/metrics`)).text, 'eml_api_relay_connections') === 1);
    held.destroy();
  });

  it('counts a message whose client left mid-DATA as abandoned, not as a refusal it never heard', async () => {
    const r = await relay();
    const url = `http://127.0.0.1:${r.http!.port}`;
    const client = connect(r.port, '127.0.0.1');
    let heard = '';
    client.on('data', (chunk: Buffer) => (heard += chunk.toString()));
    const said = async (code: string) =>
      eventually(() => heard.includes(`\r\n${code} `) || heard.startsWith(`${code} `));
    await said('220');
    client.write('EHLO client.example\r\n');
    await said('250');
    client.write('MAIL FROM:<cron@example.test>\r\nRCPT TO:<ann@example.test>\r\nDATA\r\n');
    await said('354');
    client.write('From: cron@example.test\r\nTo: ann@example.test\r\nSubject: half\r\n\r\nHalf a mess');
    client.destroy();
    await eventually(async () => /eml_api_relay_messages_total\{/.test((await get(`${url}/metrics`)).text));
    const { text } = await get(`${url}/metrics`);
    expect(sample(text, 'eml_api_relay_messages_total', { outcome: 'abandoned' })).toBe(1);
    expect(text).not.toMatch(/eml_api_relay_messages_total\{outcome="refused"/);
    if (!promtoolMissing) expect(promtoolProblems(text)).toBe('');
    // Its span tells of no reply either.
    const span = tracing.spans().find((s) => s.name === 'eml-api.relay')!;
    expect(span.attributes['smtp.reply_code']).toBeUndefined();
    expect(span.attributes['error.type']).toBe('ESTREAM');
  });

  it('is ready when the service takes its key, says why not otherwise, and is alive', async () => {
    const r = await relay();
    const url = `http://127.0.0.1:${r.http!.port}`;
    expect(await get(`${url}/healthz`)).toMatchObject({ status: 200 });
    expect(JSON.parse((await get(`${url}/readyz`)).text)).toEqual({
      status: 'ok',
      checks: { service: { status: 'ok' } },
    });
    emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
    const down = await get(`${url}/readyz`);
    expect(down.status).toBe(503);
    expect(JSON.parse(down.text).checks.service).toMatchObject({
      status: 'fail',
      reason: expect.stringMatching(/503/),
    });
    expect(down.text).not.toContain(emu.apiKey);
  });

  it('shows no secret in a reason, whatever a check quotes (as written or escaped)', async () => {
    const apiKey = 'sk_live_0123456789abcdefSECRET';
    const monitor = new HealthMonitor({
      secrets: [apiKey, undefined],
      checks: [
        { name: 'service', check: () => Promise.reject(new Error(`refused key ${apiKey} (401)`)) },
        { name: 'proxy', check: () => Promise.reject(new Error(`echoed ${encodeURIComponent(`"${apiKey}"`)}`)) },
      ],
    });
    try {
      const report = await monitor.readiness();
      expect(report.status).toBe('fail');
      expect(report.checks.service!.reason).toMatch(/^refused key .+ \(401\)$/);
      expect(JSON.stringify(report)).not.toContain('SECRET');
    } finally {
      monitor.close();
    }
  });

  it("listens on loopback only unless told otherwise: its metrics and health are not reachable at the machine's network address", async () => {
    const r = await relay();
    expect(r.http).toEqual({ port: expect.any(Number), host: '127.0.0.1' });
    expect((await get(`http://127.0.0.1:${r.http!.port}/healthz`)).status).toBe(200);
    const external = Object.values(networkInterfaces())
      .flat()
      .find((a) => a !== undefined && a.family === 'IPv4' && !a.internal);
    if (external === undefined) return;
    const socket = connect(r.http!.port, external.address);
    const outcome = await new Promise<string | undefined>((resolve) => {
      socket.once('connect', () => resolve('connected'));
      socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code));
    });
    socket.destroy();
    expect(outcome).toBe('ECONNREFUSED');
  });

  it('makes a span per message with its reply code', async () => {
    const r = await relay();
    await smtp(r.port).sendMail({ from: 'cron@example.test', to: 'ann@example.test', subject: 's', text: 'x' });
    const span = tracing.spans().find((s) => s.name === 'eml-api.relay')!;
    expect(span.attributes).toMatchObject({ 'smtp.reply_code': 250, 'eml_api.recipients': 1 });
    expect(span.events.map((e) => e.name)).toEqual(['upload']);
  });

  it.skipIf(redisServerMissing)(
    'in store-and-forward, needs Redis only; a queued job carries the span of its message',
    async () => {
      const redis = await startRedisServer();
      try {
        const r = await relay({ queue: { connection: redis.url } });
        const url = `http://127.0.0.1:${r.http!.port}`;
        emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
        expect(JSON.parse((await get(`${url}/readyz`)).text)).toEqual({
          status: 'ok',
          checks: { redis: { status: 'ok' } },
        });
        const info = await smtp(r.port).sendMail({
          from: 'cron@example.test',
          to: 'ann@example.test',
          subject: 's',
          text: 'x',
        });
        const jobId = /Ok: (\S+)/.exec(info.response)![1]!;
        const queue = new EmlApiQueueTransport({ connection: redis.url });
        const job = await recordQueue(queue.queue).getJob(jobId);
        await queue.close();
        const span = tracing.spans().find((s) => s.name === 'eml-api.relay')!;
        expect(job!.data.trace?.traceparent).toBe(`00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
        await r.close();
      } finally {
        await redis.stop();
      }
    },
  );
});

describe('who sent it: the login in log lines, spans and metrics', () => {
  const mail = (subject: string) => ({ from: 'app@example.test', to: 'ann@example.test', subject, text: 'x' });
  const sendAs = async (port: number, subject: string, auth?: { user: string; pass: string }) => {
    const transporter = nodemailer.createTransport({
      host: '127.0.0.1',
      port,
      ignoreTLS: true,
      ...(auth ? { auth } : {}),
    });
    try {
      return await transporter.sendMail(mail(subject));
    } finally {
      transporter.close();
    }
  };

  it("a relay user's name, or the fingerprint of the key given as the password; never the password", async () => {
    const logger = capturingLogger({ inspect: true });
    const r = await relay({
      users: [{ username: 'billing', password: 'billing-SECRETPW' }],
      logger,
      authFailureDelay: 0,
    });
    await sendAs(r.port, 'as billing', { user: 'billing', pass: 'billing-SECRETPW' });
    await sendAs(r.port, 'as a key', { user: 'apikey', pass: APP_KEYS[0]! });
    await sendAs(r.port, 'without AUTH');
    await expect(sendAs(r.port, 'wrong password', { user: 'billing', pass: 'billing-WRONGPW' })).rejects.toMatchObject({
      responseCode: 535,
    });
    expect(logger.lines.find((l) => l.message === 'AUTH refused')?.meta).toMatchObject({ login: 'billing' });
    const accepted = logger.lines.filter((l) => l.message === 'Message accepted').map((l) => l.meta.login);
    expect(accepted).toEqual(['billing', keyLogin(APP_KEYS[0]!), undefined]);
    const spans = tracing.spans().filter((s) => s.name === 'eml-api.relay');
    expect(spans.map((s) => s.attributes['eml_api.login'])).toEqual(accepted);
    const text = (await get(`http://127.0.0.1:${r.http!.port}/metrics`)).text;
    expect(sample(text, 'eml_api_relay_messages_total', { outcome: 'accepted', code: '250', login: 'billing' })).toBe(
      1,
    );
    expect(
      sample(text, 'eml_api_relay_messages_total', { outcome: 'accepted', code: '250', login: keyLogin(APP_KEYS[0]!) }),
    ).toBe(1);
    if (!promtoolMissing) expect(promtoolProblems(text)).toBe('');
    const everything = [...logger.inspected(), text, ...spans.map((s) => JSON.stringify(s.attributes))].join('\n');
    for (const secret of ['SECRETPW', 'WRONGPW', 'ONESECRET']) expect(everything).not.toContain(secret);
  });

  it('the metric names as many logins as the relay has users and keeps keys for; the others are :other', async () => {
    const r = await relay({ maxKeys: 1 });
    for (const key of APP_KEYS) await sendAs(r.port, 'as a key', { user: 'apikey', pass: key });
    const text = (await get(`http://127.0.0.1:${r.http!.port}/metrics`)).text;
    const count = (login: string) =>
      sample(text, 'eml_api_relay_messages_total', { outcome: 'accepted', code: '250', login });
    expect([count(keyLogin(APP_KEYS[0]!)), count(keyLogin(APP_KEYS[1]!)), count(':other')]).toEqual([1, 1, 1]);
    expect(text).not.toContain(keyLogin(APP_KEYS[2]!));
  });

  it.skipIf(redisServerMissing)(
    "in store-and-forward, the outbox's own lines go to the relay's logger and name the login",
    async () => {
      const redis = await startRedisServer();
      try {
        const logger = capturingLogger();
        const r = await relay({
          queue: { connection: redis.url },
          users: [{ username: 'cron', password: 'cron-pw' }],
          logger,
        });
        await sendAs(r.port, 'stored', { user: 'cron', pass: 'cron-pw' });
        const queued = logger.lines.find((l) => l.message === 'Message queued');
        expect(queued?.meta).toMatchObject({ login: 'cron', client: '127.0.0.1', queueId: expect.any(String) });
        expect(logger.lines.find((l) => l.message === 'Message accepted')?.meta).toMatchObject({ login: 'cron' });
        await r.close();
      } finally {
        await redis.stop();
      }
    },
  );
});

describe('closing the relay with a grace period', () => {
  it('lets the messages in flight finish within it (250), and is not ready meanwhile', async () => {
    const r = await relay();
    emu.setFaults({ latencyMs: 700 });
    const sending = smtp(r.port).sendMail({
      from: 'cron@example.test',
      to: 'ann@example.test',
      subject: 's',
      text: 'x',
    });
    // The upload has reached the service, which answers after its latency.
    await eventually(() => (emu.faultStats()?.none ?? 0) >= 1, { what: 'the upload in flight' });
    const closing = r.close({ grace: 20_000 });
    expect((await get(`http://127.0.0.1:${r.http!.port}/readyz`)).status).toBe(503);
    expect((await sending).response).toMatch(/^250 /);
    expect(await closing).toEqual({ givenUp: 0 });
    expect(emu.messages()).toHaveLength(1);
  });

  it('answers /readyz at once while stopping, without waiting on a check of a slow service', async () => {
    const r = await relay();
    emu.setFaults({ latencyMs: 3000 });
    const sending = smtp(r.port).sendMail({ from: 'cron@example.test', to: 'ann@example.test', text: 'x' });
    await eventually(() => (emu.faultStats()?.none ?? 0) >= 1, { what: 'the upload in flight' });
    // A probe that came just before the stop: its check of the (slow) service is under way.
    const early = get(`http://127.0.0.1:${r.http!.port}/readyz`);
    await eventually(() => (emu.faultStats()?.none ?? 0) >= 2, { what: 'the key check in flight' });
    const closing = r.close({ grace: 20_000 });
    expect(
      await Promise.race([early.then((res) => res.status), sending.then(() => 'the message finished first')]),
    ).toBe(503);
    // An orchestrator's probe has a short timeout: the answer comes before the message in flight
    // (which the service answers after its latency), not after a key check that takes as long.
    const first = await Promise.race([
      get(`http://127.0.0.1:${r.http!.port}/readyz`).then((res) => ({ readyz: res.status })),
      sending.then(() => ({ readyz: 'the message finished first' })),
    ]);
    expect(first).toEqual({ readyz: 503 });
    await sending;
    expect(await closing).toEqual({ givenUp: 0 });
  });

  it('gives up what is left when it runs out (451: the client sends it again), and says how many', async () => {
    const r = await relay();
    emu.setFaults({ latencyMs: 3000 });
    const sending = smtp(r.port).sendMail({
      from: 'cron@example.test',
      to: 'ann@example.test',
      subject: 's',
      text: 'x',
    });
    await eventually(() => (emu.faultStats()?.none ?? 0) >= 1, { what: 'the upload in flight' });
    const closed = r.close({ grace: 50 });
    await expect(sending).rejects.toMatchObject({ responseCode: 451 });
    expect(await closed).toEqual({ givenUp: 1 });
  });
});
