import nodemailer from 'nodemailer';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { trace } from '@opentelemetry/api';
import { EmlApiTransport } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { installTracing, promtoolMissing, promtoolProblems, sample, type TestTracing } from '../helpers/telemetry.js';

/** The transport's metrics and spans, with the real prom-client and the real OpenTelemetry SDK. */

let emu: Emulator;
let tracing: TestTracing;
beforeAll(async () => {
  emu = await startEmulator();
  tracing = installTracing();
});
afterAll(async () => {
  await tracing?.shutdown();
  await emu?.close();
});
beforeEach(() => {
  emu.reset();
  emu.setFaults(undefined);
  tracing.reset();
});

const message = (to: string) => ({ from: 'shop@example.test', to, subject: 'Hi', text: 'Hello' });

describe('the transport with metrics and a tracer', () => {
  it('counts sends by outcome and status, retries by reason, and measures each upload', async () => {
    const registry = new Registry();
    const transport = new EmlApiTransport({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      metrics: { registry },
      retry: { attempts: 3, delay: 1, maxDelay: 10 },
    });
    const transporter = nodemailer.createTransport(transport);
    try {
      await transporter.sendMail(message('ann@example.test'));
      await transporter.sendMail(message('bob@example.test'));
      emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
      await expect(transporter.sendMail(message('cy@example.test'))).rejects.toMatchObject({ responseCode: 503 });
    } finally {
      await transport.close();
    }
    const text = await registry.metrics();
    expect(sample(text, 'eml_api_sends_total', { component: 'transport', outcome: 'sent', status: '202' })).toBe(2);
    expect(
      sample(text, 'eml_api_sends_total', { component: 'transport', outcome: 'failed', code: 'EAPI', status: '503' }),
    ).toBe(1);
    // Two retries of the last send (limit 2), both after a 503: three uploads of it, five in all.
    expect(sample(text, 'eml_api_send_retries_total', { component: 'transport', reason: '503' })).toBe(2);
    expect(sample(text, 'eml_api_upload_bytes_count', { component: 'transport' })).toBe(5);
    expect(sample(text, 'eml_api_upload_duration_seconds_count', { component: 'transport' })).toBe(5);
    expect(sample(text, 'eml_api_upload_bytes_sum', { component: 'transport' })).toBeGreaterThan(5 * 100);
    expect(text).not.toContain(emu.apiKey);
  });

  it('makes a span per sendMail, a child of the app’s span, with its build, uploads, retries and status', async () => {
    const transport = new EmlApiTransport({
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      retry: { attempts: 2, delay: 1, maxDelay: 10 },
    });
    const transporter = nodemailer.createTransport(transport);
    const tracer = trace.getTracer('the app');
    try {
      await tracer.startActiveSpan('POST /checkout', async (request) => {
        await transporter.sendMail(message('ann@example.test'));
        request.end();
      });
      emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
      await expect(transporter.sendMail(message('bob@example.test'))).rejects.toMatchObject({ code: 'EAPI' });
    } finally {
      await transport.close();
    }
    const spans = tracing.spans();
    const request = spans.find((s) => s.name === 'POST /checkout')!;
    const [sent, failed] = spans.filter((s) => s.name === 'eml-api.send');
    expect(sent!.spanContext().traceId).toBe(request.spanContext().traceId);
    expect(sent!.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
    expect(sent!.events.map((e) => e.name)).toEqual(['built', 'upload']);
    expect(sent!.attributes['http.response.status_code']).toBe(202);
    expect(sent!.attributes['eml_api.message_id']).toMatch(/^<.+>$/);
    expect(sent!.status.code).toBe(0);
    expect(failed!.events.map((e) => e.name)).toEqual(['built', 'upload', 'retry', 'upload', 'exception']);
    expect(failed!.events[2]!.attributes).toMatchObject({ attempt: 1, 'eml_api.retry.reason': '503' });
    expect(failed!.attributes).toMatchObject({ 'http.response.status_code': 503, 'error.type': 'EAPI' });
    expect(failed!.status.code).toBe(2);
    expect(JSON.stringify(spans.map((s) => [s.attributes, s.events]))).not.toContain(emu.apiKey);
  });

  it('keeps each queued send’s build and upload in its own span when sends wait for the one connection', async () => {
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, maxConnections: 1 });
    const transporter = nodemailer.createTransport(transport);
    const tracer = trace.getTracer('the app');
    const recipients = ['a', 'b', 'c', 'd', 'e'].map((n) => `${n}@example.test`);
    try {
      // Five requests at once: four sends wait for the slot and are started by another send's end.
      await Promise.all(
        recipients.map((to) =>
          tracer.startActiveSpan(`request for ${to}`, async (request) => {
            await transporter.sendMail(message(to));
            request.end();
          }),
        ),
      );
    } finally {
      await transport.close();
    }
    const spans = tracing.spans();
    const sends = spans.filter((s) => s.name === 'eml-api.send');
    expect(sends).toHaveLength(5);
    for (const send of sends) {
      expect(send.events.map((e) => e.name)).toEqual(['built', 'upload']);
      const parent = spans.find((s) => s.spanContext().spanId === send.parentSpanContext?.spanId)!;
      // The span built the message of its own request, not of the send that freed the slot.
      const recipient = parent.name.replace('request for ', '');
      const built = send.attributes['eml_api.message_id'];
      const delivered = emu.messages().find((m) => m.messageId === built);
      expect(delivered?.recipients).toEqual([recipient]);
    }
  });

  it('refuses a metrics option that is no registry, naming it', () => {
    expect(
      () => new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, metrics: { registry: {} } as never }),
    ).toThrow(/Invalid option metrics/);
  });

  it.skipIf(promtoolMissing)('exposes what promtool check metrics accepts', async () => {
    const registry = new Registry();
    const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, metrics: { registry } });
    await nodemailer.createTransport(transport).sendMail(message('ann@example.test'));
    await transport.close();
    expect(promtoolProblems(await registry.metrics())).toBe('');
  });
});
