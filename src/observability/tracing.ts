import type { Context, Span, SpanContext } from '@opentelemetry/api';
import { EmlApiError } from '../shared/eml-api-error.js';
import { VERSION } from '../shared/version.js';
import { loadOtelApi, type OtelApiModule } from './telemetry-peers.js';

/** Values of span attributes and events; undefined ones are left out. */
export type TelemetryAttributes = Record<string, string | number | boolean | undefined>;

/**
 * The trace context a queued job carries from its producer to the worker
 * that sends it: W3C Trace Context (`traceparent`, and `tracestate` when
 * there is one), written by the package itself, whatever propagator the app
 * registered, since both ends are the package's.
 * @example
 * const carrier: TraceCarrier = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' };
 */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string;
}

/** How a span relates to the world, as OpenTelemetry's `SpanKind`. */
export type TelemetrySpanKind = 'internal' | 'server' | 'client' | 'producer' | 'consumer';

/**
 * A span of the package, or a stand-in that records nothing when
 * `@opentelemetry/api` is not installed.
 * @example
 * const span = startSpan('eml-api.send', { kind: 'client' });
 * try { await span.run(() => upload()); } catch (err) { span.fail(err); throw err; } finally { span.end(); }
 */
export interface TelemetrySpan {
  /** Adds an event (a point in time with attributes) to the span. */
  event(name: string, attributes?: TelemetryAttributes): void;
  /** Sets attributes. */
  set(attributes: TelemetryAttributes): void;
  /** Marks the span failed with the error: its code as `error.type`, the exception as an event. */
  fail(err: unknown): void;
  /** Ends the span (once; later calls do nothing). */
  end(): void;
  /** Runs `fn` with the span as the active one, so what it starts (spans, queued jobs) descends from it. */
  run<T>(fn: () => T): T;
  /** The span's context as a carrier, for a job to take along; undefined when it records nothing. */
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

/**
 * Starts a span with the package's tracer (`nodemailer-eml-api`), a child of
 * `parent` when given (a job's carrier), else of the active context.
 * @example
 * const span = startSpan('eml-api.job', { kind: 'consumer', parent: job.data.trace, attributes: { 'messaging.message.id': job.id } });
 */
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
  const span = api.trace
    .getTracer('nodemailer-eml-api', VERSION)
    .startSpan(name, { kind: spanKinds(api)[kind], attributes: defined(attributes) }, base);
  return wrap(api, span, api.trace.setSpan(base, span));
}

/**
 * Adds an event to the active span, if any: how the request engine, which
 * knows nothing of spans, marks retries on the span of the send it serves.
 * @example
 * activeSpanEvent('retry', { attempt: 2, 'retry.delay_ms': 500 });
 */
export function activeSpanEvent(name: string, attributes: TelemetryAttributes = {}): void {
  const api = loadOtelApi();
  api?.trace.getActiveSpan()?.addEvent(name, defined(attributes));
}

/**
 * The active context as a carrier (the span of the request that queues a
 * mail), or undefined when no span is active.
 * @example
 * const trace = activeTraceCarrier(); // { traceparent: '00-...-01' }
 */
export function activeTraceCarrier(): TraceCarrier | undefined {
  const api = loadOtelApi();
  if (!api) return undefined;
  return carrierOf(api.trace.getSpanContext(api.context.active()));
}

/**
 * `fn`, bound to the context active now: run later from elsewhere (a slot
 * freed by another send), it still runs in the caller's trace.
 * @example
 * limiter.run(bindToActiveContext(() => store(message)));
 */
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
      // The message only: the package's errors are written to be shown, keys redacted; no stack.
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

/** The remote context a carrier names; undefined for anything that is not a valid one (a job is outside data). */
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
