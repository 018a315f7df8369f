import { request } from 'node:http';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, startOutboxWorker, type EmlApiQueueTransportOptions } from '../../src/queue/index.js';
import { queueClient } from '../../src/queue/bullmq-internals.js';
import { outboxWaits } from '../../src/queue/redis-connection.js';
import { outboxRedisReadiness } from '../../src/queue/redis-settings.js';
import { capturingLogger } from '../helpers/logger.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer, type RedisServerOptions } from '../helpers/redis-server.js';

/**
 * Redis's settings watched, not checked once. A producer checked them before
 * its first send, a worker as it started: after a restart into
 * `allkeys-lru`, messages were acknowledged and then evicted, never
 * delivered; with `durability: 'aof-always'` and a restart into
 * `appendonly no`, a `250` was followed by a crash that lost the message.
 * Producers and workers now check again after every reconnect and on an
 * interval, producers refuse to acknowledge while the settings are wrong,
 * and both say so in `/readyz` and the log. Real redis-servers restarted
 * into other settings.
 */

let emu: Emulator;
const servers: RedisServer[] = [];
const closing: { close(): Promise<unknown> }[] = [];
const interval = outboxWaits.settingsCheck;

beforeAll(async () => {
  emu = await startEmulator();
});

afterEach(async () => {
  outboxWaits.settingsCheck = interval;
  await Promise.all(closing.splice(0).map((c) => c.close()));
});

afterAll(async () => {
  await emu?.close();
  await Promise.all(servers.map((s) => s.stop()));
});

async function redisWith(options: RedisServerOptions): Promise<RedisServer> {
  const redis = await startRedisServer(options);
  servers.push(redis);
  return redis;
}

function producer(redis: RedisServer, options: Partial<EmlApiQueueTransportOptions> = {}) {
  const transport = new EmlApiQueueTransport({ connection: redis.url, ...options });
  closing.push(transport);
  return { transport, transporter: nodemailer.createTransport(transport) };
}

const message = (i: number) => ({ from: 'shop@example.test', to: `c${i}@example.test`, subject: 'Receipt', text: 'x' });
const outcome = (sending: Promise<unknown>) =>
  sending.then(
    () => 'queued',
    (err: { code?: string }) => err.code,
  );

/** GET a path of a local HTTP port: its status. */
function status(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    })
      .on('error', reject)
      .end();
  });
}

describe('a producer', () => {
  it('refuses to acknowledge after Redis restarts into an eviction policy', async () => {
    const redis = await redisWith({ appendonly: true });
    const { transporter } = producer(redis);
    expect(await outcome(transporter.sendMail(message(1)))).toBe('queued');
    await redis.restart('shutdown', { args: ['--maxmemory-policy', 'allkeys-lru'] });
    expect(await outcome(transporter.sendMail(message(2)))).toBe('ECONFIG');
  });

  it("with durability 'aof-always', refuses to acknowledge after Redis restarts without its append-only file", async () => {
    const redis = await redisWith({ appendonly: true, appendfsync: 'always' });
    const { transport, transporter } = producer(redis, { durability: 'aof-always' });
    expect(await outcome(transporter.sendMail(message(1)))).toBe('queued');
    await redis.restart('shutdown', { args: ['--appendonly', 'no'] });
    const refused = await transporter.sendMail(message(2)).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'ECONFIG', command: 'CONFIG GET appendonly' });
    // The relay's /readyz reads the same verdict for the transport's connection.
    const readiness = outboxRedisReadiness(() => queueClient(transport.queue));
    await expect(readiness.check()).rejects.toMatchObject({ code: 'ECONFIG' });
  });

  it('checks again on an interval: a policy changed without a restart is refused, and its fix accepted', async () => {
    outboxWaits.settingsCheck = 100;
    const redis = await redisWith({});
    const logger = capturingLogger();
    const { transporter } = producer(redis, { logger });
    expect(await outcome(transporter.sendMail(message(1)))).toBe('queued');
    await redis.client.config('SET', 'maxmemory-policy', 'volatile-lru');
    await eventually(async () => (await outcome(transporter.sendMail(message(2)))) === 'ECONFIG', {
      what: 'a send refused',
    });
    expect(logger.messages('error')).toContainEqual(expect.stringContaining('maxmemory-policy volatile-lru'));
    await redis.client.config('SET', 'maxmemory-policy', 'noeviction');
    await eventually(async () => (await outcome(transporter.sendMail(message(3)))) === 'queued', {
      what: 'sends accepted again',
    });
  });
});

describe('a worker', () => {
  it('says so in /readyz and the log after Redis restarts into an eviction policy, and again once it is fixed', async () => {
    const redis = await redisWith({ appendonly: true });
    const logger = capturingLogger();
    const warnings: string[] = [];
    const worker = await startOutboxWorker({
      connection: redis.url,
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      logger,
      http: { port: 0, readyCacheMs: 0 },
      metrics: false,
    });
    closing.push(worker);
    worker.on('warning', (message: string) => warnings.push(message));
    const port = worker.http!.port;
    expect(await status(port, '/readyz')).toBe(200);
    await redis.restart('shutdown', { args: ['--maxmemory-policy', 'allkeys-lru'] });
    await eventually(() => warnings.some((w) => w.includes('maxmemory-policy allkeys-lru')), {
      what: 'the warning',
    });
    expect(logger.messages('error')).toContainEqual(expect.stringContaining('maxmemory-policy allkeys-lru'));
    await eventually(async () => (await status(port, '/readyz')) === 503, { what: '/readyz failing' });
    await redis.client.config('SET', 'maxmemory-policy', 'noeviction');
    await eventually(async () => (await status(port, '/readyz')) === 200, { what: '/readyz passing again' });
    expect(logger.messages('info')).toContainEqual(
      expect.stringContaining('keeps queued mail as the outbox needs again'),
    );
  });
});
