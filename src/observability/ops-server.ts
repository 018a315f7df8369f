import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { configError, objectOption, refuseUnknownKeys, wholeNumber } from '../shared/options-kit.js';
import type { AddressInfo } from 'node:net';
import { EmlApiError } from '../shared/eml-api-error.js';
import { HealthMonitor, type HealthMonitorSettings, type HealthReport } from './health.js';
import type { EmlApiMetrics } from './metrics.js';

/**
 * The `http` option of the relay and the worker: an HTTP port of their own
 * for `/healthz`, `/readyz` and `/metrics`. It listens on loopback unless
 * told otherwise: health and metrics say how busy the service is and why it
 * fails, which is for its operators, not for the network. In a Kubernetes pod,
 * probes come from the node (`host: '0.0.0.0'`, and keep the port out of any
 * Service); a Prometheus elsewhere needs it too.
 *
 * @example
 * await startEmlApiRelay({ baseUrl, apiKey, http: { port: 9464, host: '0.0.0.0' } });
 */
export interface OpsHttpOptions {
  /**
   * TCP port; 0 picks a free one (see `http.port` on the relay or worker).
   * @example
   * http: { port: 9464 }
   */
  port: number;
  /**
   * Interface to listen on.
   * @default '127.0.0.1'
   * @example
   * http: { port: 9464, host: '0.0.0.0' } // reachable by the kubelet's probes and Prometheus
   */
  host?: string;
  /**
   * How long `/readyz` reuses a check's result, in ms: a probe every few
   * seconds then costs Redis and the service one request per `readyCacheMs`.
   * @default 10000
   * @example
   * http: { port: 9464, readyCacheMs: 30_000 }
   */
  readyCacheMs?: number;
}

/**
 * The running HTTP port of health and metrics.
 * @example
 * console.log(`health on http://${relay.http.host}:${relay.http.port}/readyz`);
 */
export interface OpsEndpoint {
  readonly port: number;
  readonly host: string;
  /** Health as `/readyz` and `/healthz` tell it. */
  readonly health: HealthMonitor;
  /** Fails `/readyz` from now on (a stop has begun); `/healthz` and `/metrics` keep answering. */
  stopping(): void;
  /** Stops listening. */
  close(): Promise<void>;
}

/**
 * Checks the `http` option.
 * @param name the option's name in errors, e.g. `http`
 * @throws {EmlApiError} `ECONFIG` naming the option
 * @example
 * const http = resolveOpsHttpOptions(options.http, 'http');
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
 * Starts the HTTP port of health and metrics: `GET /healthz` (200 alive, 503
 * stuck), `GET /readyz` (200 ready, 503 with the reasons), `GET /metrics`
 * (the Prometheus text format; 404 when metrics are off).
 *
 * @throws {EmlApiError} `ECONFIG` when it cannot listen (port in use)
 * @example
 * const ops = await startOpsEndpoint({ port: 0, host: '127.0.0.1', readyCacheMs: 10_000 }, { checks: [] }, metrics);
 */
export async function startOpsEndpoint(
  http: Required<OpsHttpOptions>,
  health: Omit<HealthMonitorSettings, 'cacheMs'>,
  metrics: EmlApiMetrics | undefined,
): Promise<OpsEndpoint> {
  const monitor = new HealthMonitor({ ...health, cacheMs: http.readyCacheMs });
  const server = createServer((req, res) => {
    answer(req, res, monitor, metrics).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(`error: ${err instanceof Error ? err.name : 'unknown'}\n`);
    });
  });
  // A probe keeps no connection open: a slow or idle client must not hold the port.
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
  metrics: EmlApiMetrics | undefined,
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
