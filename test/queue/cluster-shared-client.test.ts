import { Cluster } from 'ioredis';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';

/**
 * Two outbox queues whose slots live on different masters, on ONE ioredis
 * `Cluster` the app gives both transports (a documented connection): the
 * adds of one turn of the event loop share a pipeline per queue, never one
 * across queues (ioredis refuses a cluster pipeline whose keys sit on two
 * masters: every send of such a turn was refused; batch review, finding 1).
 * A real six-node cluster on loopback.
 */

let cluster: RedisCluster;
let shared: Cluster;
const prefixes: string[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster();
  const masters = new Set<number>();
  for (let i = 0; prefixes.length < 2 && i < 100; i++) {
    const master = await cluster.masterOf(`{q${i}}`);
    if (masters.has(master.port)) continue;
    masters.add(master.port);
    prefixes.push(`{q${i}}`);
  }
  shared = new Cluster(cluster.urls.map((url) => ({ host: new URL(url).hostname, port: Number(new URL(url).port) })));
}, 60_000);

afterAll(async () => {
  shared?.disconnect();
  await cluster?.stop();
});

describe('two queues on different masters sharing one ioredis Cluster', () => {
  it('store every send made on both in the same turn of the event loop, each once', async () => {
    expect(prefixes).toHaveLength(2);
    const transports = prefixes.map(
      (prefix) => new EmlApiQueueTransport({ connection: shared, prefix, durability: 'warn', concurrency: 50 }),
    );
    try {
      const mailers = transports.map((t) => nodemailer.createTransport(t));
      const sends = mailers.flatMap((mailer) =>
        Array.from({ length: 30 }, (_, i) =>
          mailer.sendMail({ from: 'shop@example.test', to: 'ann@example.test', text: `${i}`, idempotencyKey: `k${i}` }),
        ),
      );
      const settled = await Promise.allSettled(sends);
      expect(
        settled.filter((s) => s.status === 'rejected').map((s) => String((s as PromiseRejectedResult).reason)),
      ).toEqual([]);
      for (const transport of transports) {
        const counts = await transport.queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active', 'failed');
        expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(30);
      }
    } finally {
      await Promise.all(transports.map((t) => t.close()));
    }
  });
});
