import { parseArgs } from 'node:util';
import { purgeOutbox } from '../../queue/outbox-purge.js';
import { openOutboxQueue } from '../../queue/outbox-queue.js';
import { requireQueuePeers } from '../../queue/queue-peers.js';
import type { CliIo } from '../cli-io.js';
import { outboxLocation, REDIS_ARG_OPTIONS, REDIS_OPTIONS_HELP } from '../lib/redis-config.js';
import { asUsageError } from '../lib/service-config.js';
import { terminalText } from '../lib/terminal-text.js';
import { EXIT, UsageError } from '../lib/usage-error.js';

/** Help of `eml-api queue purge`. */
export const QUEUE_PURGE_HELP = `Usage: eml-api queue purge <job>... [options]
       eml-api queue purge --all [--force] [options]

Removes queued mail from Redis for good, now: the jobs named (ids as
"eml-api queue status" prints them) with their stored messages, or, with
--all, the whole queue: every job in every state, every stored message, and
every key of the outbox. BullMQ's own removals (queue.obliterate(), remove,
clean, a dashboard's delete) leave the messages in Redis until the workers'
sweeper finds them, an hour later at the soonest. Stop the producers first:
a message queued meanwhile may be kept.

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
  } finally {
    await admin.close();
  }
}

function plural(n: number): string {
  return n === 1 ? 'message' : 'messages';
}
