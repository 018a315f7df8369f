import type { EventEmitter } from 'node:events';
import type { Queue } from 'bullmq';
import type { EmlApiClient } from '../client/eml-api-client.js';
import type { EmlApiError } from '../shared/eml-api-error.js';
import { EmlApiMetrics } from '../observability/metrics.js';
import {
  resolveOpsHttpOptions,
  startOpsEndpoint,
  type OpsEndpoint,
  type ReadinessCheck,
} from '../observability/ops-server.js';
import { endSend, statusOf, watchSends, startSpan } from '../observability/tracing.js';
import type { RunOutcome } from './job-runner.js';
import type { OutboxJob, OutboxJobRecord, OutboxJobData, OutboxSendResult } from './outbox-job.js';
import { readOutboxSnapshot } from './outbox-admin.js';
import type { QueueLocation } from './queue-location.js';
import { loadBullmq, type OutboxRedisClient } from './redis-connection.js';
import { outboxRedisReadiness } from './redis-settings.js';

/** What a worker's telemetry watches: its events, client, Redis and queue, and how many jobs it runs. */
export interface WorkerTelemetrySettings {
  /** Checked here. */
  http: unknown;
  /** On by default with `http`, in a registry of the worker's own. */
  metrics: unknown;
  /** Its `'sent'`, `'retrying'` and `'failed'` events are counted. */
  events: EventEmitter;
  client: EmlApiClient;
  /** Opened after the telemetry is checked. */
  redis: () => OutboxRedisClient;
  location: QueueLocation;
  activeJobs: () => number;
  /** Why the worker cannot take jobs although not closing (BullMQ's worker stopped). */
  stuck: () => string | undefined;
  clock: () => string | undefined;
  /** Never shown in a health reason (the API key). */
  secrets: string[];
}

/**
 * A worker's span per job run (a child of the producer's span), sends counted by outcome, queue
 * depth read at each scrape, and `/readyz`.
 */
export class WorkerTelemetry {
  readonly metrics: EmlApiMetrics | undefined;
  readonly #settings: WorkerTelemetrySettings;
  readonly #http: ReturnType<typeof resolveOpsHttpOptions>;
  readonly #removers: (() => void)[] = [];
  #queue: Queue<OutboxJobData, OutboxSendResult> | undefined;
  #endpoint: OpsEndpoint | undefined;

  /** @throws {EmlApiError} `ECONFIG` naming `http` or `metrics` when they are invalid, or prom-client is missing */
  constructor(settings: WorkerTelemetrySettings) {
    this.#settings = settings;
    this.#http = resolveOpsHttpOptions(settings.http, 'http');
    this.metrics = EmlApiMetrics.resolve(
      EmlApiMetrics.defaultWithHttp(settings.metrics, this.#http !== undefined, 'The worker’s http option'),
      "The worker's metrics option",
    );
    this.#removers.push(watchSends(settings.client, 'worker', this.metrics));
    const metrics = this.metrics;
    if (!metrics) return;
    settings.events.on('sent', (_job: OutboxJob, result: OutboxSendResult) =>
      metrics.recordSend('worker', 'sent', undefined, statusOf(result?.response)),
    );
    settings.events.on('retrying', (_job: OutboxJob, err: EmlApiError) => {
      metrics.recordSend('worker', 'retry', err);
      metrics.recordRetry('worker', err.responseCode === undefined ? String(err.code) : String(err.responseCode));
    });
    settings.events.on('failed', (_job: OutboxJob, err: EmlApiError) => metrics.recordSend('worker', 'failed', err));
    this.#removers.push(metrics.addActiveJobs(settings.activeJobs));
    this.#removers.push(metrics.addQueue(settings.location.queueName, () => readOutboxSnapshot(this.#openQueue())));
  }

  get endpoint(): OpsEndpoint | undefined {
    return this.#endpoint;
  }

  /** @throws {EmlApiError} `ECONFIG` when the `http` port cannot listen */
  async start(): Promise<void> {
    if (!this.#http) return;
    const { stuck, secrets } = this.#settings;
    this.#endpoint = await startOpsEndpoint(this.#http, { checks: this.checks(), stuck, secrets }, this.metrics);
  }

  /**
   * Redis, the service and the clock.
   * @param running also whether the worker takes jobs (`/healthz` of a process with its own port)
   */
  checks(running = false): ReadinessCheck[] {
    const { client, stuck } = this.#settings;
    const problem = (why: string | undefined) =>
      why === undefined ? Promise.resolve() : Promise.reject(new Error(why));
    return [
      ...(running ? [{ name: 'running', check: () => problem(stuck()) }] : []),
      outboxRedisReadiness(() => this.#settings.redis(), this.#settings.location),
      { name: 'service', check: async () => void (await client.verify()) },
      { name: 'clock', check: () => problem(this.#settings.clock()) },
    ];
  }

  /** In a consumer span continuing the trace that queued the job; counts runs that put the job back. */
  async run(job: OutboxJob, work: () => Promise<RunOutcome>): Promise<RunOutcome> {
    const data = (job.data ?? {}) as Partial<OutboxJobRecord>;
    const span = startSpan('eml-api.job', {
      kind: 'consumer',
      parent: data.trace,
      attributes: {
        'eml_api.component': 'worker',
        'messaging.system': 'bullmq',
        'messaging.destination.name': this.#settings.location.queueName,
        'messaging.message.id': String(job.id),
        'eml_api.kind': data.kind,
        'eml_api.message_id': data.messageId || undefined,
        'eml_api.attempt': job.attemptsMade + 1,
        'eml_api.bytes': data.size,
      },
    });
    let outcome: RunOutcome;
    try {
      outcome = await span.run(work);
    } catch (err) {
      endSend(span, undefined, 'worker', { err });
      throw err;
    }
    if (outcome.kind === 'sent') {
      endSend(span, undefined, 'worker', { response: outcome.result.response });
    } else if (outcome.kind === 'put-back') {
      span.set({ 'eml_api.outcome': outcome.reason });
      span.end();
      this.metrics?.recordSend('worker', outcome.reason, undefined);
    } else {
      endSend(span, undefined, 'worker', { err: outcome.error });
    }
    return outcome;
  }

  /** The worker is stopping. */
  stopping(): void {
    this.#endpoint?.stopping();
  }

  async close(): Promise<void> {
    for (const remove of this.#removers.splice(0)) remove();
    await this.#endpoint?.close();
    await this.#queue?.close().catch(() => undefined);
  }

  /** On the worker's own connection (BullMQ leaves a connection it was given open). */
  #openQueue(): Queue<OutboxJobData, OutboxSendResult> {
    if (!this.#queue) {
      const { Queue } = loadBullmq();
      this.#queue = new Queue<OutboxJobData, OutboxSendResult>(this.#settings.location.queueName, {
        connection: this.#settings.redis(),
        prefix: this.#settings.location.prefix,
      });
      this.#queue.on('error', () => undefined);
    }
    return this.#queue;
  }
}
