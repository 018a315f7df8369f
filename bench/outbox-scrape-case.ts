/**
 * What reading the outbox's state costs Redis with many failed jobs: a
 * metrics scrape (`readOutboxSnapshot`, also each `eml-api queue watch`
 * line) and `eml-api queue status` (`readOutboxStatus` and the snapshot),
 * with 100,000 failed jobs keeping 4 KiB of content each, and 10,000 keeping
 * 40 KiB. The reference, in the same run on the same Redis, is how parked
 * jobs used to be counted: one script reading the data of the newest 10,000
 * failed jobs, which blocked Redis while it ran. Figures: the wall time of
 * each read, the longest single Redis command it ran (SLOWLOG, which measures
 * time inside Redis: what every other client waits behind), and the commands
 * Redis ran for it (INFO commandstats, those of scripts included).
 * `npm run bench -- --only scrape`.
 */
import type { Redis } from 'ioredis';
import { EmlApiQueueTransport, readOutboxSnapshot, readOutboxStatus } from '../src/queue/index.js';
import { outboxKeys, resolveQueueLocation } from '../src/queue/queue-location.js';
import { addFailedJobs } from '../test/helpers/outbox.js';
import { startRedisServer } from '../test/helpers/redis-server.js';
import type { BenchRow } from './bench-row.js';

/** The count of parked jobs before they were kept in a set of their own (the reference). */
const COUNT_PARKED_BY_SCAN = `
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local parked = 0
for _, id in ipairs(ids) do
  local data = redis.call('HGET', ARGV[1] .. id, 'data')
  if data and string.find(data, '"parked":"', 1, true) then parked = parked + 1 end
end
return parked
`;

const ROUNDS = 5;

interface Cost {
  /** Median wall time of a read, in ms. */
  ms: number;
  /** The longest Redis command of a read, in ms (the median over the rounds). */
  longestMs: number;
  /** Commands Redis ran for one read. */
  commands: number;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

async function commandsRun(redis: Redis): Promise<number> {
  const stats = await redis.info('commandstats');
  return [...stats.matchAll(/calls=(\d+)/g)].reduce((sum, [, calls]) => sum + Number(calls), 0);
}

/** Runs `read` ROUNDS times; its wall time, its longest command inside Redis, and its commands. */
async function measure(redis: Redis, read: () => Promise<unknown>): Promise<Cost> {
  await read();
  const times: number[] = [];
  const longest: number[] = [];
  let commands = 0;
  for (let round = 0; round < ROUNDS; round++) {
    await redis.slowlog('RESET');
    const before = await commandsRun(redis);
    const started = performance.now();
    await read();
    times.push(performance.now() - started);
    // SLOWLOG RESET and INFO themselves run once each between the two counts.
    commands = (await commandsRun(redis)) - before - 2;
    const entries = (await redis.slowlog('GET', 1000)) as [number, number, number, string[]][];
    const reads = entries.filter(([, , , args]) => !['slowlog', 'info'].includes(String(args[0]).toLowerCase()));
    longest.push(Math.max(0, ...reads.map(([, , micros]) => micros)) / 1000);
  }
  return { ms: median(times), longestMs: median(longest), commands };
}

/** One population of failed jobs: the snapshot and `queue status` against the previous count. */
async function population(count: number, contentBytes: number): Promise<BenchRow[]> {
  const redis = await startRedisServer({ args: ['--slowlog-log-slower-than', '0', '--slowlog-max-len', '100000'] });
  const transport = new EmlApiQueueTransport({ connection: redis.url });
  try {
    const filling = performance.now();
    const ids = await addFailedJobs(redis.client, { count, contentBytes, parkedEvery: 100 });
    // The jobs parked among them, as workers enter them in the queue's parked set.
    const parkedKey = outboxKeys(resolveQueueLocation(undefined, undefined)).parked;
    for (let i = 0; i < ids.length; i += 100) await redis.client.zadd(parkedKey, 0, ids[i]!);
    const memory = /used_memory_human:(\S+)/.exec(await redis.client.info('memory'))?.[1];
    console.log(
      `  ${count.toLocaleString('en')} failed jobs, ${contentBytes / 1024} KiB of content each, written in ${((performance.now() - filling) / 1000).toFixed(1)} s; Redis uses ${memory}`,
    );
    const queue = transport.queue;
    const snapshot = await measure(redis.client, () => readOutboxSnapshot(queue));
    const status = await measure(redis.client, () =>
      Promise.all([readOutboxStatus(queue, { limit: 20 }), readOutboxSnapshot(queue)]),
    );
    const scan = await measure(redis.client, () =>
      redis.client.eval(COUNT_PARKED_BY_SCAN, 1, queue.toKey('failed'), queue.toKey(''), 10_000),
    );
    const parked = (await readOutboxSnapshot(queue)).parked;
    const show = (name: string, c: Cost) =>
      console.log(
        `    ${name.padEnd(44)} ${c.ms.toFixed(1).padStart(8)} ms, longest Redis command ${c.longestMs.toFixed(2).padStart(8)} ms, ${c.commands} commands`,
      );
    show('snapshot (scrape, queue watch line)', snapshot);
    show('queue status (20 failed listed, snapshot)', status);
    show('reference: parked counted by scanning', scan);
    console.log(`    parked jobs counted: ${parked} of ${ids.length / 100}`);
    const what = `${count.toLocaleString('en')} failed jobs, ${contentBytes / 1024} KiB content each`;
    const reference = 'the previous count of parked jobs (a script reading the newest 10,000 failed)';
    const row = (name: string, unit: string, value: number, referenceValue: number): BenchRow => ({
      benchmark: 'outbox scrape cost',
      case: `${what}: ${name}`,
      value,
      unit,
      reference,
      referenceValue,
      ratio: value / referenceValue,
      target: '≤ 0.05 (does not grow with the failed jobs)',
      met: value / referenceValue <= 0.05,
    });
    return [
      row('longest Redis command of a snapshot', 'ms', snapshot.longestMs, scan.longestMs),
      row('wall time of a snapshot', 'ms', snapshot.ms, scan.ms),
      row('Redis commands of a snapshot', 'commands', snapshot.commands, scan.commands),
    ];
  } finally {
    await transport.close();
    await redis.stop();
  }
}

/** The outbox scrape benchmarks: 100,000 failed jobs of 4 KiB, and 10,000 of 40 KiB. */
export async function scrapeBenchmarks(): Promise<BenchRow[]> {
  console.log('\nOutbox scrape cost (snapshot, queue status) against the previous count of parked jobs:');
  return [...(await population(100_000, 4 * 1024)), ...(await population(10_000, 40 * 1024))];
}
