import { parseArgs } from 'node:util';
import { retryFailedSends } from '../../queue/outbox-inspection.js';
import { openOutboxQueue } from '../../queue/outbox-queue.js';
import { requireQueuePeers } from '../../queue/queue-peers.js';
import type { CliIo } from '../cli-io.js';
import { outboxLocation, REDIS_ARG_OPTIONS, REDIS_OPTIONS_HELP, REDIS_ENV_HELP } from '../lib/redis-config.js';
import { asUsageError } from '../lib/service-config.js';
import { terminalText } from '../lib/terminal-text.js';
import { EXIT } from '../lib/usage-error.js';

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
    const named = positionals.length > 0;
    const { retried, notFailed, skipped } = await retryFailedSends(admin.queue, named ? { ids: positionals } : {});
    for (const id of notFailed) io.stderr.write(`${terminalText(id)}: not a failed job\n`);
    if (named) {
      for (const { queueId, reason } of skipped) io.stderr.write(`${terminalText(queueId)}: not put back: ${reason}\n`);
    } else {
      // Every failed message: one line per reason, not one per message.
      const byReason = new Map<string, number>();
      for (const { reason } of skipped) byReason.set(reason, (byReason.get(reason) ?? 0) + 1);
      for (const [reason, n] of byReason) {
        io.stderr.write(`Left ${n} failed ${plural(n)} as ${n === 1 ? 'it is' : 'they are'}: ${reason}\n`);
      }
    }
    io.stdout.write(`Put back ${retried.length} failed ${plural(retried.length)}\n`);
    return notFailed.length > 0 || (named && skipped.length > 0) ? EXIT.failed : EXIT.ok;
  } finally {
    await admin.close();
  }
}

function plural(n: number): string {
  return n === 1 ? 'message' : 'messages';
}
