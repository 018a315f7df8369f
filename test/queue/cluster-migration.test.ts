import { Redis } from 'ioredis';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, startOutboxWorker, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { queueClient } from '../../src/queue/bullmq-internals.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';

/**
 * The content sweeper while the queue's hash slot moves from one master to
 * another (a `redis-cli --cluster reshard`, a rebalance): the slot is
 * MIGRATING on its master and IMPORTING on the other, and its keys move in
 * batches, in no order the outbox chooses. A script that reads keys it does
 * not declare runs where its declared keys are and sees the keys still on
 * the other side as missing: the sweeper took the jobs still on the source
 * for gone and deleted their content (the review's 8 of 40 acknowledged
 * messages lost). A real six-node cluster on loopback, the slot moved by
 * hand as redis-cli moves it (SETSLOT, MIGRATE).
 */

let cluster: RedisCluster;
let emu: Emulator;
const prefix = '{eml-api}';
const location = resolveQueueLocation(undefined, prefix);

beforeAll(async () => {
  [cluster, emu] = await Promise.all([startRedisCluster(), startEmulator()]);
});

afterAll(async () => {
  await emu?.close();
  await cluster?.stop();
});

/** A message stored beside its job (over 64 KiB). */
const big = (i: number) => ({
  from: 'shop@example.test',
  to: `c${i}@example.test`,
  text: `message ${i} `.padEnd(70_000, 'x'),
  messageId: `<big${i}@example.test>`,
});

describe('the content sweeper while the queue’s slot migrates', () => {
  it('deletes no content of a live job whose record has not moved yet, and the jobs are all sent', async () => {
    const connection = { cluster: [...cluster.urls] };
    const startWorker = () =>
      startOutboxWorker({ connection, prefix, apiKey: emu.apiKey, baseUrl: emu.url, cleanupInterval: 0 });
    const transport = new EmlApiQueueTransport({ connection, prefix });
    const admins: Redis[] = [];
    const admin = (port: number) => {
      const redis = new Redis({ port, host: '127.0.0.1' });
      admins.push(redis);
      return redis;
    };
    try {
      const mailer = nodemailer.createTransport(transport);
      // A queue that has sent mail: its completed set exists, and moves with the slot like any other key.
      const first = await startWorker();
      await mailer.sendMail({
        from: 'shop@example.test',
        to: 'c@example.test',
        text: 'small',
        messageId: '<s@example.test>',
      });
      await eventually(() => emu.messages().length === 1, { what: 'the first message sent' });
      await first.close();
      const infos: OutboxQueuedMessageInfo[] = [];
      for (let i = 0; i < 4; i++) infos.push((await mailer.sendMail(big(i))) as unknown as OutboxQueuedMessageInfo);
      const source = await cluster.masterOf(prefix);
      const target = cluster.nodes.slice(0, 3).find((node) => node.id !== source.id)!;
      const [from, to] = [admin(source.port), admin(target.port)];
      const slot = String(await from.cluster('KEYSLOT', prefix));
      const contentKeys = (await cluster.keys(`${location.contentKeyPrefix}*`)).filter(Boolean);
      expect(contentKeys).toHaveLength(4);
      // The slot opens; the content index, the completed set and the content keys move first (as a batch of
      // redis-cli's may), the jobs' records stay behind.
      await to.cluster('SETSLOT', slot, 'IMPORTING', source.id);
      await from.cluster('SETSLOT', slot, 'MIGRATING', target.id);
      const moved = [`${prefix}:eml-api:outbox:content-index`, `${prefix}:eml-api:completed`, ...contentKeys];
      await from.call('MIGRATE', '127.0.0.1', String(target.port), '', '0', '5000', 'KEYS', ...moved);
      // A sweep falls mid-migration.
      const sweep = sweepStoredContent(await queueClient(transport.queue), location);
      const early = await Promise.race([
        sweep.then((removed) => `done: ${removed} removed`),
        new Promise((resolve) => setTimeout(() => resolve('waiting'), 1000)),
      ]);
      // The rest moves and the slot is closed: the sweep, told to try again meanwhile, now judges the jobs.
      const rest = (await from.cluster('GETKEYSINSLOT', slot, '10000')) as string[];
      if (rest.length > 0)
        await from.call('MIGRATE', '127.0.0.1', String(target.port), '', '0', '5000', 'KEYS', ...rest);
      for (const node of cluster.nodes.slice(0, 3)) await admin(node.port).cluster('SETSLOT', slot, 'NODE', target.id);
      expect(early).toBe('waiting');
      expect(await sweep).toBe(0);
      expect(await cluster.keys(`${location.contentKeyPrefix}*`)).toEqual(contentKeys);
      const worker = await startWorker();
      try {
        await eventually(() => emu.messages().length === 5, { what: 'the four messages sent', timeout: 20_000 });
      } finally {
        await worker.close();
      }
      const sent = emu.messages().map((m) => m.messageId);
      expect(sent.slice(1).sort()).toEqual(infos.map((info) => info.messageId).sort());
    } finally {
      for (const redis of admins) redis.disconnect();
      await transport.close();
    }
  }, 60_000);
});
