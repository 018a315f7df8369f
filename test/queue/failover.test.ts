import nodemailer from 'nodemailer';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import type { EmlApiError } from '../../src/index.js';
import {
  EmlApiQueueTransport,
  type EmlApiQueueTransportOptions,
  type OutboxWorkerOptions,
} from '../../src/queue/index.js';
import { queueClient } from '../../src/queue/bullmq-internals.js';
import { eventually, startWorkerProcess, type WorkerProcess } from '../helpers/outbox.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';

/**
 * A Redis Cluster's master failing while mail flows (issue 21): a producer
 * queueing about 100 messages a second and a worker process sending them
 * through the emulator (40-60 ms a send), when the master of the queue's
 * slot is killed (SIGKILL) or hangs (SIGSTOP, then SIGCONT after its replica
 * took over). With the outbox's cluster defaults no send is rejected through
 * a killed master's failover and no job is left to its lock's expiry; with
 * `replicas`, nothing acknowledged is lost to a master that hung, whose last
 * writes never reached its replica (it acknowledges what it had buffered
 * when it runs again, then learns it was replaced and drops it all).
 * A batch of adds the hung master ran when it came back, while the producer
 * already turned to its successor, is acknowledged only once the node the
 * producer asks holds it: a `WAIT` there counted the successor's replica (the
 * old master, which dropped the batch as it rejoined).
 * Nothing is delivered twice. A six-node cluster on loopback per test,
 * `cluster-node-timeout` 2 s.
 */

const prefix = '{eml-api}';
let cluster: RedisCluster;
let emu: Emulator;
let worker: WorkerProcess | undefined;

beforeEach(async () => {
  [cluster, emu] = await Promise.all([startRedisCluster(), startEmulator({ faults: { latencyMs: [40, 60] } })]);
});

afterEach(async () => {
  await worker?.kill();
  worker = undefined;
  await emu?.close();
  await cluster?.stop();
});

/** What a run of traffic through a failover came to. */
interface Traffic {
  /** Message-IDs of the sends `sendMail` resolved. */
  accepted: Set<string>;
  /** The errors of the sends it rejected. */
  rejected: EmlApiError[];
  /** Message-IDs of the rejected sends that said they may have been queued all the same. */
  maybe: Set<string>;
  transport: EmlApiQueueTransport;
}

/**
 * Queues mail from 10 callers, 100 ms apart each, while a worker process
 * sends it; `fail` breaks the master after 1.5 s and resolves once the
 * cluster is whole again; the traffic goes on for 1.5 s more.
 */
async function traffic(
  options: Partial<EmlApiQueueTransportOptions>,
  workerOptions: OutboxWorkerOptions['workerOptions'],
  fail: () => Promise<void>,
): Promise<Traffic> {
  const connection = { cluster: [...cluster.urls] };
  // A short backoff: a job whose completion a failover lost is sent again soon after it comes back.
  const retry = { delay: 200, maxDelay: 1000 };
  const transport = new EmlApiQueueTransport({ connection, prefix, concurrency: 10, retry, ...options });
  const transporter = nodemailer.createTransport(transport);
  worker = await startWorkerProcess({
    connection,
    prefix,
    apiKey: emu.apiKey,
    baseUrl: emu.url,
    concurrency: 10,
    cleanupInterval: 0,
    workerOptions,
  });
  const result: Traffic = { accepted: new Set(), rejected: [], maybe: new Set(), transport };
  let stop = false;
  let n = 0;
  const callers = Array.from({ length: 10 }, async () => {
    while (!stop) {
      const i = n++;
      // The Message-ID is the app's own, so that a rejected send that lands all the same is known by it.
      const messageId = `<m${i}@example.test>`;
      try {
        await transporter.sendMail({ from: 'shop@example.test', to: `c${i}@example.test`, text: `n${i}`, messageId });
        result.accepted.add(messageId);
      } catch (err) {
        result.rejected.push(err as EmlApiError);
        if ((err as EmlApiError).mayHaveBeenAccepted) result.maybe.add(messageId);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await fail();
  await new Promise((resolve) => setTimeout(resolve, 1500));
  stop = true;
  await Promise.all(callers);
  return result;
}

/** Waits for the queue to be empty: every job sent (none failed, none waiting for a lock to expire). */
async function drained(transport: EmlApiQueueTransport): Promise<void> {
  await eventually(
    async () => {
      const counts = await transport.queue.getJobCounts('active', 'waiting', 'prioritized', 'delayed', 'failed');
      return Object.values(counts).every((count) => count === 0);
    },
    { timeout: 30_000, what: 'the queue empty' },
  );
}

/** How many times each Message-ID was delivered. */
function deliveries(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const message of emu.messages()) counts.set(message.messageId, (counts.get(message.messageId) ?? 0) + 1);
  return counts;
}

describe('the master of the queue’s slot killed mid-traffic', () => {
  it('rejects no send, loses nothing, delivers nothing twice, leaves no job to its lock’s expiry', async () => {
    // BullMQ's own lock settings (30 s): a completion that rides the failover finds its job's lock still there.
    const run = await traffic({}, undefined, async () => {
      await cluster.kill(await cluster.masterOf(prefix));
      await cluster.healthy();
    });
    try {
      expect(run.rejected.map((err) => err.message)).toEqual([]);
      await drained(run.transport);
      const delivered = deliveries();
      expect([...run.accepted].filter((id) => delivered.get(id) !== 1)).toEqual([]);
      expect(delivered.size).toBe(run.accepted.size);
      // No completion was lost in the failover: no job came back after its lock expired.
      const jobs = await run.transport.queue.getJobs(['completed']);
      expect(jobs.filter((job) => job.stalledCounter > 0).map((job) => job.id)).toEqual([]);
      console.log(`failover (killed master): ${run.accepted.size} queued and delivered once, none rejected`);
    } finally {
      await run.transport.close();
    }
  }, 60_000);
});

describe('the master of the queue’s slot hanging mid-traffic, then coming back', () => {
  it('with replicas: loses nothing acknowledged, delivers nothing twice', async () => {
    // Short locks: a job whose completion the hung master took (and dropped) comes back within seconds.
    const workerOptions = { lockDuration: 3000, stalledInterval: 1000 };
    const run = await traffic({ replicas: { count: 1, timeoutMs: 500 } }, workerOptions, async () => {
      const master = await cluster.masterOf(prefix);
      cluster.pause(master);
      await cluster.healthy();
      cluster.resume(master);
    });
    try {
      await drained(run.transport);
      const delivered = deliveries();
      expect([...run.accepted].filter((id) => delivered.get(id) !== 1)).toEqual([]);
      expect([...delivered.values()].filter((count) => count > 1)).toEqual([]);
      // A rejected send said whether it may be queued all the same (replicas not confirming, the hung master's
      // answers cut short): none of those that said no was delivered.
      const unexpected = [...delivered.keys()].filter((id) => !run.accepted.has(id) && !run.maybe.has(id));
      expect(unexpected).toEqual([]);
      console.log(
        `failover (hung master, replicas: 1): ${run.accepted.size} acknowledged, all delivered once; ` +
          `${run.rejected.length} rejected as maybe queued, ${[...run.maybe].filter((id) => delivered.has(id)).length} of them delivered`,
      );
    } finally {
      await run.transport.close();
    }
  }, 60_000);
});

describe('a batch the hung master took, confirmed after its replica took over', () => {
  it('is acknowledged only once the master of the slot holds it: the old one ran it and then dropped it', async () => {
    const transport = new EmlApiQueueTransport({
      connection: { cluster: [...cluster.urls] },
      prefix,
      replicas: { count: 1, timeoutMs: 500 },
    });
    const transporter = nodemailer.createTransport(transport);
    const message = (i: number) => ({
      from: 'shop@example.test',
      to: `c${i}@example.test`,
      text: `n${i}`,
      idempotencyKey: `order-${i}`,
    });
    try {
      await transporter.sendMail(message(0));
      const slot = Number(await cluster.client.call('CLUSTER', 'KEYSLOT', prefix));
      const master = await cluster.masterOf(prefix);
      cluster.pause(master);
      // Written to the hung master's socket; it runs them when it is let go, before it hears it was replaced.
      const sends = Array.from({ length: 10 }, (_, i) =>
        transporter.sendMail(message(i + 1)).then(
          () => undefined,
          (err: EmlApiError) => err,
        ),
      );
      try {
        await cluster.healthy();
        const successor = await cluster.masterOf(prefix);
        // The producer's own view of the slot turns to the successor (it reads the cluster's slots every second).
        const client = (await queueClient(transport.queue)) as unknown as { slots: string[][] };
        await eventually(() => client.slots[slot]?.[0] === `127.0.0.1:${successor.port}`, {
          what: 'the producer to see the new master',
        });
      } finally {
        cluster.resume(master);
      }
      const outcomes = await Promise.all(sends);
      await cluster.healthy();
      const held = await Promise.all(outcomes.map((_, i) => cluster.client.exists(`${prefix}:eml-api:order-${i + 1}`)));
      // Acknowledged only what the cluster holds; the others said they may have been queued.
      expect(outcomes.flatMap((err, i) => (err === undefined && held[i] !== 1 ? [`order-${i + 1}`] : []))).toEqual([]);
      expect(outcomes.filter((err) => err !== undefined && !err.mayHaveBeenAccepted)).toEqual([]);
      console.log(
        `hung master's batch: ${outcomes.filter((err) => err === undefined).length} acknowledged, ` +
          `${held.filter((n) => n === 1).length} held by the cluster`,
      );
    } finally {
      await transport.close();
    }
  }, 60_000);
});
