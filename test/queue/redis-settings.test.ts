import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay } from '../../src/relay/index.js';
import { capturingLogger } from '../helpers/logger.js';
import {
  EmlApiQueueTransport,
  startOutboxWorker,
  type OutboxQueuedMessageInfo,
  type EmlApiQueueTransportOptions,
} from '../../src/queue/index.js';
import { checkRedisSettings } from '../../src/queue/redis-settings.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer, type RedisServerOptions } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * What Redis must keep for a 250 to mean something (issue 20, item 4). With
 * a maxmemory-policy other than noeviction, Redis evicts queued mail under
 * memory pressure, silently (here: 10 of 10 messages); the producer, the
 * worker, `eml-api worker` and the relay with a queue now refuse such a
 * Redis at start-up and in verify(), reading the policy from CONFIG, or from
 * INFO where CONFIG is renamed (managed Redis), and only warn where neither
 * can be read. Persistence: without AOF a warning, and a refusal where the
 * producer asked for durability. A job whose content or data is gone fails
 * saying so. Real redis-server processes with the settings under test.
 */

let emu: Emulator;
const servers: RedisServer[] = [];

beforeAll(async () => {
  emu = await startEmulator();
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

const message = (i: number) => ({
  from: 'shop@example.test',
  to: `c${i}@example.test`,
  subject: 'Receipt',
  text: 'x',
  attachments: [{ filename: 'r.bin', content: Buffer.alloc(200 * 1024, i) }],
});

async function rejection(promise: Promise<unknown>): Promise<Error & Record<string, unknown>> {
  return (await promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (err: unknown) => err,
  )) as Error & Record<string, unknown>;
}

describe('a Redis that evicts keys', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    // 10 messages of 270 KB do not fit in 2 MB: with allkeys-lru Redis drops what it likes.
    redis = await redisWith({ args: ['--maxmemory', '2mb', '--maxmemory-policy', 'allkeys-lru'] });
  });

  it('is refused by the producer: verify() and sendMail fail with ECONFIG naming the setting, nothing is queued', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url });
    try {
      const refused = await rejection(transport.verify());
      expect(refused).toMatchObject({ code: 'ECONFIG', permanent: true, command: 'CONFIG GET maxmemory-policy' });
      expect(refused.message).toContain('maxmemory-policy allkeys-lru');
      expect(refused.message).toContain('CONFIG SET maxmemory-policy noeviction');
      const transporter = nodemailer.createTransport(transport);
      const outcomes = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          transporter.sendMail(message(i)).then(
            () => 'queued',
            (e: Error) => e,
          ),
        ),
      );
      for (const outcome of outcomes) expect(outcome).toMatchObject({ code: 'ECONFIG' });
      expect(await redis.client.keys('bull:eml-api:content:*')).toEqual([]);
      expect(await transport.queue.count()).toBe(0);
    } finally {
      await transport.close();
    }
  });

  it('is refused by startOutboxWorker, by eml-api worker (exit 1), and by the relay with a queue', async () => {
    const worker = await rejection(startOutboxWorker({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));
    expect(worker).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('maxmemory-policy allkeys-lru') });
    const stop = new AbortController();
    const cli = await runCliCapturing(['worker'], {
      env: { REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey },
      signal: stop.signal,
    });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain('CONFIG SET maxmemory-policy noeviction');
    const relay = await rejection(
      startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, queue: { connection: redis.url } }),
    );
    expect(relay).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('maxmemory-policy allkeys-lru') });
  });

  it('is refused when CONFIG is renamed (managed Redis): the policy is read from INFO', async () => {
    const managed = await redisWith({
      args: ['--maxmemory-policy', 'volatile-lru', '--rename-command', 'CONFIG', 'config-hidden-by-provider'],
    });
    const transport = new EmlApiQueueTransport({ connection: managed.url });
    try {
      expect(await rejection(transport.verify())).toMatchObject({
        code: 'ECONFIG',
        message: expect.stringContaining('maxmemory-policy volatile-lru'),
      });
    } finally {
      await transport.close();
    }
  });
});

describe('a Redis whose settings cannot be read', () => {
  // BullMQ itself needs INFO (it reads Redis's version), as does ioredis's ready check, so a Redis
  // without INFO hosts no queue at all; what is checked here is that the check then warns, not refuses.
  it('gives warnings, not a refusal, when neither CONFIG nor INFO is available', async () => {
    const locked = await startRedisServer({
      args: ['--rename-command', 'CONFIG', 'config-hidden', '--rename-command', 'INFO', 'info-hidden'],
      readyCheck: false,
    });
    servers.push(locked);
    const warnings: string[] = [];
    await checkRedisSettings(locked.client, 'locked:6379', 'warn', (warning) => warnings.push(warning));
    expect(warnings).toEqual([
      expect.stringMatching(/Could not read maxmemory-policy .* it must be noeviction/),
      expect.stringMatching(/Could not read whether Redis .* persists writes/),
    ]);
    // Persistence asked for and not readable: a refusal, unless the operator says it is verified another way.
    await expect(checkRedisSettings(locked.client, 'locked:6379', 'aof', () => undefined)).rejects.toMatchObject({
      code: 'ECONFIG',
      message: expect.stringContaining('durabilityVerified'),
    });
    const verified: string[] = [];
    await checkRedisSettings(locked.client, 'locked:6379', 'aof', (w) => verified.push(w), undefined, true);
    expect(verified).toContainEqual(expect.stringMatching(/Could not read whether Redis .* persists writes/));
  });
});

describe("durability 'aof-always' where CONFIG is renamed (a managed Redis)", () => {
  it('refuses: appendfsync cannot be read from INFO; durabilityVerified: true queues, with a warning', async () => {
    const managed = await redisWith({
      appendonly: true,
      appendfsync: 'everysec',
      args: ['--rename-command', 'CONFIG', 'config-hidden-by-provider'],
    });
    const refusing = new EmlApiQueueTransport({ connection: managed.url, durability: 'aof-always' });
    try {
      const refused = await rejection(nodemailer.createTransport(refusing).sendMail(message(1)));
      expect(refused).toMatchObject({ code: 'ECONFIG', permanent: true });
      expect(refused.message).toContain('appendfsync');
      expect(refused.message).toContain('durabilityVerified');
      expect(await rejection(refusing.verify())).toMatchObject({ code: 'ECONFIG' });
    } finally {
      await refusing.close();
    }
    const logger = capturingLogger();
    const trusting = new EmlApiQueueTransport({
      connection: managed.url,
      durability: 'aof-always',
      durabilityVerified: true,
      logger,
    });
    try {
      expect(await nodemailer.createTransport(trusting).sendMail(message(2))).toMatchObject({ duplicate: false });
      expect(logger.messages('warn')).toContainEqual(expect.stringContaining('appendfsync'));
    } finally {
      await trusting.close();
    }
  });
});

describe('persistence', () => {
  const verify = async (redis: RedisServer, options: Partial<EmlApiQueueTransportOptions>) => {
    const logger = capturingLogger();
    const transport = new EmlApiQueueTransport({ connection: redis.url, logger, ...options });
    try {
      return { outcome: await transport.verify().catch((e: unknown) => e), warnings: logger.messages('warn') };
    } finally {
      await transport.close();
    }
  };

  it('without AOF: a warning by default, a refusal when durability asks for AOF', async () => {
    const redis = await redisWith({ appendonly: false });
    const plain = await verify(redis, {});
    expect(plain.outcome).toBe(true);
    expect(plain.warnings).toEqual([expect.stringContaining('appendonly no')]);
    expect(plain.warnings[0]).toContain('survives no restart of Redis');
    for (const durability of ['aof', 'aof-always'] as const) {
      const { outcome } = await verify(redis, { durability });
      expect(outcome).toMatchObject({ code: 'ECONFIG', command: 'CONFIG GET appendonly' });
      expect((outcome as Error).message).toContain('CONFIG SET appendonly yes');
    }
  });

  it('without AOF: workers warn (the warning event, and eml-api worker on stderr), and run', async () => {
    const redis = await redisWith({ appendonly: false });
    const logger = capturingLogger();
    const worker = await startOutboxWorker({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url, logger });
    await worker.close();
    expect(logger.messages('warn')).toEqual([expect.stringContaining('appendonly no')]);
    const stop = new AbortController();
    const running = runCliCapturing(['worker'], {
      env: { REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey },
      signal: stop.signal,
    });
    const producer = new EmlApiQueueTransport({ connection: redis.url });
    await nodemailer.createTransport(producer).sendMail(message(3));
    await producer.close();
    await eventually(() => emu.messages().length > 0, { what: 'the worker sending' });
    stop.abort();
    emu.reset();
    const { code, stderr } = await running;
    expect(code).toBe(0);
    expect(stderr).toMatch(/^warning: Redis at 127\.0\.0\.1:\d+ runs without its append-only file \(appendonly no\)/m);
  });

  it("with AOF fsynced every second: enough for 'aof', refused for 'aof-always'; fsync always: enough for both", async () => {
    const everysec = await redisWith({ appendonly: true, appendfsync: 'everysec' });
    expect(await verify(everysec, {})).toEqual({ outcome: true, warnings: [] });
    expect((await verify(everysec, { durability: 'aof' })).outcome).toBe(true);
    const refused = (await verify(everysec, { durability: 'aof-always' })).outcome;
    expect(refused).toMatchObject({ code: 'ECONFIG', command: 'CONFIG GET appendfsync' });
    expect((refused as Error).message).toContain('CONFIG SET appendfsync always');
    const always = await redisWith({ appendonly: true, appendfsync: 'always' });
    expect(await verify(always, { durability: 'aof-always' })).toEqual({ outcome: true, warnings: [] });
  });

  it('checks the durability option at the boundary', () => {
    expect(() => new EmlApiQueueTransport({ connection: 'redis://127.0.0.1:1', durability: 'fsync' as never })).toThrow(
      expect.objectContaining({ code: 'ECONFIG', message: expect.stringContaining('durability') }),
    );
  });
});

describe('a job whose content or data is gone', () => {
  let redis: RedisServer;
  const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));
  beforeAll(async () => {
    redis = await redisWith({ appendonly: true });
  });
  afterEach(() => workers.closeAll());

  it('fails as missing from Redis (evicted or removed), not as a job of another program', async () => {
    const transport = new EmlApiQueueTransport({ connection: redis.url });
    try {
      const transporter = nodemailer.createTransport(transport);
      const noContent = (await transporter.sendMail(message(1))) as unknown as OutboxQueuedMessageInfo;
      const noData = (await transporter.sendMail(message(2))) as unknown as OutboxQueuedMessageInfo;
      await redis.client.del((await recordQueue(transport.queue).getJob(noContent.queueId))!.data.contentKey);
      // What eviction does to a job: its hash goes, its id stays in the wait list.
      await redis.client.del(`bull:eml-api:${noData.queueId}`);
      await workers.start();
      await eventually(async () => (await transport.queue.getJobCounts('failed')).failed === 2);
      const reasons = Object.fromEntries(
        (await recordQueue(transport.queue).getFailed()).map((j) => [j.id, j.failedReason]),
      );
      expect(reasons[noContent.queueId]).toMatch(/content of this job is missing from Redis \(evicted or removed/);
      expect(reasons[noData.queueId]).toMatch(/data of this job is missing from Redis \(evicted or removed\)/);
      expect(emu.messages()).toEqual([]);
    } finally {
      await transport.close();
    }
  });
});
