import type { SMTPServer, SMTPServerOptions } from 'smtp-server';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiMetrics } from '../observability/metrics.js';
import { resolveOpsHttpOptions, startOpsEndpoint, type OpsEndpoint } from '../observability/ops-server.js';
import type { ReadinessCheck } from '../observability/health.js';
import { watchSends } from '../observability/send-telemetry.js';
import { startSpan } from '../observability/tracing.js';

type DataHandler = NonNullable<SMTPServerOptions['onData']>;

/**
 * The metrics, spans and health port of the relay (its `metrics` and `http`
 * options): a span per message (`eml-api.relay`, from DATA to the reply, in
 * which the upload or the outbox's store runs, so a queued job continues its
 * trace), messages counted by reply code with their size and time,
 * connections open, and `/readyz` checking what the relay's mode needs.
 *
 * @example
 * const telemetry = new RelayTelemetry(options.http, options.metrics, [apiKey]);
 * const handlers = telemetry.observe(relaySessionHandlers(state));
 */
export class RelayTelemetry {
  readonly metrics: EmlApiMetrics | undefined;
  readonly #http: ReturnType<typeof resolveOpsHttpOptions>;
  readonly #secrets: (string | undefined)[];
  readonly #removers: (() => void)[] = [];
  #endpoint: OpsEndpoint | undefined;

  /** @throws {EmlApiError} `ECONFIG` naming `http` or `metrics`, or saying to install prom-client */
  constructor(http: unknown, metrics: unknown, secrets: (string | undefined)[]) {
    this.#http = resolveOpsHttpOptions(http, 'http');
    this.metrics = EmlApiMetrics.resolve(
      EmlApiMetrics.defaultWithHttp(metrics, this.#http !== undefined, 'The relay’s http option'),
      "The relay's metrics option",
    );
    this.#secrets = secrets;
  }

  /** The health and metrics port, once started. */
  get endpoint(): OpsEndpoint | undefined {
    return this.#endpoint;
  }

  /**
   * The session handlers, with each message (DATA to reply) in a span of its
   * own and counted with its reply code.
   * @example
   * new SMTPServer({ ...telemetry.observe(handlers) });
   */
  observe<H extends { onData: DataHandler }>(handlers: H): H {
    const { metrics } = this;
    const onData: DataHandler = (stream, session, callback) => {
      const started = performance.now();
      const span = startSpan('eml-api.relay', {
        kind: 'server',
        attributes: {
          'eml_api.component': 'relay',
          'eml_api.session': session.id,
          'eml_api.recipients': session.envelope.rcptTo.length,
        },
      });
      const reply: typeof callback = (err, message) => {
        const code = err ? ((err as { responseCode?: number }).responseCode ?? 451) : 250;
        const bytes = (stream as { byteLength?: number }).byteLength ?? 0;
        metrics?.recordRelayMessage(code, bytes, (performance.now() - started) / 1000);
        span.set({ 'smtp.reply_code': code, 'eml_api.bytes': bytes });
        if (err) span.fail(Object.assign(new Error(err.message), { code: `SMTP_${code}` }));
        span.end();
        callback(err, message);
      };
      span.run(() => handlers.onData(stream, session, reply));
    };
    return { ...handlers, onData };
  }

  /**
   * Measures the uploads and retries of a client the relay sends with.
   * @example
   * const client = telemetry.watch(new EmlApiClient(options));
   */
  watch(client: EmlApiClient): EmlApiClient {
    // Not removed: the observer goes with the client's engine when the client is dropped (KeyClients evicts).
    watchSends(client, 'relay', this.metrics);
    return client;
  }

  /**
   * Counts the server's connections, and starts the health and metrics port
   * when the `http` option asks for one.
   * @param checks what `/readyz` checks in the relay's mode
   * @throws {EmlApiError} `ECONFIG` when the port cannot listen
   */
  async start(server: SMTPServer, checks: ReadinessCheck[]): Promise<void> {
    const connections = (server as unknown as { connections?: Set<unknown> }).connections;
    if (this.metrics && connections) this.#removers.push(this.metrics.addConnections(() => connections.size));
    if (!this.#http) return;
    this.#endpoint = await startOpsEndpoint(this.#http, { checks, secrets: this.#secrets }, this.metrics);
  }

  /** `/readyz` fails from now on: the relay is stopping. */
  stopping(): void {
    this.#endpoint?.stopping();
  }

  /** Stops the port and the gauges' sources. */
  async close(): Promise<void> {
    for (const remove of this.#removers.splice(0)) remove();
    await this.#endpoint?.close();
  }
}
