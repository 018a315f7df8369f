import { Redis } from 'ioredis';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, purgeOutbox, startOutboxWorker } from '../../src/queue/index.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { newContentKey, resolveQueueLocation } from '../../src/queue/queue-location.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisCluster, type RedisCluster, type RedisClusterNode } from '../helpers/redis-cluster.js';

/**
 * A Redis Cluster that runs with a master of other slots down for good, with
 * its replica (`cluster-require-full-coverage no`: the slots they served are
 * uncovered, the rest of the cluster works on). The queue's slot is served:
 * producers queue, a worker starts, says it is ready and sends, the sweeper
 * sweeps and the whole queue's purge purges, each skipping the dead node
 * instead of failing on it (review, cluster finding 2). A real six-node
 * cluster on loopback.
 */

let cluster: RedisCluster;
let emu: Emulator;
let dead: RedisClusterNode;
/** The master of the queue's slot, for the test's own looks (the helper's scan of every master would wait for the dead one). */
let queueMaster: Redis;
const prefix = '{eml-api}';
const location = resolveQueueLocation(undefined, prefix);

beforeAll(async () => {
  [cluster, emu] = await Promise.all([
    startRedisCluster({ args: ['--cluster-require-full-coverage', 'no'] }),
    startEmulator(),
  ]);
  const master = await cluster.masterOf(prefix);
  // Masters are nodes 0-2, their replicas nodes 3-5 in the same order.
  const other = [0, 1, 2].find((i) => cluster.nodes[i]!.id !== master.id)!;
  dead = cluster.nodes[other]!;
  await cluster.kill(cluster.nodes[other + 3]!);
  await cluster.kill(dead);
  // Until the queue's master flags it failed (cluster-node-timeout 2 s).
  queueMaster = new Redis({ port: master.port, host: '127.0.0.1' });
  await eventually(
    async () => new RegExp(`:${dead.port}@\\d+ \\S*\\bfail\\b`).test(String(await queueMaster.cluster('NODES'))),
    { timeout: 20_000, what: 'the dead master flagged failed' },
  );
}, 60_000);

afterAll(async () => {
  queueMaster?.disconnect();
  await emu?.close();
  await cluster?.stop();
});

describe('a cluster with a master of other slots down (cluster-require-full-coverage no)', () => {
  it('queues, starts a worker that is ready and sends, sweeps and purges, skipping the dead node', async () => {
    const connection = { cluster: [...cluster.urls] };
    const transport = new EmlApiQueueTransport({ connection, prefix });
    try {
      const mailer = nodemailer.createTransport(transport);
      await transport.verify();
      await mailer.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x'.repeat(70_000) });
      const worker = await startOutboxWorker({
        connection,
        prefix,
        apiKey: emu.apiKey,
        baseUrl: emu.url,
        cleanupInterval: 0,
        http: { port: 0 },
      });
      try {
        const ready = await fetch(`http://${worker.http!.host}:${worker.http!.port}/readyz`);
        expect(`${ready.status} ${await ready.text()}`).toMatch(/^200 /);
        await eventually(() => emu.messages().length === 1, { what: 'the message sent' });
        // And recorded as sent (its content removed with the record): the service's answer reaches the
        // worker after the message reaches the emulator, and a close before the record hands it back.
        await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 1, {
          what: 'the send recorded',
        });
      } finally {
        await worker.close({ abort: true });
      }
      // The sweep works from the index, on the queue's master alone.
      await expect(sweepStoredContent(cluster.client, location)).resolves.toBe(0);
      // Content with no job and no index entry: the purge's scan finds it, on whichever master answers.
      const unindexed = newContentKey(location.contentKeyPrefix, 'unindexed');
      await cluster.client.set(unindexed, 'no index entry');
      await mailer.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'y'.repeat(70_000) });
      const purged = await purgeOutbox(transport.queue, { force: true });
      expect(purged).toMatchObject({ jobs: 2, content: 2 });
      for (const node of purged.skippedNodes ?? []) expect(node).toContain(`127.0.0.1:${dead.port}`);
      expect(await queueMaster.keys(`${prefix}:eml-api:content:*`)).toEqual([]);
      expect(await queueMaster.keys(`${prefix}:eml-api:outbox:*`)).toEqual([]);
      expect(await transport.queue.getJobCounts('completed', 'prioritized')).toEqual({ completed: 0, prioritized: 0 });
    } finally {
      await transport.close();
    }
  }, 60_000);
});
