import type { Context, Span, SpanContext, Tracer } from '@opentelemetry/api';
import { EmlApiError } from '../shared/eml-api-error.js';
import { VERSION } from '../shared/version.js';
import {
  loadOtelApi,
  type OtelApiModule,
  type EmlApiMetrics,
  type SendOutcome,
  type TelemetryComponent,
} from './metrics.js';
import type { Requester } from '../http/requester.js';

/** Undefined values are left out. */
export type TelemetryAttributes = Record<string, string | number | boolean | undefined>;

/**
 * The W3C Trace Context a queued job carries from producer to worker, written by the package itself
 * whatever propagator the app registered, since both ends are the package's.
 * @example
 * const carrier: TraceCarrier = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' };
 */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string;
}

/** OpenTelemetry's `SpanKind`. */
export type TelemetrySpanKind = 'internal' | 'server' | 'client' | 'producer' | 'consumer';

/** A span of the package, or a stand-in that records nothing when `@opentelemetry/api` is not installed. */
export interface TelemetrySpan {
  event(name: string, attributes?: TelemetryAttributes): void;
  set(attributes: TelemetryAttributes): void;
  /** Its code as `error.type`, the exception as an event. */
  fail(err: unknown): void;
  /** Once; later calls do nothing. */
  end(): void;
  /** Runs `fn` with the span active, so what it starts (spans, queued jobs) descends from it. */
  run<T>(fn: () => T): T;
  /** Undefined when it records nothing. */
  carrier(): TraceCarrier | undefined;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

const NOT_RECORDING: TelemetrySpan = {
  event() {},
  set() {},
  fail() {},
  end() {},
  run: (fn) => fn(),
  carrier: () => undefined,
};

/** Starts a span with the package's tracer, a child of `parent` (a job's carrier) or of the active context. */
export function startSpan(
  name: string,
  {
    kind = 'internal',
    attributes = {},
    parent,
  }: { kind?: TelemetrySpanKind; attributes?: TelemetryAttributes; parent?: unknown } = {},
): TelemetrySpan {
  const api = loadOtelApi();
  if (!api) return NOT_RECORDING;
  const base = parent === undefined ? api.context.active() : (contextOf(api, parent) ?? api.context.active());
  const provider = api.trace.getTracerProvider();
  let tracer: Tracer | undefined;
  if (provider instanceof api.ProxyTracerProvider) {
    tracer = provider.getDelegateTracer(TRACER_NAME, VERSION);
    // No SDK and no trace to continue: the span would record and carry nothing.
    if (!tracer && !api.trace.getSpanContext(base)) return NOT_RECORDING;
  }
  const span = (tracer ?? provider.getTracer(TRACER_NAME, VERSION)).startSpan(
    name,
    { kind: spanKinds(api)[kind], attributes: defined(attributes) },
    base,
  );
  return wrap(api, span, api.trace.setSpan(base, span));
}

const TRACER_NAME = 'nodemailer-eml-api';

/** The request engine knows nothing of spans. */
export function activeSpanEvent(name: string, attributes: TelemetryAttributes = {}): void {
  const api = loadOtelApi();
  api?.trace.getActiveSpan()?.addEvent(name, defined(attributes));
}

/** The span of the request that queues a mail, or undefined. */
export function activeTraceCarrier(): TraceCarrier | undefined {
  const api = loadOtelApi();
  if (!api) return undefined;
  return carrierOf(api.trace.getSpanContext(api.context.active()));
}

/** `fn` bound to the current context: run later from elsewhere (a slot freed by another send), it stays in the caller's trace. */
export function bindToActiveContext<F extends (...args: never[]) => unknown>(fn: F): F {
  const api = loadOtelApi();
  return api ? api.context.bind(api.context.active(), fn) : fn;
}

function wrap(api: OtelApiModule, span: Span, context: Context): TelemetrySpan {
  let ended = false;
  return {
    event: (name, attributes = {}) => span.addEvent(name, defined(attributes)),
    set: (attributes) => span.setAttributes(defined(attributes)),
    fail(err) {
      const e = err instanceof Error ? err : new Error(String(err));
      const code = e instanceof EmlApiError ? e.code : ((e as { code?: unknown }).code ?? e.name);
      span.setAttributes({ 'error.type': String(code) });
      // The package's errors are written to be shown, keys redacted; no stack.
      span.addEvent('exception', { 'exception.type': String(code), 'exception.message': e.message });
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: e.message });
    },
    end() {
      if (ended) return;
      ended = true;
      span.end();
    },
    run: (fn) => api.context.with(context, fn),
    carrier: () => carrierOf(span.spanContext()),
  };
}

function carrierOf(spanContext: SpanContext | undefined): TraceCarrier | undefined {
  if (!spanContext || !/^[0-9a-f]{32}$/.test(spanContext.traceId) || /^0+$/.test(spanContext.traceId)) {
    return undefined;
  }
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  const state = spanContext.traceState?.serialize();
  return {
    traceparent: `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`,
    ...(state ? { tracestate: state } : {}),
  };
}

/** Undefined for anything not a valid carrier: a job is outside data. */
function contextOf(api: OtelApiModule, carrier: unknown): Context | undefined {
  const { traceparent, tracestate } = (typeof carrier === 'object' && carrier !== null ? carrier : {}) as Partial<
    Record<keyof TraceCarrier, unknown>
  >;
  const match = typeof traceparent === 'string' ? TRACEPARENT.exec(traceparent) : null;
  if (!match || /^0+$/.test(match[1]!) || /^0+$/.test(match[2]!)) return undefined;
  const spanContext: SpanContext = {
    traceId: match[1]!,
    spanId: match[2]!,
    traceFlags: parseInt(match[3]!, 16) & 1,
    isRemote: true,
    ...(typeof tracestate === 'string' && tracestate.length <= 512
      ? { traceState: api.createTraceState(tracestate) }
      : {}),
  };
  return api.trace.setSpanContext(api.ROOT_CONTEXT, spanContext);
}

function spanKinds(api: OtelApiModule): Record<TelemetrySpanKind, number> {
  const { SpanKind } = api;
  return {
    internal: SpanKind.INTERNAL,
    server: SpanKind.SERVER,
    client: SpanKind.CLIENT,
    producer: SpanKind.PRODUCER,
    consumer: SpanKind.CONSUMER,
  };
}

function defined(attributes: TelemetryAttributes): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const [key, value] of Object.entries(attributes)) if (value !== undefined) out[key] = value;
  return out;
}

const SEND_REQUEST = /^POST \/v1\/send\//;

/**
 * Watches a client's request engine: every upload of `component` is measured and marked on the send's
 * span, every retry counted and marked.
 *
 * @returns stops watching
 */
export function watchSends(
  requester: Pick<Requester, 'observe'>,
  component: TelemetryComponent,
  metrics: EmlApiMetrics | undefined,
): () => void {
  return requester.observe({
    attempt({ command, send, attempt, bytes, seconds, status }) {
      if (!send || !SEND_REQUEST.test(command)) return;
      metrics?.recordUpload(component, bytes, seconds);
      activeSpanEvent('upload', {
        attempt,
        'http.request.body.size': bytes,
        'http.response.status_code': status,
        'eml_api.duration_ms': Math.round(seconds * 1000),
      });
    },
    retry({ command, send, attempt, delayMs, reason }) {
      if (!send || !SEND_REQUEST.test(command)) return;
      metrics?.recordRetry(component, reason);
      activeSpanEvent('retry', { attempt, 'eml_api.retry.delay_ms': delayMs, 'eml_api.retry.reason': reason });
    },
  });
}

/**
 * Ends the span of a send and counts it by outcome, error code and the service's status.
 * @param outcome what became of it, when it failed (`failed` unless said)
 */
export function endSend(
  span: TelemetrySpan,
  metrics: EmlApiMetrics | undefined,
  component: TelemetryComponent,
  ended: { response: string | undefined } | { err: unknown; outcome?: SendOutcome },
): void {
  if ('err' in ended) {
    const status = ended.err instanceof EmlApiError ? ended.err.responseCode : undefined;
    span.set({ 'http.response.status_code': status });
    span.fail(ended.err);
    metrics?.recordSend(component, ended.outcome ?? 'failed', ended.err, status);
  } else {
    const status = statusOf(ended.response);
    span.set({ 'http.response.status_code': status });
    metrics?.recordSend(component, 'sent', undefined, status);
  }
  span.end();
}

/** `202 Accepted` is 202. */
export function statusOf(response: string | undefined): number | undefined {
  const match = /^(\d{3})\b/.exec(response ?? '');
  return match ? Number(match[1]) : undefined;
}
