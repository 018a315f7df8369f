import nodemailer, { type Transporter } from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { addFailedJobs, eventually } from '../helpers/outbox.js';
import { monitorBeside, startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * `replicas: { count, timeoutMs }`: `sendMail` resolves
 * once that many replicas hold the message (`WAIT`, in the add's round
 * trip), and rejects with `ETIMEDOUT` and `mayHaveBeenAccepted` when they do
 * not confirm in time: the message is on the master, and queueing it again
 * with the same key stores it once. One Redis and its replica here (WAIT
 * works the same there as on a cluster's master; the cluster's failovers are
 * in failover.test.ts). Real redis-server processes.
 */

let master: RedisServer;
let replica: RedisServer;
let transport: EmlApiQueueTransport;
let transporter: Transporter<OutboxQueuedMessageInfo>;
/** Gives up on the replica after 300 ms: for the sends it must not confirm. */
let impatient: EmlApiQueueTransport;

beforeAll(async () => {
  master = await startRedisServer();
  replica = await startRedisServer({ args: ['--replicaof', '127.0.0.1', String(master.port)] });
  await eventually(async () => (await replica.client.info('replication')).includes('master_link_status:up'), {
    what: 'the replica in sync',
  });
  // Long enough for a loaded machine's replica: the sends that wait for it are confirmed well before.
  transport = new EmlApiQueueTransport({ connection: master.url, replicas: { count: 1, timeoutMs: 10_000 } });
  transporter = nodemailer.createTransport(transport) as unknown as Transporter<OutboxQueuedMessageInfo>;
  impatient = new EmlApiQueueTransport({ connection: master.url, replicas: { count: 1, timeoutMs: 300 } });
});

afterAll(async () => {
  await transport?.close();
  await impatient?.close();
  await replica?.stop();
  await master?.stop();
});

const order = (n: number) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: `Order ${n}`,
  text: 'Thanks',
  idempotencyKey: `order-${n}`,
});

describe('replicas: { count: 1 }', () => {
  it('resolves once the replica holds the job and its content', async () => {
    const info = await transporter.sendMail(order(1));
    // Read on the replica right away: WAIT returned only once it had every write.
    const data = await replica.client.hget(`bull:eml-api:${info.queueId}`, 'data');
    expect(JSON.parse(data!)).toMatchObject({ idempotencyKey: 'order-1' });
  });

  it('rejects, may have been accepted, while the replica does not confirm; the same key then stores it once', async () => {
    replica.pause();
    let err: EmlApiError;
    try {
      err = (await nodemailer
        .createTransport(impatient)
        .sendMail(order(2))
        .catch((e: unknown) => e)) as EmlApiError;
    } finally {
      replica.resume();
    }
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({
      code: 'ETIMEDOUT',
      mayHaveBeenAccepted: true,
      permanent: false,
      idempotencyKey: 'order-2',
      queueId: 'order-2',
      command: 'WAIT',
    });
    expect(err.message).toContain('0 of the 1 replica(s) asked for (replicas.count) confirmed it within 300 ms');
    // On the master all the same.
    expect(await master.client.exists('bull:eml-api:order-2')).toBe(1);
    const again = await transporter.sendMail(order(2));
    expect(again).toMatchObject({ duplicate: true, queueId: 'order-2' });
    expect(await transport.queue.getJobCounts('prioritized')).toEqual({ prioritized: 2 });
  });

  it('waits for the replica after the add ran, also when Redis lost its scripts (NOSCRIPT: ioredis sends them again)', async () => {
    // A failover behind a proxy, or SCRIPT FLUSH: the add's scripts are sent again after the pipeline they
    // were in. A WAIT inside that pipeline would confirm the writes made before the job.
    await transporter.sendMail(order(10));
    await master.client.script('FLUSH');
    const seen: string[] = [];
    const monitor = await monitorBeside(master.client);
    monitor.on('monitor', (_time: string, args: string[]) => {
      const name = String(args[0]).toLowerCase();
      if (name === 'eval' || name === 'evalsha' || name === 'wait') seen.push(name);
    });
    try {
      const info = await transporter.sendMail(order(11));
      await eventually(() => seen.includes('wait'), { what: 'the WAIT seen by MONITOR' });
      expect(seen.filter((name) => name === 'eval').length).toBeGreaterThan(0);
      expect(seen.lastIndexOf('eval')).toBeLessThan(seen.indexOf('wait'));
      expect(await replica.client.hget(`bull:eml-api:${info.queueId}`, 'data')).toBeTruthy();
    } finally {
      monitor.disconnect();
    }
  });

  it('resolves a put-back of a failed job under the key once the replica holds it, replaced or retried', async () => {
    const [replaced, retried] = await addFailedJobs(master.client, { count: 2, contentBytes: 100 });
    // An attempt of this one may have been accepted: its own bytes go again.
    const key = `bull:eml-api:${retried!}`;
    const data = JSON.parse((await master.client.hget(key, 'data'))!) as Record<string, unknown>;
    await master.client.hset(key, 'data', JSON.stringify({ ...data, possiblyAcceptedAt: Date.now() }));
    const put = async (id: string) => transporter.sendMail({ ...order(0), idempotencyKey: id });
    expect(await put(replaced!)).toMatchObject({ requeued: 'replaced', duplicate: false });
    expect(await put(retried!)).toMatchObject({ requeued: 'retried', duplicate: true });
    for (const id of [replaced!, retried!]) {
      expect(await replica.client.zscore('bull:eml-api:failed', id)).toBeNull();
      expect(await replica.client.hget(`bull:eml-api:${id}`, 'data')).toContain('"putBackFrom"');
    }
  });

  it('rejects when fewer replicas exist than asked for', async () => {
    const two = new EmlApiQueueTransport({ connection: master.url, replicas: { count: 2, timeoutMs: 100 } });
    try {
      const err = (await nodemailer
        .createTransport(two)
        .sendMail(order(3))
        .catch((e: unknown) => e)) as EmlApiError;
      expect(err).toMatchObject({ code: 'ETIMEDOUT', mayHaveBeenAccepted: true, response: '1' });
      expect(err.message).toContain('1 of the 2 replica(s)');
    } finally {
      await two.close();
    }
  });

  it('checks the option: ECONFIG naming replicas.count or replicas.timeoutMs', () => {
    const bad = (replicas: unknown, storeTimeout?: number) => {
      try {
        new EmlApiQueueTransport({
          connection: master.url,
          replicas: replicas as never,
          timeouts: { store: storeTimeout },
        });
      } catch (err) {
        return err as EmlApiError;
      }
      throw new Error('accepted');
    };
    expect(bad({ count: 0 }).message).toContain('Invalid option replicas.count');
    expect(bad({}).message).toContain('Invalid option replicas.count');
    expect(bad({ count: 1, timeoutMs: 0 }).message).toContain('Invalid option replicas.timeoutMs');
    expect(bad({ count: 1, timeoutMs: 5000 }, 2000).message).toContain('from 1 to 2000');
    expect(bad(1).message).toContain('Invalid option replicas: expected { count, timeoutMs }');
  });
});
