import { parseArgs } from 'node:util';
import { openOutboxQueue } from '../../queue/outbox-queue.js';
import { readOutboxSnapshot, type OutboxSnapshot } from '../../queue/outbox-snapshot.js';
import { requireQueuePeers } from '../../queue/queue-peers.js';
import type { CliIo } from '../cli-io.js';
import { outboxLocation, REDIS_ARG_OPTIONS, REDIS_OPTIONS_HELP } from '../lib/redis-config.js';
import { asUsageError } from '../lib/service-config.js';
import { terminalText } from '../lib/terminal-text.js';
import { untilStopped } from '../lib/until-stopped.js';
import { EXIT, UsageError, wholeFlag } from '../lib/usage-error.js';

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
