import { loadPromClient } from '../../observability/telemetry-peers.js';
import type { LogFormat } from './log-format.js';
import { UsageError, wholeFlag } from './usage-error.js';

/**
 * `parseArgs` options of the long-running commands (`relay`, `worker`) for
 * running them in production: the health and metrics port, the log format,
 * and the grace period of a stop.
 */
export const OPERATIONS_ARG_OPTIONS = {
  'http-port': { type: 'string' },
  'http-host': { type: 'string' },
  'no-metrics': { type: 'boolean' },
  'log-format': { type: 'string' },
  grace: { type: 'string' },
} as const;

/** Help lines of {@link OPERATIONS_ARG_OPTIONS}; `what` names what a stop lets finish. */
export function operationsHelp(what: string): string {
  return `  --http-port <n>         serve /healthz, /readyz and /metrics on this port (0 picks a free one)
  --http-host <host>      interface of that port (default 127.0.0.1; 0.0.0.0 for Kubernetes probes)
  --no-metrics            serve health only (metrics need the package prom-client)
  --log-format <format>   text (default) or json: one JSON object per line
  --grace <s>             on SIGTERM, seconds ${what} get to finish (default 25)
`;
}

/** Flag values of {@link OPERATIONS_ARG_OPTIONS} after parsing. */
export interface OperationsFlags {
  'http-port'?: string | undefined;
  'http-host'?: string | undefined;
  'no-metrics'?: boolean | undefined;
  'log-format'?: string | undefined;
  grace?: string | undefined;
}

/** The default `--grace`: inside Kubernetes' default `terminationGracePeriodSeconds` of 30, with room to exit. */
const DEFAULT_GRACE_SECONDS = 25;

/**
 * The options the flags of {@link OPERATIONS_ARG_OPTIONS} stand for.
 * @param user names the command in the error when prom-client is missing, e.g. `eml-api relay --http-port`
 * @throws {UsageError} for a malformed value (exit 2)
 * @throws {EmlApiError} `ECONFIG` (exit 1) when metrics are asked for and prom-client is not installed
 * @example
 * const { http, metrics, logFormat, grace } = operationsOptions(values, 'eml-api relay --http-port');
 */
export function operationsOptions(
  flags: OperationsFlags,
  user: string,
): {
  http: { port: number; host: string } | undefined;
  metrics: false | undefined;
  logFormat: LogFormat;
  grace: number;
} {
  const logFormat = flags['log-format'] ?? 'text';
  if (logFormat !== 'text' && logFormat !== 'json') {
    throw new UsageError(`--log-format: expected text or json, got "${logFormat}"`);
  }
  const grace = seconds(flags.grace, '--grace', DEFAULT_GRACE_SECONDS);
  if (flags['http-port'] === undefined) {
    if (flags['http-host'] !== undefined || flags['no-metrics']) {
      throw new UsageError('--http-host and --no-metrics go with --http-port');
    }
    return { http: undefined, metrics: undefined, logFormat, grace };
  }
  const port = wholeFlag(flags['http-port'], '--http-port', 0, 65535);
  // Checked before the command starts anything: a missing prom-client says what to install, or how to do without.
  if (!flags['no-metrics']) loadPromClient(`${user} (for /metrics; or pass --no-metrics)`);
  return {
    http: { port, host: flags['http-host'] ?? '127.0.0.1' },
    metrics: flags['no-metrics'] ? false : undefined,
    logFormat,
    grace,
  };
}

function seconds(value: string | undefined, flag: string, fallback: number): number {
  return wholeFlag(value, flag, 0, 86_400, fallback) * 1000;
}
