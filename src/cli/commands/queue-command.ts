import { parseArgs } from 'node:util';
import { type CliIo, EXIT, UsageError, terminalText, wholeFlag, untilStopped } from '../cli-io.js';
import {
  purgeOutbox,
  openOutboxQueue,
  outboxQueueExists,
  outboxQueueFailure,
  type OutboxQueue,
  retryFailedSends,
  OUTBOX_STATES,
  readOutboxStatus,
  type OutboxFailedSend,
  readOutboxSnapshot,
  type OutboxSnapshot,
} from '../../queue/outbox-admin.js';
import { requireQueuePeers } from '../../queue/redis-connection.js';
import {
  outboxLocation,
  REDIS_ARG_OPTIONS,
  REDIS_OPTIONS_HELP,
  asUsageError,
  REDIS_ENV_HELP,
} from '../lib/ops-flags.js';

/** Help of `eml-api queue`. */
export const QUEUE_HELP = `Usage: eml-api queue <subcommand> [options]

Looks after the outbox: the messages EmlApiQueueTransport queued in Redis
for "eml-api worker" to send.

Subcommands:
  status            counts by state, and the failed messages with their errors
  retry [job...]    put failed messages back in the queue (all of them, or those named)
  watch             the state every few seconds: counts, send rate, the oldest waiting job's age
  purge <job>...    remove jobs and their stored messages from Redis now (--all: the whole queue)

Run "eml-api queue <subcommand> --help" for its options.
Environment: REDIS_URL (or --redis), REDIS_CLUSTER, REDIS_PASSWORD.
`;

/** The subcommands of `eml-api queue`. */
export const QUEUE_SUBCOMMANDS = {
  status: queueStatusCommand,
  retry: queueRetryCommand,
  watch: queueWatchCommand,
  purge: queuePurgeCommand,
} as const;

/** `eml-api queue`: dispatches to status, retry, watch or purge. */
export async function queueCommand(args: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === '--help' || sub === '-h' || sub === 'help') {
    io.stdout.write(QUEUE_HELP);
    return EXIT.ok;
  }
  if (sub === undefined) throw new UsageError('queue needs a subcommand: status, retry, watch or purge');
  if (!Object.hasOwn(QUEUE_SUBCOMMANDS, sub)) {
    throw new UsageError(`unknown queue subcommand "${sub}"; expected status, retry, watch or purge`);
  }
  return QUEUE_SUBCOMMANDS[sub as keyof typeof QUEUE_SUBCOMMANDS](rest, io);
}

/** Help of `eml-api queue purge`. */
export const QUEUE_PURGE_HELP = `Usage: eml-api queue purge <job>... [options]
       eml-api queue purge --all [--force] [options]

Removes queued mail from Redis for good, now: the jobs named (ids as
"eml-api queue status" prints them) with their stored messages, or, with
--all, the whole queue: every job in every state, every stored message, and
every key of the outbox. BullMQ's own removals (queue.obliterate(), remove,
clean, drain, a dashboard's delete) leave the messages in Redis until the
workers' next sweep (every 10 minutes); obliterate leaves the outbox's keys
too. Stop the producers first: a message queued meanwhile may be kept.

Options:
${REDIS_OPTIONS_HELP}  --all                   the whole queue
  --force                 with --all: also the messages being sent right now (without it,
                          nothing is removed while a worker is sending)
  -h, --help              show this help

Environment: REDIS_URL, REDIS_CLUSTER, REDIS_PASSWORD.
Exit codes: 0 done, 1 something was left (being sent, or a named job not found) or Redis unreachable, 2 wrong usage.
`;

/** `eml-api queue purge`: removes jobs and their stored messages, or the whole queue. */
export async function queuePurgeCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      ...REDIS_ARG_OPTIONS,
      all: { type: 'boolean' },
      force: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(QUEUE_PURGE_HELP);
    return EXIT.ok;
  }
  if (values.all && positionals.length > 0) throw new UsageError('queue purge takes --all or job ids, not both');
  if (!values.all && positionals.length === 0) {
    throw new UsageError('queue purge needs the jobs to remove, or --all for the whole queue');
  }
  if (values.force && !values.all) throw new UsageError('--force goes with --all');
  const location = outboxLocation(values, io.env);
  requireQueuePeers();
  const admin = await asUsageError(() => openOutboxQueue(location));
  try {
    const name = terminalText(admin.queue.name);
    const result = await purgeOutbox(admin.queue, values.all ? { force: values.force === true } : { ids: positionals });
    if (values.all && result.busy.length > 0) {
      io.stderr.write(
        `Not purged: ${result.busy.length} ${plural(result.busy.length)} of queue "${name}" ${result.busy.length === 1 ? 'is' : 'are'} being sent right now; stop the workers, or purge with --force\n`,
      );
      return EXIT.failed;
    }
    for (const id of result.busy) io.stderr.write(`${terminalText(id)}: being sent right now: not removed\n`);
    for (const id of result.notFound) io.stderr.write(`${terminalText(id)}: no such job\n`);
    for (const node of result.skippedNodes ?? []) {
      io.stderr.write(`Redis Cluster node ${terminalText(node)}: down, not scanned (it holds none of the queue)\n`);
    }
    const what = `${result.jobs} ${result.jobs === 1 ? 'job' : 'jobs'} and ${result.content} stored ${plural(result.content)}`;
    io.stdout.write(values.all ? `Purged queue "${name}": removed ${what}\n` : `Removed ${what}\n`);
    return result.busy.length > 0 || result.notFound.length > 0 ? EXIT.failed : EXIT.ok;
  } catch (err) {
    throw outboxQueueFailure(admin, err);
  } finally {
    await admin.close();
  }
}

/** A `--queue` or `--prefix` with a typo otherwise reads as an empty outbox. */
async function warnOfMissingQueue(admin: OutboxQueue, io: CliIo): Promise<void> {
  if (await outboxQueueExists(admin.queue)) return;
  const { name, opts } = admin.queue;
  io.stderr.write(
    `warning: Redis holds no queue ${terminalText(JSON.stringify(name))} under the prefix ${terminalText(JSON.stringify(opts.prefix ?? 'bull'))}: check --queue and --prefix\n`,
  );
}

function plural(n: number): string {
  return n === 1 ? 'message' : 'messages';
}

/** Help of `eml-api queue retry`. */
export const QUEUE_RETRY_HELP = `Usage: eml-api queue retry [job...] [options]

Puts failed messages back in the outbox's queue, with a fresh retry schedule:
the jobs named (ids as "eml-api queue status" prints them), or every failed one.
Messages that cannot be sent as they are stay failed, and it says why: those
whose content was removed when the service refused it (queue a corrected
message with sendMail instead), and, unless named, those that may have been
delivered after the service's idempotency window passed (check whether they
arrived; name them to send them again).

Options:
${REDIS_OPTIONS_HELP}  -h, --help              show this help

Environment: REDIS_URL, REDIS_CLUSTER, REDIS_PASSWORD.
${REDIS_ENV_HELP}Exit codes: 0 done, 1 a named job is not a failed job or was not put back (or Redis unreachable), 2 wrong usage.
`;

/** `eml-api queue retry`: puts failed jobs back. */
export async function queueRetryCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { ...REDIS_ARG_OPTIONS, help: { type: 'boolean', short: 'h' } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(QUEUE_RETRY_HELP);
    return EXIT.ok;
  }
  const { warning, ...location } = outboxLocation(values, io.env);
  if (warning) io.stderr.write(`warning: ${warning}\n`);
  requireQueuePeers();
  const admin = await asUsageError(() => openOutboxQueue(location));
  try {
    await warnOfMissingQueue(admin, io);
    const named = positionals.length > 0;
    const { retried, notFailed, skipped } = await retryFailedSends(admin.queue, named ? { ids: positionals } : {});
    for (const id of notFailed) io.stderr.write(`${terminalText(id)}: not a failed job\n`);
    if (named) {
      for (const { queueId, reason } of skipped) io.stderr.write(`${terminalText(queueId)}: not put back: ${reason}\n`);
    } else {
      // One line per reason, not one per message.
      const byReason = new Map<string, number>();
      for (const { reason } of skipped) byReason.set(reason, (byReason.get(reason) ?? 0) + 1);
      for (const [reason, n] of byReason) {
        io.stderr.write(`Left ${n} failed ${plural(n)} as ${n === 1 ? 'it is' : 'they are'}: ${reason}\n`);
      }
    }
    io.stdout.write(`Put back ${retried.length} failed ${plural(retried.length)}\n`);
    return notFailed.length > 0 || (named && skipped.length > 0) ? EXIT.failed : EXIT.ok;
  } catch (err) {
    throw outboxQueueFailure(admin, err);
  } finally {
    await admin.close();
  }
}

/** Help of `eml-api queue status`. */
export const QUEUE_STATUS_HELP = `Usage: eml-api queue status [options]

Prints how many messages of the outbox are in each state, whether workers
wait (the queue paused, or rate limited after a 429 from the service), how
long the one next in line has waited, how many are parked for a person, the
sends of the last minute, and the newest failed ones with their errors (what
the service answered). --json adds oldestWaitingSeconds, parked,
sentLastMinute and failedLastMinute to the counts; "eml-api queue watch"
prints them live.

Options:
${REDIS_OPTIONS_HELP}  --limit <n>             failed messages to list, newest first (default 20)
  --json                  print JSON instead
  -h, --help              show this help

Environment: REDIS_URL, REDIS_CLUSTER, REDIS_PASSWORD.
${REDIS_ENV_HELP}Exit codes: 0 done, 1 Redis unreachable, 2 wrong usage.
`;

/** `eml-api queue status`: counts by state and the failed messages. */
export async function queueStatusCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      ...REDIS_ARG_OPTIONS,
      limit: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(QUEUE_STATUS_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new UsageError(`queue status takes no arguments, got "${positionals[0]}"`);
  const limit = wholeFlag(values.limit, '--limit', 0, Number.MAX_SAFE_INTEGER, 20);
  const { warning, ...location } = outboxLocation(values, io.env);
  if (warning) io.stderr.write(`warning: ${warning}\n`);
  requireQueuePeers();
  const admin = await asUsageError(() => openOutboxQueue(location));
  try {
    await warnOfMissingQueue(admin, io);
    const [status, snapshot] = await Promise.all([
      readOutboxStatus(admin.queue, { limit }),
      readOutboxSnapshot(admin.queue),
    ]);
    const live = {
      oldestWaitingSeconds: snapshot.oldestWaitingSeconds,
      parked: snapshot.parked,
      sentLastMinute: snapshot.sentLastMinute,
      failedLastMinute: snapshot.failedLastMinute,
    };
    if (values.json) {
      io.stdout.write(`${JSON.stringify({ queue: admin.queue.name, ...status, ...live }, null, 2)}\n`);
      return EXIT.ok;
    }
    const counts = OUTBOX_STATES.map((state) => `${state} ${status.counts[state]}`).join(', ');
    const states = [
      status.paused ? 'paused' : undefined,
      // Workers run but take nothing until a 429's Retry-After ends (capped by maxRetryAfter).
      status.rateLimitedMs > 0
        ? `rate limited for ${Math.ceil(status.rateLimitedMs / 1000)} s: the service answered 429, every worker waits`
        : undefined,
    ].filter(Boolean);
    const state = states.length > 0 ? ` (${states.join('; ')})` : '';
    io.stdout.write(`Queue "${terminalText(admin.queue.name)}"${state}: ${counts}\n`);
    io.stdout.write(
      `Oldest waiting ${live.oldestWaitingSeconds.toFixed(1)} s, parked for a person ${live.parked}, in the last minute ${live.sentLastMinute} sent and ${live.failedLastMinute} failed\n`,
    );
    if (status.failed.length > 0) {
      const more = status.counts.failed > status.failed.length ? ` (newest ${status.failed.length})` : '';
      io.stdout.write(`Failed${more}:\n`);
      for (const send of status.failed) io.stdout.write(failedLine(send));
    }
    return EXIT.ok;
  } catch (err) {
    throw outboxQueueFailure(admin, err);
  } finally {
    await admin.close();
  }
}

/** What a failed message was, and why it failed; everything from outside made terminal-safe. */
function failedLine(send: OutboxFailedSend): string {
  const { error } = send;
  const to = send.group
    ? `group ${send.group}`
    : send.encrypted
      ? '(encrypted)'
      : (send.envelope?.to ?? []).join(', ') || '-';
  const when = send.failedAt ? send.failedAt.toISOString() : '-';
  const status = [error.code, error.responseCode, error.apiCode].filter((v) => v !== undefined).join(' ');
  const head = `  ${send.queueId}  ${when}  ${send.kind ?? '?'} to ${to}  attempts ${send.attempts}`;
  return `${terminalText(head)}\n    ${terminalText(status ? `${status}: ${error.message}` : error.message)}\n`;
}

/** Help of `eml-api queue watch`. */
export const QUEUE_WATCH_HELP = `Usage: eml-api queue watch [options]

Prints the outbox's state every few seconds until interrupted, for people
without a dashboard (as Postfix's qshape, or watch mailq): the jobs by state,
those parked for a person, the sends of the last minute per second, and how
long the job next in line has waited since it was queued.

  2026-11-25T17:02:11Z  prioritized 120  waiting 0  delayed 3  active 10  failed 1 (parked 0)  sent 18.4/s  oldest 6.5s

Options:
${REDIS_OPTIONS_HELP}  --interval <s>          seconds between lines (default 2)
  --count <n>             stop after n lines (default: until interrupted)
  --json                  print each line as a JSON object
  -h, --help              show this help

Environment: REDIS_URL, REDIS_CLUSTER, REDIS_PASSWORD.
Exit codes: 0 done, 1 Redis unreachable, 2 wrong usage.
`;

/** `eml-api queue watch`: the outbox's live state, a line every `--interval` seconds. */
export async function queueWatchCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      ...REDIS_ARG_OPTIONS,
      interval: { type: 'string' },
      count: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(QUEUE_WATCH_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new UsageError(`queue watch takes no arguments, got "${positionals[0]}"`);
  const interval = wholeFlag(values.interval ?? '2', '--interval', 1, 3600) * 1000;
  const count = values.count === undefined ? Infinity : wholeFlag(values.count, '--count', 1, 1_000_000);
  const location = outboxLocation(values, io.env);
  requireQueuePeers();
  const admin = await asUsageError(() => openOutboxQueue(location));
  const stopped = untilStopped(io.signal).then(() => true);
  try {
    await warnOfMissingQueue(admin, io);
    for (let printed = 0; printed < count; printed++) {
      const snapshot = await readOutboxSnapshot(admin.queue);
      io.stdout.write(values.json ? jsonLine(admin.queue.name, snapshot) : textLine(snapshot));
      if (printed + 1 >= count) break;
      let timer: NodeJS.Timeout | undefined;
      const stop = await Promise.race([
        stopped,
        new Promise<false>((r) => (timer = setTimeout(() => r(false), interval))),
      ]);
      clearTimeout(timer);
      if (stop) break;
    }
    return EXIT.ok;
  } catch (err) {
    throw outboxQueueFailure(admin, err);
  } finally {
    await admin.close();
  }
}

function textLine(snapshot: OutboxSnapshot): string {
  const { counts } = snapshot;
  const time = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const states = `prioritized ${counts.prioritized}  waiting ${counts.waiting}  delayed ${counts.delayed}  active ${counts.active}`;
  const failed = `failed ${counts.failed} (parked ${snapshot.parked})`;
  const rate = `sent ${(snapshot.sentLastMinute / 60).toFixed(1)}/s`;
  const oldest = `oldest ${snapshot.oldestWaitingSeconds.toFixed(1)}s`;
  return `${terminalText(`${time}  ${states}  ${failed}  ${rate}  ${oldest}${snapshot.paused ? '  (paused)' : ''}`)}\n`;
}

function jsonLine(queue: string, snapshot: OutboxSnapshot): string {
  return `${JSON.stringify({ time: new Date().toISOString(), queue, ...snapshot, sentPerSecond: snapshot.sentLastMinute / 60 })}\n`;
}
