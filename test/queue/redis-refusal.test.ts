import { Redis } from 'ioredis';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, startOutboxWorker } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Redis refusing the connection itself: a wrong password on a
 * password-protected cluster or server, or a cluster connection to a Redis
 * that is not a cluster. No retry fixes it, and a cluster client only says
 * "Failed to refresh slots cache." (the node's answer is in its
 * `lastNodeError`): workers neither started nor exited, and the CLI timed out
 * after 10 s, never saying why (review, cluster finding 3). Now each says
 * `ECONFIG` with Redis's reason, at once, and never the password. A real
 * six-node cluster and real redis-servers.
 */

const prefix = '{eml-api}';
const WRONG = 'wr0ng-s3cret';
let cluster: RedisCluster;
let single: RedisServer;
let plain: RedisServer;

beforeAll(async () => {
  [cluster, single, plain] = await Promise.all([startRedisCluster(), startRedisServer(), startRedisServer()]);
  for (const node of cluster.nodes) {
    const admin = new Redis({ port: node.port, host: '127.0.0.1' });
    await admin.config('SET', 'masterauth', 'right');
    await admin.config('SET', 'requirepass', 'right');
    admin.disconnect();
  }
  await single.client.config('SET', 'requirepass', 'right');
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
  await single?.stop();
  await plain?.stop();
});

const caught = async (run: () => Promise<unknown>): Promise<{ err: EmlApiError; ms: number }> => {
  const start = Date.now();
  try {
    await run();
  } catch (err) {
    return { err: err as EmlApiError, ms: Date.now() - start };
  }
  throw new Error('expected an error');
};

const withPassword = (url: string, password: string) => url.replace('redis://', `redis://:${password}@`);
const service = { apiKey: 'k', baseUrl: 'http://127.0.0.1:9' };

describe('Redis refusing the connection', () => {
  it.each([
    ['a cluster, wrong password', () => ({ cluster: cluster.urls.map((u) => withPassword(u, WRONG)) }), /WRONGPASS/],
    ['a single Redis, wrong password', () => withPassword(single.url, WRONG), /WRONGPASS/],
    ['a cluster connection to a plain Redis', () => ({ cluster: [plain.url] }), /cluster support disabled/],
  ])('%s: the worker does not start, ECONFIG saying why, at once', async (_, connection, reason) => {
    const { err, ms } = await caught(() =>
      startOutboxWorker({ connection: connection(), prefix, ...service, cleanupInterval: 0 }),
    );
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'ECONFIG', permanent: true });
    expect(err.message).toMatch(reason);
    expect(JSON.stringify({ ...err, message: err.message, stack: err.stack })).not.toContain(WRONG);
    expect(ms).toBeLessThan(8_000);
  });

  it.each([
    ['a cluster, wrong password', () => ({ cluster: cluster.urls.map((u) => withPassword(u, WRONG)) }), /WRONGPASS/],
    ['a cluster connection to a plain Redis', () => ({ cluster: [plain.url] }), /cluster support disabled/],
  ])('%s: the producer’s check says ECONFIG and why', async (_, connection, reason) => {
    const producer = new EmlApiQueueTransport({ connection: connection(), prefix });
    try {
      const { err, ms } = await caught(() => producer.verify());
      expect(err).toMatchObject({ code: 'ECONFIG', permanent: true });
      expect(err.message).toMatch(reason);
      expect(err.message).not.toContain(WRONG);
      expect(ms).toBeLessThan(8_000);
    } finally {
      await producer.close();
    }
  });

  it('a producer refused once takes mail again once Redis takes its connection again (no restart)', async () => {
    // plain runs without a password; it is made to ask for one, its connections cut, then it asks for none again.
    const producer = new EmlApiQueueTransport({ connection: plain.url, timeouts: { store: 3000 } });
    const mail = nodemailer.createTransport(producer);
    const message = { from: 'a@example.test', to: 'b@example.test', text: 'x' };
    try {
      await mail.sendMail(message);
      await plain.client.config('SET', 'requirepass', 'asked');
      await plain.client.call('AUTH', 'asked');
      await plain.client.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      const { err } = await caught(() => mail.sendMail(message));
      expect(err).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('NOAUTH') });
      await plain.client.config('SET', 'requirepass', '');
      await eventually(
        async () =>
          (await mail.sendMail(message).then(
            () => true,
            () => false,
          )) === true,
        {
          what: 'mail taken again',
        },
      );
    } finally {
      await producer.close();
    }
  });

  it('eml-api queue status exits 1 at once saying WRONGPASS, never the password', async () => {
    const start = Date.now();
    const run = await runCliCapturing(['queue', 'status', '--prefix', prefix], {
      env: { REDIS_URL: cluster.urls.join(','), REDIS_PASSWORD: WRONG },
    });
    expect(Date.now() - start).toBeLessThan(8_000);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('WRONGPASS');
    expect(run.stdout + run.stderr).not.toContain(WRONG);
  });
});
