import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import type { Counter, Histogram, Registry } from 'prom-client';
import type * as OtelApi from '@opentelemetry/api';
import { EmlApiError } from '../shared/eml-api-error.js';
import { VERSION } from '../shared/version.js';
import { requirePeer } from '../shared/options-kit.js';

/**
 * A prom-client `Registry`, described by what the package uses of it, so the package's types do not
 * need prom-client installed.
 * @example
 * import { Registry } from 'prom-client';
 * const registry: MetricsRegistry = new Registry();
 */
export interface MetricsRegistry {
  /** The Prometheus text format. */
  metrics(): Promise<string>;
  /** The `Content-Type` of {@link MetricsRegistry.metrics}. */
  readonly contentType: string;
  getSingleMetric(name: string): unknown;
  registerMetric(metric: never): void;
}

/**
 * The `metrics` option of the transport, the relay and the worker:
 * - `true`: prom-client's default registry (`register`), the one most apps expose
 * - `{ registry }`: a registry of your own
 * - `false`: none (the default without `http`)
 * @example
 * new EmlApiTransport({ apiKey, baseUrl, metrics: { registry } });
 */
export type MetricsOption = boolean | { registry: MetricsRegistry };

/** The part of the package a metric is about, its `component` label. */
export type TelemetryComponent = 'transport' | 'worker' | 'relay';

/**
 * The `outcome` label of `eml_api_sends_total`: `sent`; `retry`; `failed` (for good); `rate_limited` (429: the queue
 * paused, the job back without using an attempt); `handed_back` (a stopping worker put the job back).
 */
export type SendOutcome = 'sent' | 'retry' | 'failed' | 'rate_limited' | 'handed_back';

/** One queue's gauges, read at each scrape. */
export interface QueueSnapshot {
  counts: Record<string, number>;
  /** Age of the job waiting longest at the head of the queue, in seconds. */
  oldestWaitingSeconds: number;
  /** Failed jobs parked for a person (`lastError.parked`). */
  parked: number;
}

/** 1 KiB to 64 MiB: a line of text to the service's largest message. */
const BYTE_BUCKETS = Array.from({ length: 9 }, (_, i) => 1024 * 4 ** i);
/** 5 ms (a local service) to a minute (a large upload over a slow link). */
const SECOND_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** One set of metrics per registry: prom-client refuses a second metric of the same name. */
const byRegistry = new WeakMap<object, EmlApiMetrics>();

/**
 * The package's metrics in one prom-client registry: what the transport, the relay and the worker
 * record, and gauges read at each scrape. Labels hold codes and names only (never a key, an address
 * or content), so their number stays small.
 */
export class EmlApiMetrics {
  readonly registry: MetricsRegistry;
  readonly #sends: Counter<'component' | 'outcome' | 'code' | 'status'>;
  readonly #retries: Counter<'component' | 'reason'>;
  readonly #uploadBytes: Histogram<'component'>;
  readonly #uploadSeconds: Histogram<'component'>;
  readonly #relayMessages: Counter<'outcome' | 'code' | 'login'>;
  readonly #senderRefusals: Counter<'reason' | 'login'>;
  readonly #relayBytes: Histogram<never>;
  readonly #relaySeconds: Histogram<never>;
  readonly #connections = new Set<() => number>();
  readonly #activeJobs = new Set<() => number>();
  readonly #queues = new Map<string, () => Promise<QueueSnapshot>>();
  #snapshots: { at: number; read: Promise<[string, QueueSnapshot][]> } | undefined;

  /**
   * Metrics for a `metrics` option value, or undefined when it is off; one object per registry.
   * @param user what asked, named when prom-client is missing, e.g. `The relay's metrics option`
   * @throws {EmlApiError} `ECONFIG` when prom-client is missing or the value is not an option value
   */
  static resolve(option: unknown, user: string): EmlApiMetrics | undefined {
    if (option === undefined || option === false) return undefined;
    const registry =
      option === true
        ? loadPromClient(user).register
        : typeof option === 'object' && option !== null && isRegistry((option as { registry?: unknown }).registry)
          ? (option as { registry: MetricsRegistry }).registry
          : undefined;
    if (registry === undefined) {
      throw new EmlApiError(
        'ECONFIG',
        'Invalid option metrics: expected true (prom-client’s default registry), false, or { registry } with a prom-client Registry',
        { permanent: true },
      );
    }
    let metrics = byRegistry.get(registry);
    if (!metrics) byRegistry.set(registry, (metrics = new EmlApiMetrics(registry, user)));
    return metrics;
  }

  /**
   * The `metrics` option of a part with an `http` port: the one given, or a registry of its own with
   * prom-client's process metrics.
   * @param user what asked, named when prom-client is missing
   */
  static defaultWithHttp(option: unknown, http: boolean, user: string): unknown {
    if (option !== undefined || !http) return option;
    const client = loadPromClient(user);
    const registry = new client.Registry();
    client.collectDefaultMetrics({ register: registry });
    // promtool's lint refuses these gauges for their `_total` suffix; each has a twin without it.
    for (const name of [
      'nodejs_active_handles_total',
      'nodejs_active_requests_total',
      'nodejs_active_resources_total',
    ]) {
      registry.removeSingleMetric(name);
    }
    return { registry };
  }

  private constructor(registry: MetricsRegistry, user: string) {
    const client = loadPromClient(user);
    this.registry = registry;
    const registers = [registry as unknown as Registry];
    const connections = this.#connections;
    const activeJobs = this.#activeJobs;
    new client.Gauge({
      name: 'eml_api_build_info',
      help: 'The version of nodemailer-eml-api; always 1',
      labelNames: ['version'],
      registers,
      // Every process of `--processes` reports the same value: the sum takes one.
      aggregator: 'first',
    }).set({ version: VERSION }, 1);
    this.#sends = new client.Counter({
      name: 'eml_api_sends_total',
      help: 'Sends to the service by the transport and the outbox workers, by outcome, error code (none when sent) and HTTP status (none without an answer)',
      labelNames: ['component', 'outcome', 'code', 'status'],
      registers,
    });
    this.#retries = new client.Counter({
      name: 'eml_api_send_retries_total',
      help: 'Sends tried again: in-process retries of a request (transport, relay), jobs rescheduled by the outbox (worker); by reason (HTTP status or error code)',
      labelNames: ['component', 'reason'],
      registers,
    });
    this.#uploadBytes = new client.Histogram({
      name: 'eml_api_upload_bytes',
      help: 'Request bodies posted to the service’s send endpoints, one per attempt',
      labelNames: ['component'],
      buckets: BYTE_BUCKETS,
      registers,
    });
    this.#uploadSeconds = new client.Histogram({
      name: 'eml_api_upload_duration_seconds',
      help: 'Time from the start of a request to a send endpoint to its answer (or failure), one per attempt',
      labelNames: ['component'],
      buckets: SECOND_BUCKETS,
      registers,
    });
    this.#relayMessages = new client.Counter({
      name: 'eml_api_relay_messages_total',
      help: 'Messages the SMTP relay received with DATA, by outcome (accepted, refused, abandoned: the client left before the end of DATA), SMTP reply code (none when abandoned) and the login that sent them (none without AUTH)',
      labelNames: ['outcome', 'code', 'login'],
      registers,
    });
    this.#senderRefusals = new client.Counter({
      name: 'eml_api_relay_sender_refusals_total',
      help: 'Senders the SMTP relay refused (553 5.7.1) for not being among the addresses of the login (none without AUTH), by reason: mail_from, null_sender, from, sender',
      labelNames: ['reason', 'login'],
      registers,
    });
    this.#relayBytes = new client.Histogram({
      name: 'eml_api_relay_message_bytes',
      help: 'Size of the messages the SMTP relay received (DATA), as the client sent them',
      buckets: BYTE_BUCKETS,
      registers,
    });
    this.#relaySeconds = new client.Histogram({
      name: 'eml_api_relay_message_duration_seconds',
      help: 'Time from DATA to the relay’s reply: receiving, checking and handing on a message',
      buckets: SECOND_BUCKETS,
      registers,
    });
    new client.Gauge({
      name: 'eml_api_relay_connections',
      help: 'SMTP connections open to the relay',
      registers,
      collect() {
        this.set([...connections].reduce((sum, count) => sum + count(), 0));
      },
    });
    new client.Gauge({
      name: 'eml_api_worker_active_jobs',
      help: 'Jobs the outbox workers of this process are sending now',
      registers,
      collect() {
        this.set([...activeJobs].reduce((sum, count) => sum + count(), 0));
      },
    });
    // prom-client collects a scrape's metrics concurrently: the queue gauges share one read.
    const snapshots = () => this.#readQueues();
    new client.Gauge({
      name: 'eml_api_outbox_jobs',
      help: 'Jobs of the outbox by state (BullMQ’s: prioritized are new messages, waiting are retries due), read from Redis at each scrape',
      labelNames: ['queue', 'state'],
      registers,
      aggregator: 'first',
      async collect() {
        const read = await snapshots();
        this.reset();
        for (const [queue, snapshot] of read) {
          for (const [state, count] of Object.entries(snapshot.counts)) this.set({ queue, state }, count);
        }
      },
    });
    new client.Gauge({
      name: 'eml_api_outbox_oldest_waiting_seconds',
      help: 'Age of the job waiting longest at the head of the outbox (0 when none waits)',
      labelNames: ['queue'],
      registers,
      aggregator: 'first',
      async collect() {
        const read = await snapshots();
        this.reset();
        for (const [queue, snapshot] of read) this.set({ queue }, snapshot.oldestWaitingSeconds);
      },
    });
    new client.Gauge({
      name: 'eml_api_outbox_parked_jobs',
      help: 'Failed jobs of the outbox parked for a person: they may have been delivered, or crashed workers',
      labelNames: ['queue'],
      registers,
      aggregator: 'first',
      async collect() {
        const read = await snapshots();
        this.reset();
        for (const [queue, snapshot] of read) this.set({ queue }, snapshot.parked);
      },
    });
  }

  /** Calls within a second share the read; a queue that cannot be read is left out rather than failing the scrape. */
  #readQueues(): Promise<[string, QueueSnapshot][]> {
    const now = Date.now();
    if (this.#snapshots && now - this.#snapshots.at < 1000) return this.#snapshots.read;
    const read = Promise.all(
      [...this.#queues].map(async ([queue, snapshot]) => {
        try {
          return [[queue, await snapshot()] as [string, QueueSnapshot]];
        } catch {
          return [];
        }
      }),
    ).then((lists) => lists.flat());
    this.#snapshots = { at: now, read };
    return read;
  }

  /** Counts a send that ended (or was put off). */
  recordSend(component: TelemetryComponent, outcome: SendOutcome, err: unknown, status?: number): void {
    const api = err instanceof EmlApiError ? err : undefined;
    const code = err === undefined ? 'none' : (api?.code ?? ownCode(err));
    const answered = status ?? api?.responseCode;
    this.#sends.inc({ component, outcome, code, status: answered === undefined ? 'none' : String(answered) });
  }

  /** @param reason an HTTP status (`429`), or an error code (`ETIMEDOUT`) */
  recordRetry(component: TelemetryComponent, reason: string): void {
    this.#retries.inc({ component, reason });
  }

  /** One attempt at a send endpoint: its body's size and duration. */
  recordUpload(component: TelemetryComponent, bytes: number, seconds: number): void {
    this.#uploadBytes.observe({ component }, bytes);
    this.#uploadSeconds.observe({ component }, seconds);
  }

  /**
   * A message the relay answered after DATA, with its session's login (none without AUTH).
   * @param code the reply its client heard; undefined when the client left before the end of DATA (abandoned)
   */
  recordRelayMessage(code: number | undefined, bytes: number, seconds: number, login?: string): void {
    const outcome = code === undefined ? 'abandoned' : code >= 200 && code < 300 ? 'accepted' : 'refused';
    this.#relayMessages.inc({
      outcome,
      ...(code === undefined ? {} : { code: String(code) }),
      ...(login === undefined ? {} : { login }),
    });
    this.#relayBytes.observe(bytes);
    this.#relaySeconds.observe(seconds);
  }

  /** `reason`: mail_from, null_sender, from, sender. */
  recordSenderRefusal(reason: string, login?: string): void {
    this.#senderRefusals.inc({ reason, ...(login === undefined ? {} : { login }) });
  }

  /**
   * Adds a source of `eml_api_relay_connections` (summed over the process's relays).
   * @returns removes it
   */
  addConnections(count: () => number): () => void {
    this.#connections.add(count);
    return () => this.#connections.delete(count);
  }

  /**
   * Adds a source of `eml_api_worker_active_jobs`.
   * @returns removes it
   */
  addActiveJobs(count: () => number): () => void {
    this.#activeJobs.add(count);
    return () => this.#activeJobs.delete(count);
  }

  /**
   * Adds a queue whose depth the gauges show; two workers of one queue in a process report it once.
   * @returns removes it
   */
  addQueue(queue: string, read: () => Promise<QueueSnapshot>): () => void {
    if (this.#queues.has(queue)) return () => undefined;
    this.#queues.set(queue, read);
    return () => {
      if (this.#queues.get(queue) === read) this.#queues.delete(queue);
    };
  }
}

function isRegistry(value: unknown): value is MetricsRegistry {
  const r = value as Partial<MetricsRegistry> | null | undefined;
  return typeof r?.metrics === 'function' && typeof r.registerMetric === 'function';
}

/** A system error's code (`ECONNRESET`), or `ERROR`. */
function ownCode(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z][A-Z0-9_]{0,40}$/.test(code) ? code : 'ERROR';
}

/** The `prom-client` module, as {@link loadPromClient} returns it. */
export type PromClientModule = typeof PromClient;

/** The `@opentelemetry/api` module, as {@link loadOtelApi} returns it. */
export type OtelApiModule = typeof OtelApi;

let promClient: PromClientModule | undefined;
let otelApi: OtelApiModule | null | undefined;

/**
 * Loads the optional `prom-client` the first time metrics are asked for: an app without metrics never loads it.
 * @param user what asked for it, named in the error, e.g. `The metrics option`
 * @throws {EmlApiError} `ECONFIG` saying `npm install prom-client` when it is missing
 */
export function loadPromClient(user: string): PromClientModule {
  return (promClient ??= requirePeer<PromClientModule>('prom-client', 'prom-client', user));
}

// The app's copy when it installed one, as requirePeer resolves.
const requireFromHere = createRequire(import.meta.url);

/**
 * Loads `@opentelemetry/api` when installed, else `undefined`, silently: the API records nothing until
 * the app registers an SDK, and an app with an SDK has the API.
 */
export function loadOtelApi(): OtelApiModule | undefined {
  if (otelApi === undefined) {
    try {
      otelApi = requireFromHere('@opentelemetry/api') as OtelApiModule;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw err;
      otelApi = null;
    }
  }
  return otelApi ?? undefined;
}
