import type { Requester } from '../http/requester.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiMetrics, SendOutcome, TelemetryComponent } from './metrics.js';
import { activeSpanEvent, type TelemetrySpan } from './tracing.js';

/** The send endpoints (`/v1/send/eml`, `/v1/send/email`, `/v1/send/group/...`), whose attempts are uploads. */
const SEND_REQUEST = /^POST \/v1\/send\//;

/**
 * Watches a client's request engine for what the sends of `component` do at
 * each attempt: every upload is measured (`eml_api_upload_bytes`,
 * `eml_api_upload_duration_seconds`) and marked on the active span (the
 * span of the send: an `upload` event with its status), every retry counted
 * (`eml_api_send_retries_total`) and marked (a `retry` event).
 *
 * @returns stops watching
 * @example
 * const unwatch = watchSends(client, 'transport', metrics);
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
 * Ends the span of a send and counts it: its outcome, its error's code and
 * the service's status (`202`, `429`).
 * @param outcome what became of it, when it failed (`failed` unless said)
 * @example
 * sent.then((info) => endSend(span, metrics, 'transport', { response: info.response }), (err) => endSend(span, metrics, 'transport', { err }));
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

/** The status of an answer's status line (`202 Accepted`), or undefined. */
export function statusOf(response: string | undefined): number | undefined {
  const match = /^(\d{3})\b/.exec(response ?? '');
  return match ? Number(match[1]) : undefined;
}
