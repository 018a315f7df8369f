import type { CliIo } from '../cli-io.js';
import { EXIT, UsageError } from '../lib/usage-error.js';
import { queuePurgeCommand } from './queue-purge-command.js';
import { queueRetryCommand } from './queue-retry-command.js';
import { queueStatusCommand } from './queue-status-command.js';
import { queueWatchCommand } from './queue-watch-command.js';

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
