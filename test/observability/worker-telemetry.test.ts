import nodemailer from 'nodemailer';
import { trace } from '@opentelemetry/api';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, purgeOutbox, startOutboxWorker, type OutboxWorker } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { installTracing, promtoolMissing, promtoolProblems, sample, type TestTracing } from '../helpers/telemetry.js';

/** An outbox worker's health port, metrics and spans: real Redis, the emulator, the real OpenTelemetry SDK. */

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
let tracing: TestTracing;
const workers: OutboxWorker[] = [];

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
  // A short backoff: a failed attempt's retry comes at once, not after the default 5 s.
  transport = new EmlApiQueueTransport({ connection: redis.url, retry: { delay: 100, maxDelay: 100 } });
  tracing = installTracing();
});
afterAll(async () => {
  await tracing?.shutdown();
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});
beforeEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ abort: true })));
  await purgeOutbox(transport.queue, { force: true });
  await redis.client.config('SET', 'maxmemory-policy', 'noeviction');
  emu.reset();
  tracing.reset();
});

async function worker(options: { apiKey?: string; readyCacheMs?: number; idempotencyWindow?: number } = {}) {
  const started = await startOutboxWorker({
    connection: redis.url,
    apiKey: options.apiKey ?? emu.apiKey,
    baseUrl: emu.url,
    cleanupInterval: 0,
    http: { port: 0, readyCacheMs: options.readyCacheMs ?? 0 },
    ...(options.idempotencyWindow === undefined ? {} : { idempotencyWindow: options.idempotencyWindow }),
  });
  workers.push(started);
  return { outbox: started, url: `http://127.0.0.1:${started.http!.port}` };
}

const get = async (url: string) => {
  const res = await fetch(url);
  return { status: res.status, text: await res.text(), type: res.headers.get('content-type') };
};

describe('eml-api worker telemetry', () => {
  it('counts what it sent and failed, shows the queue by state, and passes promtool', async () => {
    const transporter = nodemailer.createTransport(transport);
    for (const to of ['ann@example.test', 'bob@example.test', 'cy@example.test']) {
      await transporter.sendMail({ from: 'shop@example.test', to, subject: 'Hi', text: 'x' });
    }
    // The service refuses this one (404 group_not_found): failed at once.
    await transporter.sendMail({
      from: 'shop@example.test',
      subject: 'News',
      html: '<p>x</p>',
      group: 'no-such-group',
    });
    const queued = (await transport.queue.getJobCounts('prioritized')).prioritized!;
    const { url } = await worker();
    await eventually(async () => {
      const counts = await transport.queue.getJobCounts('completed', 'failed');
      return counts.completed! + counts.failed! === queued;
    });
    const failed = (await transport.queue.getJobCounts('failed')).failed!;
    expect(failed).toBe(1);
    const metrics = await get(`${url}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.type).toMatch(/^text\/plain/);
    expect(sample(metrics.text, 'eml_api_sends_total', { component: 'worker', outcome: 'sent', status: '202' })).toBe(
      3,
    );
    expect(
      sample(metrics.text, 'eml_api_sends_total', {
        component: 'worker',
        outcome: 'failed',
        code: 'EAPI',
        status: '404',
      }),
    ).toBe(1);
    expect(emu.messages()).toHaveLength(3);
    expect(sample(metrics.text, 'eml_api_outbox_jobs', { queue: 'eml-api', state: 'completed' })).toBe(3);
    expect(sample(metrics.text, 'eml_api_outbox_jobs', { queue: 'eml-api', state: 'failed' })).toBe(failed);
    expect(sample(metrics.text, 'eml_api_outbox_oldest_waiting_seconds', { queue: 'eml-api' })).toBe(0);
    expect(sample(metrics.text, 'eml_api_upload_bytes_count', { component: 'worker' })).toBe(queued);
    expect(sample(metrics.text, 'process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(metrics.text).not.toContain(emu.apiKey);
    if (!promtoolMissing) expect(promtoolProblems(metrics.text)).toBe('');
  });

  it('shows the age of the head of the queue and the jobs parked for a person', async () => {
    const transporter = nodemailer.createTransport(transport);
    // Taken by the service, the connection then reset: an unknown outcome, parked at its retry by a worker
    // told the service keeps no idempotency keys.
    emu.setFaults({ resetAfterProcessing: 1 });
    await transporter.sendMail({ from: 'shop@example.test', to: 'ann@example.test', subject: 'Hi', text: 'x' });
    const first = await worker({ idempotencyWindow: 0 });
    await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 1);
    await first.outbox.close();
    emu.setFaults(undefined);
    await transporter.sendMail({ from: 'shop@example.test', to: 'bob@example.test', subject: 'Hi', text: 'x' });
    // A worker that takes no job: paused before it starts.
    await transport.queue.pause();
    const { url } = await worker();
    await eventually(
      async () => sample((await get(`${url}/metrics`)).text, 'eml_api_outbox_oldest_waiting_seconds') > 0,
    );
    const text = (await get(`${url}/metrics`)).text;
    expect(sample(text, 'eml_api_outbox_jobs', { state: 'prioritized' })).toBe(1);
    expect(sample(text, 'eml_api_outbox_parked_jobs', { queue: 'eml-api' })).toBe(1);
    await transport.queue.resume();
  });

  it('continues the trace of the request that queued the mail', async () => {
    const tracer = trace.getTracer('the app');
    const transporter = nodemailer.createTransport(transport);
    let traceId = '';
    await tracer.startActiveSpan('POST /orders', async (span) => {
      traceId = span.spanContext().traceId;
      await transporter.sendMail({ from: 'shop@example.test', to: 'ann@example.test', subject: 'Hi', text: 'x' });
      span.end();
    });
    await worker();
    await eventually(() => tracing.spans().some((s) => s.name === 'eml-api.job'));
    const spans = tracing.spans();
    const queued = spans.find((s) => s.name === 'eml-api.queue')!;
    const job = spans.find((s) => s.name === 'eml-api.job')!;
    expect(queued.spanContext().traceId).toBe(traceId);
    expect(job.spanContext().traceId).toBe(traceId);
    expect(job.parentSpanContext?.spanId).toBe(queued.spanContext().spanId);
    expect(job.attributes).toMatchObject({ 'http.response.status_code': 202, 'messaging.destination.name': 'eml-api' });
    expect(job.events.map((e) => e.name)).toEqual(['upload']);
  });

  it('is ready when Redis keeps mail and the service takes the key; says why not otherwise (503), and not while stopping', async () => {
    const good = await worker();
    expect(await get(`${good.url}/healthz`)).toMatchObject({ status: 200 });
    const ready = await get(`${good.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.text)).toEqual({
      status: 'ok',
      checks: { redis: { status: 'ok' }, service: { status: 'ok' }, clock: { status: 'ok' } },
    });

    const refused = await worker({ apiKey: 'emu_not-a-key-of-the-emulator' });
    const notReady = await get(`${refused.url}/readyz`);
    expect(notReady.status).toBe(503);
    expect(JSON.parse(notReady.text).checks.service).toMatchObject({
      status: 'fail',
      reason: expect.stringMatching(/401/),
    });
    expect(notReady.text).not.toContain('emu_not-a-key-of-the-emulator');
    await refused.outbox.close({ abort: true });

    await redis.client.config('SET', 'maxmemory-policy', 'allkeys-lru');
    const evicting = JSON.parse((await get(`${good.url}/readyz`)).text);
    expect(evicting.checks.redis).toMatchObject({ status: 'fail', reason: expect.stringMatching(/allkeys-lru/) });
    await redis.client.config('SET', 'maxmemory-policy', 'noeviction');

    // Stopping with a send in flight: not ready while it finishes (alive all the same), then the port closes.
    emu.setFaults({ latencyMs: 1000 });
    await nodemailer.createTransport(transport).sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
    await eventually(() => good.outbox.activeJobs > 0);
    const closing = good.outbox.close();
    const stopping = await get(`${good.url}/readyz`);
    expect(stopping.status).toBe(503);
    expect(JSON.parse(stopping.text).checks.stopping.status).toBe('fail');
    expect((await get(`${good.url}/healthz`)).status).toBe(200);
    await closing;
    emu.setFaults(undefined);
    await expect(fetch(`${good.url}/healthz`)).rejects.toThrow();
  });
});
