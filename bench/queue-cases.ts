/**
 * The outbox's benchmarks for `npm run bench`: how fast the producer queues
 * compared with sending directly, how the drain rate grows with worker
 * processes against a sink with 50 ms latency, the memory a 25 MB message
 * takes in the producer and in a worker, what `appendfsync always` costs the
 * producer against `everysec`, and what `replicas` (WAIT) and encryption cost the producer and a
 * worker. Each runs against a real redis-server started for the run.
 * `npm run bench -- --only queue --cases durability,encryption` runs some.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { Agent, request } from 'undici';
import { EmlApiTransport } from '../src/index.js';
import { EmlApiQueueTransport } from '../src/queue/index.js';
import { startRedisServer, type RedisServer } from '../test/helpers/redis-server.js';
import { startWorkerProcess, type WorkerProcess } from '../test/helpers/outbox.js';
import { benchMessage } from './bench-message.js';
import type { BenchRow } from './bench-row.js';
import type { Sinks } from './sinks.js';

const MEMORY_CASE = fileURLToPath(new URL('./queue-memory-case.ts', import.meta.url));
const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

async function rate(count: number, concurrency: number, task: (n: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await task(next++);
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

/** The cases of {@link queueBenchmarks}, by name (`--cases` picks some). */
const CASES = ['enqueue', 'drain', 'memory', 'durability', 'replicas', 'encryption'] as const;

/** Runs the outbox's benchmarks (those `--cases a,b` names, or all); returns their rows. */
export async function queueBenchmarks(sinks: Sinks): Promise<BenchRow[]> {
  const picked = process.argv.includes('--cases')
    ? process.argv[process.argv.indexOf('--cases') + 1]!.split(',')
    : [...CASES];
  const unknown = picked.filter((name) => !(CASES as readonly string[]).includes(name));
  if (unknown.length > 0) throw new Error(`--cases: expected some of ${CASES.join(', ')}, got ${unknown.join(', ')}`);
  const redis = await startRedisServer();
  const rows: BenchRow[] = [];
  const cases: Record<(typeof CASES)[number], () => Promise<BenchRow[]>> = {
    enqueue: () => enqueueRate(redis, sinks),
    drain: () => drainRate(redis, sinks),
    memory: () => memory(redis, sinks),
    durability: () => durabilityCost(),
    replicas: () => replicasCost(),
    encryption: () => encryptionCost(redis, sinks),
  };
  try {
    for (const name of CASES) if (picked.includes(name)) rows.push(...(await cases[name]()));
  } finally {
    await redis.stop();
  }
  return rows;
}

const COST_ROUNDS = 5;
const COST_COUNT = 1000;

/** Interleaved rounds of two runners (their order alternating), after a warm-up of each: their rates per round. */
async function pair(
  runs: Record<'a' | 'b', (count: number) => Promise<number>>,
  rounds: number,
  count: number,
): Promise<{ a: number[]; b: number[] }> {
  await runs.a(Math.ceil(count / 3));
  await runs.b(Math.ceil(count / 3));
  const rates = { a: [] as number[], b: [] as number[] };
  for (let round = 0; round < rounds; round++) {
    for (const name of round % 2 ? (['b', 'a'] as const) : (['a', 'b'] as const)) {
      rates[name].push(await runs[name](count));
    }
  }
  return rates;
}

/**
 * What `appendfsync always` (every write on disk before Redis answers, as
 * Postfix fsyncs before its 250) costs the producer against `everysec`: two
 * redis-servers with their AOF on, in the same temporary folder's file
 * system, enqueue rounds interleaved.
 */
async function durabilityCost(): Promise<BenchRow[]> {
  console.log(
    `\nOutbox: appendfsync always against everysec, ${COST_ROUNDS} interleaved rounds of ${COST_COUNT}, 20 callers`,
  );
  const everysec = await startRedisServer({ appendonly: true, appendfsync: 'everysec' });
  const always = await startRedisServer({ appendonly: true, appendfsync: 'always' });
  const producers = {
    everysec: new EmlApiQueueTransport({ connection: everysec.url, queueName: 'bench-aof', concurrency: 20 }),
    always: new EmlApiQueueTransport({
      connection: always.url,
      queueName: 'bench-aof',
      concurrency: 20,
      durability: 'aof-always',
    }),
  };
  const enqueue = (producer: EmlApiQueueTransport) => {
    const transporter = nodemailer.createTransport(producer);
    return async (count: number) => {
      const r = await rate(count, 20, (n) => transporter.sendMail(benchMessage(n)));
      await producer.queue.obliterate({ force: true });
      return r;
    };
  };
  try {
    const rates = await pair({ a: enqueue(producers.always), b: enqueue(producers.everysec) }, COST_ROUNDS, COST_COUNT);
    const ratios = rates.a.map((r, i) => r / rates.b[i]!);
    console.log(`  always   ${rates.a.map((r) => r.toFixed(0)).join(' ')} msg/s`);
    console.log(`  everysec ${rates.b.map((r) => r.toFixed(0)).join(' ')} msg/s`);
    console.log(
      `  always / everysec per round: ${ratios.map((r) => r.toFixed(2)).join(' ')} → median ${median(ratios).toFixed(2)}`,
    );
    return [
      {
        benchmark: 'outbox durability',
        case: 'sendMail into Redis with appendfsync always (AOF), 20 callers',
        value: median(rates.a),
        unit: 'msg/s',
        reference: 'the same with appendfsync everysec',
        referenceValue: median(rates.b),
        ratio: median(ratios),
        target: '-',
        met: true,
      },
    ];
  } finally {
    await Promise.all([producers.always.close(), producers.everysec.close()]);
    await Promise.all([always.stop(), everysec.stop()]);
  }
}

/**
 * What `replicas: { count: 1 }` costs the producer (issue 21): a master with
 * one replica on loopback; each sendMail resolves only once the replica holds
 * the message (`WAIT` in the add's pipeline), against the same master without
 * it. Rounds interleaved. Loopback hides the network's round trip a real
 * replica adds: on a LAN, add its latency to each send (callers in parallel
 * share it).
 */
async function replicasCost(): Promise<BenchRow[]> {
  console.log(
    `\nOutbox: replicas { count: 1 } against none, ${COST_ROUNDS} interleaved rounds of ${COST_COUNT}, 20 callers`,
  );
  const master = await startRedisServer({ appendonly: true });
  const replica = await startRedisServer({
    appendonly: true,
    args: ['--replicaof', '127.0.0.1', String(master.port)],
  });
  const producers = {
    none: new EmlApiQueueTransport({ connection: master.url, queueName: 'bench-replicas', concurrency: 20 }),
    one: new EmlApiQueueTransport({
      connection: master.url,
      queueName: 'bench-replicas',
      concurrency: 20,
      replicas: { count: 1, timeoutMs: 1000 },
    }),
  };
  const enqueue = (producer: EmlApiQueueTransport) => {
    const transporter = nodemailer.createTransport(producer);
    return async (count: number) => {
      const r = await rate(count, 20, (n) => transporter.sendMail(benchMessage(n)));
      await producer.queue.obliterate({ force: true });
      return r;
    };
  };
  try {
    // Until the replica has synced: before that, WAIT counts it out.
    while (!/^master_link_status:up/m.test(await replica.client.info('replication'))) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const rates = await pair({ a: enqueue(producers.one), b: enqueue(producers.none) }, COST_ROUNDS, COST_COUNT);
    const ratios = rates.a.map((r, i) => r / rates.b[i]!);
    console.log(`  replicas 1 ${rates.a.map((r) => r.toFixed(0)).join(' ')} msg/s`);
    console.log(`  none       ${rates.b.map((r) => r.toFixed(0)).join(' ')} msg/s`);
    console.log(`  per round: ${ratios.map((r) => r.toFixed(2)).join(' ')} → median ${median(ratios).toFixed(2)}`);
    return [
      {
        benchmark: 'outbox replicas',
        case: 'sendMail into Redis with replicas: { count: 1 } (WAIT; replica on loopback), 20 callers',
        value: median(rates.a),
        unit: 'msg/s',
        reference: 'the same master without replicas',
        referenceValue: median(rates.b),
        ratio: median(ratios),
        target: '-',
        met: true,
      },
    ];
  } finally {
    await Promise.all([producers.one.close(), producers.none.close()]);
    await Promise.all([replica.stop(), master.stop()]);
  }
}

const DRAIN_COST_COUNT = 2000;

/**
 * What encryption costs: the producer's enqueue rate with and without it
 * (small messages, then 3 MiB ones), and a worker process's drain rate with
 * and without it against a sink that answers at once (so that the worker's
 * own work, not the sink's latency, bounds the rate). Rounds interleaved.
 */
async function encryptionCost(redis: RedisServer, sinks: Sinks): Promise<BenchRow[]> {
  console.log(`\nOutbox: encryption (AES-256-GCM) against none, ${COST_ROUNDS} interleaved rounds`);
  await sinks.setDelay(0);
  const key = randomBytes(32).toString('base64');
  const encryption = { keyId: 'k1', keys: { k1: key } };
  const plain = new EmlApiQueueTransport({ connection: redis.url, queueName: 'bench-plain', concurrency: 20 });
  const sealed = new EmlApiQueueTransport({
    connection: redis.url,
    queueName: 'bench-sealed',
    concurrency: 20,
    encryption,
  });
  const big = Buffer.alloc(3 * 1024 * 1024, 7);
  const bigMessage = (n: number) => ({ ...benchMessage(n), attachments: [{ filename: 'big.bin', content: big }] });
  const transporters = new Map([plain, sealed].map((p) => [p, nodemailer.createTransport(p)]));
  const enqueue = (producer: EmlApiQueueTransport, message: typeof benchMessage) => async (count: number) => {
    const transporter = transporters.get(producer)!;
    const r = await rate(count, 20, (n) => transporter.sendMail(message(n)));
    await producer.queue.obliterate({ force: true });
    return r;
  };
  const drain = (producer: EmlApiQueueTransport, queueName: string, withKeys: boolean) => async (count: number) => {
    await producer.queue.pause();
    const transporter = transporters.get(producer)!;
    await rate(count, 20, (n) => transporter.sendMail(benchMessage(n)));
    const worker = await startWorkerProcess({
      connection: redis.url,
      queueName,
      apiKey: 'k',
      baseUrl: sinks.httpUrl,
      concurrency: DRAIN_CONCURRENCY,
      cleanupInterval: 0,
      ...(withKeys ? { encryption: { keys: { k1: key } } } : {}),
    });
    const t0 = performance.now();
    await producer.queue.resume();
    while (((await producer.queue.getJobCounts('completed')).completed ?? 0) < count) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const measured = count / ((performance.now() - t0) / 1000);
    await worker.stop();
    await producer.queue.obliterate({ force: true });
    return measured;
  };
  const rows: BenchRow[] = [];
  const report = (benchmark: string, what: string, rates: { a: number[]; b: number[] }, reference: string) => {
    const ratios = rates.a.map((r, i) => r / rates.b[i]!);
    console.log(
      `  ${what}: encrypted ${rates.a.map((r) => r.toFixed(0)).join(' ')}, plain ${rates.b.map((r) => r.toFixed(0)).join(' ')} msg/s → median ratio ${median(ratios).toFixed(2)}`,
    );
    rows.push({
      benchmark,
      case: what,
      value: median(rates.a),
      unit: 'msg/s',
      reference,
      referenceValue: median(rates.b),
      ratio: median(ratios),
      target: '-',
      met: true,
    });
  };
  try {
    report(
      'outbox encryption',
      'sendMail into Redis, encrypted, 20 callers',
      await pair({ a: enqueue(sealed, benchMessage), b: enqueue(plain, benchMessage) }, COST_ROUNDS, COST_COUNT),
      'the same without encryption',
    );
    report(
      'outbox encryption',
      'sendMail into Redis, encrypted, 3 MiB attachment, 20 callers',
      await pair({ a: enqueue(sealed, bigMessage), b: enqueue(plain, bigMessage) }, COST_ROUNDS, 60),
      'the same without encryption',
    );
    report(
      'outbox encryption',
      `drain, encrypted: 1 worker process × concurrency ${DRAIN_CONCURRENCY}, sink answering at once`,
      await pair(
        { a: drain(sealed, 'bench-sealed', true), b: drain(plain, 'bench-plain', false) },
        COST_ROUNDS,
        DRAIN_COST_COUNT,
      ),
      'the same without encryption',
    );
  } finally {
    await Promise.all([plain.close(), sealed.close()]);
  }
  return rows;
}

const ENQUEUE_ROUNDS = 5;
const ENQUEUE_COUNT = 1000;

async function enqueueRate(redis: RedisServer, sinks: Sinks): Promise<BenchRow[]> {
  console.log(`\nOutbox: enqueue rate, ${ENQUEUE_ROUNDS} interleaved rounds of ${ENQUEUE_COUNT}, 20 callers`);
  await sinks.setDelay(0);
  const producer = new EmlApiQueueTransport({ connection: redis.url, queueName: 'bench-enqueue', concurrency: 20 });
  const direct = new EmlApiTransport({ apiKey: 'k', baseUrl: sinks.httpUrl, maxConnections: 20, retry: false });
  const viaQueue = nodemailer.createTransport(producer);
  const viaApi = nodemailer.createTransport(direct);
  const runs: Record<'enqueue' | 'direct', (count: number) => Promise<number>> = {
    enqueue: async (count) => {
      const r = await rate(count, 20, (n) => viaQueue.sendMail(benchMessage(n)));
      await producer.queue.obliterate({ force: true });
      return r;
    },
    direct: (count) => rate(count, 20, (n) => viaApi.sendMail(benchMessage(n))),
  };
  // Warm-up: compiled code and open connections on both sides before the first round.
  await runs.enqueue(600);
  await runs.direct(600);
  const rates = { enqueue: [] as number[], direct: [] as number[] };
  for (let round = 0; round < ENQUEUE_ROUNDS; round++) {
    for (const name of round % 2 ? (['direct', 'enqueue'] as const) : (['enqueue', 'direct'] as const)) {
      rates[name].push(await runs[name](ENQUEUE_COUNT));
    }
  }
  await producer.close();
  await direct.close();
  const ratios = rates.enqueue.map((r, i) => r / rates.direct[i]!);
  console.log(`  enqueue ${rates.enqueue.map((r) => r.toFixed(0)).join(' ')} msg/s`);
  console.log(`  direct  ${rates.direct.map((r) => r.toFixed(0)).join(' ')} msg/s`);
  const ratio = median(ratios);
  console.log(
    `  enqueue / direct per round: ${ratios.map((r) => r.toFixed(2)).join(' ')} → median ${ratio.toFixed(2)}`,
  );
  return [
    {
      benchmark: 'outbox enqueue',
      case: 'sendMail into Redis, 20 callers (build, store content, add job)',
      value: median(rates.enqueue),
      unit: 'msg/s',
      reference: 'direct EmlApiTransport sendMail to the sink, 20 connections',
      referenceValue: median(rates.direct),
      ratio,
      target: '-',
      met: true,
    },
  ];
}

const DRAIN_CONCURRENCY = 5;
const DRAIN_SECONDS = 3;
const DRAIN_ROUNDS = 3;

/** A counter of Redis's `INFO stats`: read events (one per request a client sends, a pipeline's whole). */
async function redisReads(redis: RedisServer): Promise<number> {
  return Number(/^total_reads_processed:(\d+)/m.exec(await redis.client.info('stats'))![1]);
}

/**
 * One drain: `count` messages queued (paused), `workers` worker processes
 * started, then the queue resumed; timed until every worker process has
 * reported its sends (over IPC: no polling of Redis meanwhile). Also counts
 * Redis's read events per message while queueing and while draining: a
 * request a client sends, a pipeline's whole, is one (about one round trip).
 */
async function drainOnce(
  redis: RedisServer,
  sinks: Sinks,
  workers: number,
  count: number,
  queueName: string,
): Promise<{ rate: number; enqueueReads: number; drainReads: number }> {
  const producer = new EmlApiQueueTransport({ connection: redis.url, queueName, concurrency: 20 });
  await producer.queue.pause();
  const transporter = nodemailer.createTransport(producer);
  const r0 = await redisReads(redis);
  await rate(count, 20, (n) => transporter.sendMail(benchMessage(n)));
  const r1 = await redisReads(redis);
  const started: WorkerProcess[] = await Promise.all(
    Array.from({ length: workers }, () =>
      startWorkerProcess({
        connection: redis.url,
        queueName,
        apiKey: 'k',
        baseUrl: sinks.httpUrl,
        concurrency: DRAIN_CONCURRENCY,
        cleanupInterval: 0,
      }),
    ),
  );
  let sent = 0;
  const all = new Promise<void>((resolve) => {
    for (const w of started) {
      w.child.on('message', (m: { event: string }) => {
        if (m.event === 'sent' && ++sent === count) resolve();
      });
    }
  });
  const r2 = await redisReads(redis);
  const t0 = performance.now();
  await producer.queue.resume();
  await all;
  const measured = count / ((performance.now() - t0) / 1000);
  const r3 = await redisReads(redis);
  await Promise.all(started.map((w) => w.stop()));
  await producer.queue.obliterate({ force: true });
  await producer.close();
  return { rate: measured, enqueueReads: (r1 - r0) / count, drainReads: (r3 - r2) / count };
}

/**
 * What the sink allows without the outbox: a bare undici client posting the
 * same upload body `concurrency` at a time, `count` times. The ideal assumes
 * 50 ms exactly; the sink's timer, its HTTP parsing and the scheduling of
 * two cores shared with Redis and the workers add to each request.
 */
async function bareFloor(sinks: Sinks, concurrency: number, count: number): Promise<number> {
  const agent = new Agent({ connections: concurrency });
  const body = JSON.stringify({ eml: Buffer.alloc(14_000, 65).toString('base64') });
  try {
    return await rate(count, concurrency, async () => {
      const res = await request(`${sinks.httpUrl}/v1/send/eml`, {
        method: 'POST',
        body,
        dispatcher: agent,
        headers: { 'content-type': 'application/json' },
      });
      await res.body.text();
    });
  } finally {
    await agent.close();
  }
}

/**
 * The drain rate of 1, 2 and 4 worker processes against a sink answering
 * after 50 ms, against the ideal (workers × concurrency / 50 ms) and against
 * a bare HTTP client at the same concurrency, in interleaved rounds; and the
 * Redis round trips per message of queueing and of draining.
 */
async function drainRate(redis: RedisServer, sinks: Sinks): Promise<BenchRow[]> {
  console.log(
    `\nOutbox: drain rate against a sink answering after 50 ms, concurrency ${DRAIN_CONCURRENCY} per worker process, ` +
      `${DRAIN_ROUNDS} rounds interleaved with a bare HTTP client (uptime: ${loadavg()
        .map((l) => l.toFixed(2))
        .join(', ')})`,
  );
  await sinks.setDelay(50);
  const rows: BenchRow[] = [];
  const reads = { enqueue: [] as number[], drain: [] as number[] };
  for (const workers of [1, 2, 4]) {
    const ideal = (workers * DRAIN_CONCURRENCY) / 0.05;
    const count = Math.round(ideal * DRAIN_SECONDS);
    await bareFloor(sinks, workers * DRAIN_CONCURRENCY, Math.ceil(count / 3));
    const outbox: number[] = [];
    const floor: number[] = [];
    for (let round = 0; round < DRAIN_ROUNDS; round++) {
      for (const which of round % 2 ? (['floor', 'outbox'] as const) : (['outbox', 'floor'] as const)) {
        if (which === 'floor') {
          floor.push(await bareFloor(sinks, workers * DRAIN_CONCURRENCY, count));
          continue;
        }
        const run = await drainOnce(redis, sinks, workers, count, `bench-drain-${workers}-${round}`);
        outbox.push(run.rate);
        reads.enqueue.push(run.enqueueReads);
        reads.drain.push(run.drainReads);
      }
    }
    const toFloor = outbox.map((r, i) => r / floor[i]!);
    console.log(
      `  ${workers} worker process(es): ${outbox.map((r) => r.toFixed(0)).join(' ')} msg/s of an ideal ${ideal} ` +
        `(${count} messages); bare client ${floor.map((r) => r.toFixed(0)).join(' ')} msg/s`,
    );
    rows.push(
      {
        benchmark: 'outbox drain',
        case: `${workers} worker process${workers > 1 ? 'es' : ''} × concurrency ${DRAIN_CONCURRENCY}, sink latency 50 ms`,
        value: median(outbox),
        unit: 'msg/s',
        reference: 'ideal workers × concurrency / 0.05 s',
        referenceValue: ideal,
        ratio: median(outbox) / ideal,
        target: '>= 0.95',
        met: median(outbox) / ideal >= 0.95,
      },
      {
        benchmark: 'outbox drain (reference)',
        case: `${workers} worker process${workers > 1 ? 'es' : ''}, vs a bare HTTP client at the same concurrency (ratio: median of per-round ratios)`,
        value: median(outbox),
        unit: 'msg/s',
        reference: `bare undici client, ${workers * DRAIN_CONCURRENCY} at a time, same sink`,
        referenceValue: median(floor),
        ratio: median(toFloor),
        target: '-',
        met: true,
      },
    );
  }
  console.log(
    `  Redis read events (≈ round trips) per message: queueing ${median(reads.enqueue).toFixed(2)}, draining ${median(reads.drain).toFixed(2)}`,
  );
  rows.push(
    {
      benchmark: 'outbox round trips (reference)',
      case: 'queueing a 14 KB message, 20 callers: Redis read events per message (≈ round trips; pipelines count once)',
      value: median(reads.enqueue),
      unit: 'per msg',
      reference: '-',
      referenceValue: 0,
      ratio: 1,
      target: '-',
      met: true,
    },
    {
      benchmark: 'outbox round trips (reference)',
      case: 'draining it (take, record, complete): Redis read events per message, worker processes together',
      value: median(reads.drain),
      unit: 'per msg',
      reference: '-',
      referenceValue: 0,
      ratio: 1,
      target: '-',
      met: true,
    },
  );
  await sinks.setDelay(0);
  return rows;
}

const MEMORY_RUNS = 5;

async function memory(redis: RedisServer, sinks: Sinks): Promise<BenchRow[]> {
  console.log('\nOutbox: memory for one message with a 25 MB attachment (each run in a fresh process)');
  const producerRuns: number[] = [];
  const workerRuns: number[] = [];
  let messageBytes = 0;
  for (let run = 0; run < MEMORY_RUNS; run++) {
    const queueName = `bench-memory-${run}`;
    const produced = JSON.parse(await caseOutput(['producer', redis.url, queueName])) as {
      extraMb: number;
      messageBytes: number;
    };
    producerRuns.push(produced.extraMb);
    messageBytes = produced.messageBytes;
    // The worker: the two messages the producer case queued (3 MB warm-up, then the 25 MB one) must wait for its baseline.
    const producer = new EmlApiQueueTransport({ connection: redis.url, queueName });
    // New messages wait in BullMQ's prioritized set (retries go first, in its wait list).
    const jobs = await producer.queue.getJobs(['waiting', 'prioritized']);
    const big = jobs.find((j) => j.data.size > 30 * 2 ** 20)!;
    await big.remove();
    const { data } = big;
    workerRuns.push(
      (
        JSON.parse(
          await caseOutput(['worker', redis.url, queueName, sinks.httpUrl], async () => {
            await producer.queue.add('eml', data, { jobId: big.id! });
          }),
        ) as { extraMb: number }
      ).extraMb,
    );
    await producer.queue.obliterate({ force: true });
    await producer.close();
  }
  const mb = messageBytes / 2 ** 20;
  console.log(`  message: ${mb.toFixed(1)} MiB as EML (the attachment Base64-encoded inside)`);
  console.log(`  producer: ${producerRuns.map((r) => r.toFixed(1)).join(', ')} MB`);
  console.log(`  worker:   ${workerRuns.map((r) => r.toFixed(1)).join(', ')} MB`);
  const row = (who: string, runs: number[]): BenchRow => ({
    benchmark: 'outbox memory',
    case: `${who}, 25 MB attachment (${mb.toFixed(1)} MiB EML), peak extra RSS (runs ${Math.min(...runs).toFixed(0)}-${Math.max(...runs).toFixed(0)} MB)`,
    value: median(runs),
    unit: 'MB',
    reference: 'message size',
    referenceValue: mb,
    ratio: median(runs) / mb,
    target: '-',
    met: true,
  });
  return [row('producer (Buffer attachment allocated after the baseline)', producerRuns), row('worker', workerRuns)];
}

/** Runs a memory case in a fresh process; `onBaseline` runs when a worker case has taken its baseline. */
function caseOutput(args: string[], onBaseline?: () => Promise<void>): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = fork(MEMORY_CASE, args, {
      execArgv: ['--expose-gc', '--import', 'tsx'],
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.on('message', (m) => {
      if (m === 'baseline') void onBaseline?.();
    });
    child.once('exit', (code) =>
      code === 0 ? resolve(out.trim().split('\n').at(-1)!) : reject(new Error(`memory case exited ${code}`)),
    );
  });
}
