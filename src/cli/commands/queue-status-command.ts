import { parseArgs } from 'node:util';
import { OUTBOX_STATES, readOutboxStatus, type FailedSend } from '../../queue/outbox-inspection.js';
import { openOutboxQueue } from '../../queue/outbox-queue.js';
import { requireQueuePeers } from '../../queue/queue-peers.js';
import { readOutboxSnapshot } from '../../queue/outbox-snapshot.js';
import type { CliIo } from '../cli-io.js';
import { outboxLocation, REDIS_ARG_OPTIONS, REDIS_OPTIONS_HELP, REDIS_ENV_HELP } from '../lib/redis-config.js';
import { asUsageError } from '../lib/service-config.js';
import { terminalText } from '../lib/terminal-text.js';
import { EXIT, UsageError, wholeFlag } from '../lib/usage-error.js';

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
      // A 429's Retry-After: workers run but take nothing until it ends (eml-api worker caps it, maxRetryAfter).
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
  } finally {
    await admin.close();
  }
}

/** Two lines per failed message: what it was, and why it failed. Everything from outside is made terminal-safe. */
function failedLine(send: FailedSend): string {
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
