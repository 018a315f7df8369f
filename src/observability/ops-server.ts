import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { configError, objectOption, refuseUnknownKeys, wholeNumber } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { MetricsRegistry } from './metrics.js';
import { redact } from '../http/request-error.js';

/** A registry, or the sum of a group's (eml-api --processes). */
export interface MetricsSource {
  readonly registry: Pick<MetricsRegistry, 'metrics' | 'contentType'>;
}

/**
 * The `http` option of the relay and the worker: a port of their own for `/healthz`, `/readyz` and
 * `/metrics`. Loopback unless told otherwise, since they are for operators; in a Kubernetes pod,
 * probes come from the node (`host: '0.0.0.0'`, and keep the port out of any Service).
 *
 * @example
 * await startEmlApiRelay({ baseUrl, apiKey, http: { port: 9464, host: '0.0.0.0' } });
 */
export interface OpsHttpOptions {
  /**
   * TCP port; 0 picks a free one.
   * @example
   * await startEmlApiRelay({ baseUrl, apiKey, http: { port: 9464 } });
   */
  port: number;
  /**
   * Interface to listen on.
   * @default '127.0.0.1'
   * @example
   * // Reachable by the kubelet's probes and Prometheus:
   * await startEmlApiRelay({ baseUrl, apiKey, http: { port: 9464, host: '0.0.0.0' } });
   */
  host?: string;
  /**
   * How long `/readyz` reuses a check's result, in ms: frequent probes then cost Redis and the
   * service one request per `readyCacheMs`.
   * @default 10000
   * @example
   * await startOutboxWorker({ connection, apiKey, baseUrl, http: { port: 9465, readyCacheMs: 30_000 } });
   */
  readyCacheMs?: number;
}

/** The running HTTP port of health and metrics. */
export interface OpsEndpoint {
  readonly port: number;
  readonly host: string;
  readonly health: HealthMonitor;
  /** `/readyz` fails from now on; `/healthz` and `/metrics` keep answering. */
  stopping(): void;
  close(): Promise<void>;
}

/**
 * Checks the `http` option.
 * @param name the option's name in errors, e.g. `http`
 * @throws {EmlApiError} `ECONFIG` naming the option
 */
export function resolveOpsHttpOptions(value: unknown, name: string): Required<OpsHttpOptions> | undefined {
  if (value === undefined) return undefined;
  const o = objectOption(value, name, '{ port, host? }');
  refuseUnknownKeys(o, OPS_HTTP_OPTIONS, `${name}.`);
  const port = wholeNumber(o.port, `${name}.port`, 0, 65535);
  if (o.host !== undefined && (typeof o.host !== 'string' || !/^[\x21-\x7e]+$/.test(o.host))) {
    throw configError(`${name}.host`, 'expected an interface address, e.g. 127.0.0.1 or 0.0.0.0');
  }
  const readyCacheMs = wholeNumber(o.readyCacheMs, `${name}.readyCacheMs`, 0, 3_600_000, 10_000);
  return { port, host: (o.host as string | undefined) ?? '127.0.0.1', readyCacheMs };
}

const OPS_HTTP_OPTIONS = ['port', 'host', 'readyCacheMs'] as const satisfies readonly (keyof OpsHttpOptions)[];

/**
 * Starts the port: `GET /healthz` (200 alive, 503 stuck), `GET /readyz` (200, or 503 with the
 * reasons), `GET /metrics` (404 when metrics are off).
 *
 * @throws {EmlApiError} `ECONFIG` when it cannot listen (port in use)
 */
export async function startOpsEndpoint(
  http: Required<OpsHttpOptions>,
  health: Omit<HealthMonitorSettings, 'cacheMs'>,
  metrics: MetricsSource | undefined,
): Promise<OpsEndpoint> {
  const monitor = new HealthMonitor({ ...health, cacheMs: http.readyCacheMs });
  const server = createServer((req, res) => {
    answer(req, res, monitor, metrics).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(`error: ${err instanceof Error ? err.name : 'unknown'}\n`);
    });
  });
  // A slow or idle client must not hold the port.
  server.requestTimeout = 10_000;
  server.keepAliveTimeout = 1_000;
  await listen(server, http);
  const { port } = server.address() as AddressInfo;
  let closed: Promise<void> | undefined;
  return {
    port,
    host: http.host,
    health: monitor,
    stopping: () => monitor.stopping(),
    close() {
      closed ??= new Promise<void>((resolve) => {
        monitor.close();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}

async function answer(
  req: IncomingMessage,
  res: ServerResponse,
  health: HealthMonitor,
  metrics: MetricsSource | undefined,
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0];
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' });
    res.end('method not allowed\n');
    return;
  }
  if (path === '/healthz') return report(res, health.liveness(), req.method);
  if (path === '/readyz') return report(res, await health.readiness(), req.method);
  if (path === '/metrics' && metrics) {
    const text = await metrics.registry.metrics();
    res.writeHead(200, { 'content-type': metrics.registry.contentType, 'cache-control': 'no-store' });
    res.end(req.method === 'HEAD' ? undefined : text);
    return;
  }
  res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
  res.end(
    path === '/metrics'
      ? 'metrics are off (the metrics option, or eml-api --no-metrics)\n'
      : 'not found: /healthz, /readyz, /metrics\n',
  );
}

function report(res: ServerResponse, health: HealthReport, method: string): void {
  res.writeHead(health.status === 'ok' ? 200 : 503, {
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'no-store',
  });
  res.end(method === 'HEAD' ? undefined : `${JSON.stringify(health)}\n`);
}

function listen(server: Server, { port, host }: Required<OpsHttpOptions>): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new EmlApiError(
          'ECONFIG',
          `The health and metrics port could not listen on ${host}:${port}: ${err.message} (${err.code ?? 'error'})`,
          { cause: err, permanent: true },
        ),
      ),
    );
    server.listen(port, host, () => resolve());
  });
}

/** One thing a part needs to do its job now (Redis, the email service, its key), checked for `/readyz`. */
export interface ReadinessCheck {
  /** E.g. `redis`. */
  readonly name: string;
  /** Rejects with why not (its message is shown, secrets taken out). */
  check(): Promise<void>;
}

/** What `/healthz` and `/readyz` answer, as JSON. */
export interface HealthReport {
  status: 'ok' | 'fail';
  checks: Record<string, { status: 'ok' | 'fail'; reason?: string }>;
}

/** Settings of a {@link HealthMonitor}. */
export interface HealthMonitorSettings {
  checks: ReadinessCheck[];
  /** Returns why the process is stuck beyond the event loop, or undefined. */
  stuck?: () => string | undefined;
  /** Never shown in a reason (the API key, a Redis password). */
  secrets?: (string | undefined)[];
  /** How long a readiness result is reused, in ms. @default 10000 */
  cacheMs?: number;
  /** A slower check counts as failed, in ms. @default 5000 */
  timeoutMs?: number;
  /** How late the event loop may run before the process counts as stuck, in ms. @default 10000 */
  maxLagMs?: number;
}

const BEAT = 500;

/**
 * Liveness and readiness of a long-running part: alive while a heartbeat timer runs within
 * `maxLagMs` and nothing says it is stuck; ready while every check passed recently and it is not
 * stopping, so a load balancer sends it no more work while it finishes.
 */
export class HealthMonitor {
  readonly #settings: Required<Omit<HealthMonitorSettings, 'stuck'>> & Pick<HealthMonitorSettings, 'stuck'>;
  readonly #results = new Map<string, { at: number; reason: string | undefined }>();
  readonly #running = new Map<string, Promise<void>>();
  readonly #heartbeat: NodeJS.Timeout;
  #lastBeat = Date.now();
  #stopping = false;
  #stop!: (value: 'stopping') => void;
  readonly #stopped = new Promise<'stopping'>((resolve) => (this.#stop = resolve));

  constructor(settings: HealthMonitorSettings) {
    this.#settings = { cacheMs: 10_000, timeoutMs: 5_000, maxLagMs: 10_000, secrets: [], ...settings };
    this.#heartbeat = setInterval(() => (this.#lastBeat = Date.now()), BEAT);
    this.#heartbeat.unref();
  }

  /** `/healthz` */
  liveness(): HealthReport {
    const late = Date.now() - this.#lastBeat;
    const loop =
      late > this.#settings.maxLagMs + BEAT
        ? `the event loop was blocked: its last turn was ${Math.round(late / 1000)} s ago`
        : undefined;
    const stuck = this.#settings.stuck?.();
    const checks: HealthReport['checks'] = {
      'event-loop': loop ? { status: 'fail', reason: loop } : { status: 'ok' },
      ...(this.#settings.stuck ? { running: stuck ? { status: 'fail', reason: stuck } : { status: 'ok' } } : {}),
    };
    return { status: loop || stuck ? 'fail' : 'ok', checks };
  }

  /** `/readyz`: each check's recent result, or a new run of it. */
  async readiness(): Promise<HealthReport> {
    if (!this.#stopping) {
      const checks: HealthReport['checks'] = {};
      const ran = Promise.all(
        this.#settings.checks.map(async ({ name }) => {
          const cached = this.#results.get(name);
          if (!cached || Date.now() - cached.at >= this.#settings.cacheMs) await this.#run(name);
          const { reason } = this.#results.get(name)!;
          checks[name] = reason === undefined ? { status: 'ok' } : { status: 'fail', reason };
        }),
      );
      // A probe just before a SIGTERM is answered when the stop begins, not after a slow check.
      if ((await Promise.race([ran.then(() => 'ran' as const), this.#stopped])) === 'ran') {
        return { status: Object.values(checks).every((c) => c.status === 'ok') ? 'ok' : 'fail', checks };
      }
    }
    const checks: HealthReport['checks'] = {
      stopping: { status: 'fail', reason: 'shutting down: finishing the work in flight' },
    };
    for (const [name, { reason }] of this.#results) {
      checks[name] = reason === undefined ? { status: 'ok' } : { status: 'fail', reason };
    }
    return { status: 'fail', checks };
  }

  stopping(): void {
    this.#stopping = true;
    this.#stop('stopping');
  }

  close(): void {
    clearInterval(this.#heartbeat);
  }

  /** Once, however many probes ask at the same time. */
  #run(name: string): Promise<void> {
    let running = this.#running.get(name);
    if (running) return running;
    const { check } = this.#settings.checks.find((c) => c.name === name)!;
    running = (async () => {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${this.#settings.timeoutMs} ms`)),
          this.#settings.timeoutMs,
        );
      });
      let reason: string | undefined;
      try {
        await Promise.race([check(), timeout]);
      } catch (err) {
        const text = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim();
        const secrets = this.#settings.secrets.filter((secret): secret is string => Boolean(secret));
        reason = secrets.reduce((said, secret) => redact(said, secret), text).slice(0, 500) || 'failed';
      } finally {
        clearTimeout(timer);
      }
      this.#results.set(name, { at: Date.now(), reason });
    })().finally(() => this.#running.delete(name));
    this.#running.set(name, running);
    return running;
  }
}
