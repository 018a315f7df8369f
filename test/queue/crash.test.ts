import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxWorkerOptions } from '../../src/queue/index.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { eventually, startWorkerProcess, type WorkerProcess } from '../helpers/outbox.js';
import { REDIS_KINDS, startOutboxRedis, type OutboxRedisUnderTest } from '../helpers/outbox-redis.js';
import { startSlowAnswerProxy, type SlowAnswerProxy } from '../helpers/slow-answer-proxy.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * Issue 11, test 1: 150 messages queued, two worker processes, one killed
 * with SIGKILL while it has sends in flight, a new worker drains the rest:
 * every message delivered exactly once. The emulator adds latency before it
 * processes a request, and a proxy holds its answers back after, so the
 * killed worker dies with sends in both states: not yet delivered, and
 * delivered without the worker knowing (those the newcomer sends again,
 * and the idempotency key keeps them from being delivered twice). The
 * doomed worker's proxy holds its requests and its answers long, and is cut
 * off then the worker killed while it holds one of each, so both states are
 * always there (with one short hold for both workers it depended on timing,
 * and a loaded machine sometimes missed the second). On one Redis and on a
 * Redis Cluster (issue 21), side by side: each kind has its own Redis,
 * emulator, proxies and workers.
 */

/**
 * The doomed worker is killed once 60 are delivered: the rest leave the other workers many times their ten sends
 * at once to do, beside the jobs it held.
 */
const MESSAGES = 150;

describe.concurrent.each(REDIS_KINDS)('a worker killed mid-batch, on %s Redis', (kind) => {
  let redis: OutboxRedisUnderTest;
  let emu: Emulator;
  let proxy: SlowAnswerProxy;
  let doomedProxy: SlowAnswerProxy;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    [redis, emu] = await Promise.all([startOutboxRedis(kind), startEmulator({ faults: { latencyMs: [10, 30] } })]);
    [proxy, doomedProxy] = await Promise.all([
      startSlowAnswerProxy(emu.url, 40),
      // Requests held 100-700 ms, answers 300 ms: the doomed worker's five sends fall out of step at once,
      // so it holds requests and answers at the same time (with one fixed hold they moved in step).
      startSlowAnswerProxy(emu.url, 300, { requestDelayMs: [100, 700] }),
    ]);
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.kill()));
    await proxy?.close();
    await doomedProxy?.close();
    await emu?.close();
    await redis?.stop();
  });

  it('leaves its jobs to the others: all 150 delivered exactly once, none failed, none left', async () => {
    // A short backoff: the killed worker's jobs are retried soon after they come back.
    const transport = new EmlApiQueueTransport({
      connection: redis.connection,
      prefix: redis.prefix,
      retry: { delay: 200, maxDelay: 1000 },
    });
    const transporter = nodemailer.createTransport(transport);
    const queued = await Promise.all(
      Array.from({ length: MESSAGES }, (_, i) =>
        transporter.sendMail({
          from: 'shop@example.test',
          to: `customer${i}@example.test`,
          subject: `Order ${i}`,
          text: `Order ${i} confirmed`,
        }),
      ),
    );
    const messageIds = new Set(queued.map((info) => info.messageId));
    expect(messageIds.size).toBe(MESSAGES);

    // Short locks and stall checks, so the killed worker's jobs come back in about a second.
    const options = (name: string, via = proxy): OutboxWorkerOptions => ({
      connection: redis.connection,
      prefix: redis.prefix,
      apiKey: emu.apiKey,
      baseUrl: via.url,
      concurrency: 5,
      cleanupInterval: 0,
      workerOptions: { name, lockDuration: 1000, stalledInterval: 500 },
    });
    const [doomed, survivor] = await Promise.all([
      startWorkerProcess(options('doomed', doomedProxy)),
      startWorkerProcess(options('survivor')),
    ]);
    workers.push(doomed, survivor);

    await eventually(() => emu.messages().length >= 60 && doomedProxy.heldAnswers > 0 && doomedProxy.heldRequests > 0, {
      timeout: 45_000,
      what: () =>
        `60 deliveries; the doomed worker with a send not yet delivered and one delivered unheard of (now: ${emu.messages().length} delivered, ${doomedProxy.heldRequests} requests and ${doomedProxy.heldAnswers} answers held)`,
    });
    doomedProxy.cutOff();
    const unheard = doomedProxy.heldAnswers;
    await doomed.kill();
    // Mid-batch: the killed worker left jobs active, locked, half done.
    const active = await redis.client.lrange(redis.key('active'), 0, -1);
    const heldByDoomed: string[] = [];
    for (const id of active) {
      if ((await redis.client.hget(redis.key(id), 'pb')) === 'doomed') heldByDoomed.push(id);
    }
    expect(heldByDoomed.length).toBeGreaterThan(0);
    expect(emu.messages().length).toBeLessThan(MESSAGES);

    workers.push(await startWorkerProcess(options('newcomer')));
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === MESSAGES, {
      timeout: 60_000,
      what: 'all jobs completed',
    });

    const delivered = emu.messages().map((m) => m.messageId);
    expect(delivered).toHaveLength(MESSAGES);
    expect(new Set(delivered)).toEqual(messageIds);
    const counts = await transport.queue.getJobCounts('waiting', 'active', 'delayed', 'failed', 'completed');
    expect(counts).toEqual({ waiting: 0, active: 0, delayed: 0, failed: 0, completed: MESSAGES });
    // The jobs the killed worker had in flight were finished by the others.
    for (const id of heldByDoomed) {
      expect(await redis.client.hget(redis.key(id), 'pb')).not.toBe('doomed');
    }
    // Sent jobs keep no content in Redis: small content leaves the job with the record of its send, larger
    // content's key goes with it; the sweep catches what a killed worker left.
    const completed = await recordQueue(transport.queue).getJobs(['completed']);
    expect(completed.filter((job) => job.data.inline !== undefined)).toEqual([]);
    await eventually(
      async () => {
        await sweepStoredContent(redis.client, redis.location);
        return (await redis.keys(`${redis.location.contentKeyPrefix}*`)).length === 0;
      },
      { what: 'no content left' },
    );
    // Some of the killed worker's sends had been delivered: the newcomer's resends were answered from the idempotency cache.
    expect(unheard).toBeGreaterThan(0);
    await eventually(() => doomedProxy.lostAnswers >= unheard, {
      what: 'the answers the killed worker never received',
    });
    console.log(
      `crash on ${kind} Redis: ${heldByDoomed.length} sends in flight in the killed worker (${doomedProxy.lostAnswers} of them delivered, answer lost), taken over; ${delivered.length} delivered once each`,
    );

    expect(await Promise.all(workers.slice(1).map((w) => w.stop()))).toEqual([0, 0]);
    await transport.close();
  }, 150_000);
});
