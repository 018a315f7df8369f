import { parseArgs } from 'node:util';
import { retryFailedSends } from '../../queue/outbox-inspection.js';
import { openOutboxQueue } from '../../queue/outbox-queue.js';
import { requireQueuePeers } from '../../queue/queue-peers.js';
import type { CliIo } from '../cli-io.js';
import { outboxLocation, REDIS_ARG_OPTIONS, REDIS_OPTIONS_HELP } from '../lib/redis-config.js';
import { asUsageError } from '../lib/service-config.js';
import { terminalText } from '../lib/terminal-text.js';
import { EXIT } from '../lib/usage-error.js';

/** Help of `eml-api queue retry`. */
export const QUEUE_RETRY_HELP = `Usage: eml-api queue retry [job...] [options]

Puts failed messages back in the outbox's queue, with a fresh retry schedule:
the jobs named (ids as "eml-api queue status" prints them), or every failed one.

Options:
${REDIS_OPTIONS_HELP}  -h, --help              show this help

Environment: REDIS_URL.
Exit codes: 0 done, 1 a named job is not a failed job (or Redis unreachable), 2 wrong usage.
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
  const location = outboxLocation(values, io.env);
  requireQueuePeers();
  const admin = await asUsageError(() => openOutboxQueue(location));
  try {
    const { retried, notFailed } = await retryFailedSends(
      admin.queue,
      positionals.length > 0 ? { ids: positionals } : {},
    );
    for (const id of notFailed) io.stderr.write(`${terminalText(id)}: not a failed job\n`);
    io.stdout.write(`Put back ${retried.length} failed ${retried.length === 1 ? 'message' : 'messages'}\n`);
    return notFailed.length > 0 ? EXIT.failed : EXIT.ok;
  } finally {
    await admin.close();
  }
}
