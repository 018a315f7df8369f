import { parseArgs } from 'node:util';
import { OutboxWorker, type OutboxJob } from '../../queue/eml-api-worker.js';
import type { OutboxSendResult } from '../../queue/outbox-job.js';
import { resolveWorkerOptions, type OutboxWorkerOptions } from '../../queue/worker-options.js';
import { requireQueuePeers } from '../../queue/redis-connection.js';
import { EmlApiClient } from '../../client/eml-api-client.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { answeredAsNoService } from '../../shared/failure.js';
import { type CliIo, terminalText, EXIT, UsageError, wholeFlag, stopSignals } from '../cli-io.js';
import {
  outboxEncryption,
  outboxLocation,
  OUTBOX_KEYS_HELP,
  parseRate,
  REDIS_ARG_OPTIONS,
  REDIS_OPTIONS_HELP,
  REDIS_ENV_HELP,
  asUsageError,
  SERVICE_ARG_OPTIONS,
  SERVICE_OPTIONS_HELP,
  serviceOptions,
  isJsonIo,
  jsonIo,
  OPERATIONS_ARG_OPTIONS,
  operationsHelp,
  operationsOptions,
} from '../lib/ops-flags.js';
import { statusOf } from '../../observability/tracing.js';
import { redisPassword } from '../../queue/redis-settings.js';
import {
  GroupMember,
  GroupStartError,
  groupRole,
  memberSettings,
  ProcessGroup,
  processesFlag,
  PROCESSES_HELP,
} from '../lib/process-group.js';

/** Help of `eml-api worker`. */
export const WORKER_HELP = `Usage: eml-api worker [options]

Sends the messages EmlApiQueueTransport queued in Redis through the service,
until SIGTERM or SIGINT: then it takes no new message, lets the sends in
flight finish and stops (a second signal stops at once and puts the sends in
flight back in the queue for another worker). Run as many workers as you
like, on any machines, against the same Redis.

Prints a line per message: "sent <job> <status> id=<id>", "retry <job> in <s>s: <error>",
or "failed <job>: <error>" (failed messages stay in the queue: see eml-api queue status).

Options:
${REDIS_OPTIONS_HELP}  --concurrency <n>       messages sent at once by this worker (default 5)
  --rate <N/s>            at most N sends per second across all workers (also N/m, N/h)
  --wait-for-redis        wait for Redis at start for as long as it takes (default: give up after
                          10 s, exit 1, saying why it cannot be reached)
${PROCESSES_HELP}${operationsHelp('the sends in flight')}${SERVICE_OPTIONS_HELP}
Environment: REDIS_URL, REDIS_CLUSTER, REDIS_PASSWORD, EML_API_URL, EML_API_KEY, EML_API_ACCOUNT.
${REDIS_ENV_HELP}${OUTBOX_KEYS_HELP}EML_API_ACCOUNT names the service account the queue sends for, as its producers name it
(their account option): a queue recorded for another account is refused, and so are its jobs.

It checks the key first (without sending mail): a key the service refuses
would fail every queued message, so the worker does not start with one; nor
with an EML_API_URL that answers the check's empty send with a 2xx (not the
service: a web server or single-page app answering every path). Nor
does it start with a Redis that evicts keys (maxmemory-policy other than
noeviction: queued mail would be lost silently); it warns when Redis runs
without its append-only file.

On SIGTERM it takes no new message and lets the sends in flight finish within --grace; then (or
on a second signal) it puts the ones left back in the queue for another worker, and exits.
Exit codes: 0 stopped, every send in flight finished; 1 could not start (refused key...); 2 wrong
usage; 4 stopped when --grace ran out (or on a second signal), sends handed back to the queue.
`;

/** `eml-api worker`: runs an outbox worker until SIGINT/SIGTERM (or `io.signal`). */
export async function workerCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      ...SERVICE_ARG_OPTIONS,
      ...REDIS_ARG_OPTIONS,
      concurrency: { type: 'string' },
      rate: { type: 'string' },
      'wait-for-redis': { type: 'boolean' },
      processes: { type: 'string' },
      ...OPERATIONS_ARG_OPTIONS,
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(WORKER_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new UsageError(`worker takes no arguments, got "${positionals[0]}"`);
  const concurrency = wholeFlag(values.concurrency, '--concurrency', 1, Number.MAX_SAFE_INTEGER, 5);
  const rateLimit = values.rate === undefined ? undefined : parseRate(values.rate);
  const { warning, ...location } = outboxLocation(values, io.env);
  if (warning) io.stderr.write(`warning: ${warning}\n`);
  const service = serviceOptions(values, io.env);
  const encryption = outboxEncryption(io.env);
  // A missing bullmq or ioredis is a failure to run (exit 1).
  requireQueuePeers();
  const operations = operationsOptions(values, 'eml-api worker --http-port');
  if (operations.logFormat === 'json') io = jsonIo(io, [service.apiKey]);
  // In JSON mode each message's outcome is a JSON line with fixed field names.
  const json = isJsonIo(io) ? io.jsonLogger : undefined;
  const processes = processesFlag(values.processes);
  const workerOptions: OutboxWorkerOptions = {
    ...location,
    ...service,
    concurrency,
    ...(rateLimit ? { rateLimit } : {}),
    ...(encryption ? { encryption } : {}),
    ...(io.env.EML_API_ACCOUNT ? { account: io.env.EML_API_ACCOUNT } : {}),
    ...(values['wait-for-redis'] ? { waitForRedis: true } : {}),
  };
  // A wrong REDIS_URL is said at once, not after the key's check over the network.
  asUsageError(() => resolveWorkerOptions(workerOptions));
  // Its primary checked the key, and serves the health and metrics port.
  const member = groupRole(io.env) === 'worker' ? new GroupMember() : undefined;
  if (member) {
    try {
      return await runWorker(member);
    } finally {
      member.close();
    }
  }
  await checkKey(service, io);
  if (processes !== undefined) {
    return runWorkerGroup(processes, operations, [service.apiKey, redisPassword(location.connection)], io, {
      queue: location.queueName ?? 'eml-api',
      concurrency,
      rate: rateLimit,
    });
  }
  return runWorker(undefined);

  async function runWorker(member: GroupMember | undefined): Promise<number> {
    const groupMetrics = member ? memberSettings(io.env).metrics : undefined;
    const outbox = asUsageError(
      () =>
        new OutboxWorker({
          ...workerOptions,
          ...(member
            ? { metrics: groupMetrics ?? false }
            : {
                ...(operations.http ? { http: operations.http } : {}),
                ...(operations.metrics === false ? { metrics: false } : {}),
              }),
        }),
    );
    let sent = 0;
    let failed = 0;
    outbox.on('sent', (job: OutboxJob, result: OutboxSendResult) => {
      sent++;
      if (json)
        return json.info(
          { ...jobFields(job), id: result.id, status: statusOf(result.response) },
          'Queued message sent',
        );
      io.stdout.write(`sent ${jobName(job)} ${terminalText(result.response)} id=${terminalText(result.id ?? '-')}\n`);
    });
    outbox.on('retrying', (job: OutboxJob, err: EmlApiError, delayMs: number | undefined) => {
      if (json) return json.warn({ ...jobFields(job), ...errorFields(err), delayMs }, 'Queued message will be retried');
      const wait = delayMs === undefined ? '' : ` in ${Math.ceil(delayMs / 1000)}s`;
      io.stderr.write(`retry ${jobName(job)}${wait}: ${describeError(err)}\n`);
    });
    outbox.on('failed', (job: OutboxJob, err: EmlApiError) => {
      failed++;
      if (json) return json.error({ ...jobFields(job), ...errorFields(err) }, 'Queued message failed');
      io.stderr.write(`failed ${jobName(job)}: ${describeError(err)}\n`);
    });
    outbox.on('error', (err: Error) => io.stderr.write(`worker error: ${terminalText(err.message)}\n`));
    outbox.on('warning', (message: string) => io.stderr.write(`warning: ${terminalText(message)}\n`));

    // In a group the primary counts the signals (systemd and a terminal signal every process): a process
    // stops once for all of them, and at once when the primary says so or a second signal reaches it.
    const stop = stopSignals(member ? abortedBy(member.stopRequested) : io.signal);
    if (member) void member.hurryRequested.then(stop.hurry);
    try {
      // An evicting Redis rejects the start (exit 1, the worker closed).
      const ready = await Promise.race([outbox.started.then(() => true), stop.first.then(() => false)]);
      if (ready && member) {
        member.serveMetrics(groupMetrics?.registry);
        member.serveReadiness(outbox.readinessChecks, [service.apiKey, redisPassword(location.connection)]);
        member.started();
        await stop.first;
      } else if (ready) {
        const rate = rateLimit
          ? `, at most ${rateLimit.max} per ${rateLimit.duration / 1000} s across all workers`
          : '';
        io.stdout.write(`Worker sending from queue "${outbox.queueName}", ${concurrency} at a time${rate}\n`);
        if (outbox.http) {
          io.stdout.write(
            `Health and metrics on http://${outbox.http.host}:${outbox.http.port} (/healthz, /readyz, /metrics)\n`,
          );
        }
        await stop.first;
      }
      // Also when the signal came before the worker was ready: it may have taken jobs.
      io.stdout.write(
        `Stopping: finishing the sends in flight (up to ${operations.grace / 1000} s; signal again to stop at once)\n`,
      );
      // Once the grace period is over (or a second signal), the sends left are aborted and handed back.
      let graceTimer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<void>((resolve) => (graceTimer = setTimeout(resolve, operations.grace)));
      await Promise.race([
        outbox.close(),
        Promise.race([stop.second, graceOver]).then(() => outbox.close({ abort: true })),
      ]);
      clearTimeout(graceTimer);
      await outbox.close();
    } finally {
      stop.dispose();
    }
    const handedBack = outbox.handedBack;
    io.stdout.write(
      `Worker ${member ? `process ${process.pid} ` : ''}stopped: ${sent} sent, ${failed} failed${handedBack ? `, ${handedBack} handed back to the queue` : ''}\n`,
    );
    const code = handedBack > 0 ? EXIT.cutShort : EXIT.ok;
    await member?.stopped(code, handedBack);
    return code;
  }
}

/** `eml-api worker --processes`, in the primary; a second SIGTERM stops at once, the sends in flight handed back. */
async function runWorkerGroup(
  processes: number,
  operations: ReturnType<typeof operationsOptions>,
  secrets: (string | undefined)[],
  io: CliIo,
  what: { queue: string; concurrency: number; rate: { max: number; duration: number } | undefined },
): Promise<number> {
  const group = new ProcessGroup({
    role: 'worker',
    processes,
    grace: operations.grace,
    http: operations.http,
    metrics: operations.metrics !== false,
    secrets,
    log: (line) => io.stderr.write(`${new Date().toISOString()} ${line}\n`),
  });
  const stop = stopSignals(io.signal);
  try {
    const starting = group.start();
    // A stop while starting: start() ends without the processes, stopped below.
    starting.catch(() => undefined);
    const started = await Promise.race([starting.then(() => true), stop.first.then(() => false)]);
    if (started) {
      const rate = what.rate ? `, at most ${what.rate.max} per ${what.rate.duration / 1000} s across all workers` : '';
      io.stdout.write(
        `Worker sending from queue "${what.queue}" in ${processes} processes, ${what.concurrency} at a time in each${rate}\n`,
      );
      const endpoint = group.endpoint;
      if (endpoint) {
        io.stdout.write(
          `Health and metrics on http://${endpoint.host}:${endpoint.port} (/healthz, /readyz, /metrics)\n`,
        );
      }
      await stop.first;
    }
    io.stdout.write(
      `Stopping: finishing the sends in flight (up to ${operations.grace / 1000} s; signal again to stop at once)\n`,
    );
    void stop.second.then(() => group.hurry());
    const code = await group.stop();
    io.stdout.write(
      `Worker stopped (${processes} processes)${group.givenUp ? `: ${group.givenUp} handed back to the queue` : ''}\n`,
    );
    return code;
  } catch (err) {
    if (err instanceof GroupStartError) return err.exitCode;
    throw err;
  } finally {
    stop.dispose();
  }
}

/**
 * Checks the key before the worker takes any job: a refused key would fail every queued message at
 * once (401 and 403 are permanent), and a host that answers a 2xx to the empty send is not the service
 * (a web server behind a wrong EML_API_URL) and would take every message and deliver none. An
 * unreachable service is only a warning: the queue retries.
 */
async function checkKey(service: ReturnType<typeof serviceOptions>, io: CliIo): Promise<void> {
  const client = asUsageError(() => new EmlApiClient({ ...service, retry: false, timeouts: { total: 10_000 } }));
  try {
    await client.verify();
  } catch (err) {
    if (err instanceof EmlApiError && (err.code === 'EAUTH' || answeredAsNoService(err))) throw err;
    io.stderr.write(
      `warning: could not check the key (${terminalText((err as Error).message)}); starting anyway, the queue retries\n`,
    );
  } finally {
    await client.close();
  }
}

/** None when encrypted or a JSON send. */
function jobFields(job: OutboxJob): Record<string, unknown> {
  return { job: String(job.id), messageId: job.data?.messageId || undefined, attempt: job.attemptsMade };
}

function errorFields(err: EmlApiError): Record<string, unknown> {
  return { code: err.code, status: err.responseCode, apiCode: err.apiCode, error: err.message };
}

function jobName(job: OutboxJob): string {
  return terminalText(String(job.id));
}

function describeError(err: EmlApiError): string {
  const code = typeof err.code === 'string' ? ` [${err.code}]` : '';
  return `${terminalText(err.message)}${code}`;
}

/** A signal aborted once `stop` resolves. */
function abortedBy(stop: Promise<void>): AbortSignal {
  const controller = new AbortController();
  void stop.then(() => controller.abort());
  return controller.signal;
}
