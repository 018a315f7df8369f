import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, startOutboxWorker, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Issue 11, test 6: what survives a crash of Redis. With the append-only
 * file, jobs queued before the crash are delivered after it, none lost.
 * Without it, they are gone: what docs/outbox.md warns about (and proof that
 * the first half of the test tests something).
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

async function queueTwenty(
  redis: RedisServer,
): Promise<{ transport: EmlApiQueueTransport; infos: OutboxQueuedMessageInfo[] }> {
  const transport = new EmlApiQueueTransport({ connection: redis.url });
  const transporter = nodemailer.createTransport(transport);
  const infos: OutboxQueuedMessageInfo[] = [];
  for (let i = 0; i < 20; i++) {
    infos.push(
      (await transporter.sendMail({
        from: 'shop@example.test',
        to: `c${i}@example.test`,
        text: `n${i}`,
      })) as unknown as OutboxQueuedMessageInfo,
    );
  }
  return { transport, infos };
}

describe('Redis crashing with queued jobs', () => {
  it('with AOF (appendfsync always): every job queued before the crash is delivered after it', async () => {
    const redis = await startRedisServer({ appendonly: true, appendfsync: 'always' });
    servers.push(redis);
    const { transport, infos } = await queueTwenty(redis);
    await redis.restart('crash');
    expect(await transport.queue.getJobCounts('prioritized')).toEqual({ prioritized: 20 });
    // The producer reconnects by itself and keeps queueing.
    const after = await nodemailer
      .createTransport(transport)
      .sendMail({ from: 'shop@example.test', to: 'late@example.test', text: 'x' });
    const worker = await startOutboxWorker({
      connection: redis.url,
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      cleanupInterval: 0,
    });
    await eventually(() => emu.messages().length === 21, { what: '21 delivered' });
    expect(new Set(emu.messages().map((m) => m.messageId))).toEqual(
      new Set([...infos.map((i) => i.messageId), (after as unknown as OutboxQueuedMessageInfo).messageId]),
    );
    await worker.close();
    await transport.close();
  });

  it('without AOF: the queued jobs are lost', async () => {
    emu.reset();
    const redis = await startRedisServer({ appendonly: false });
    servers.push(redis);
    const { transport } = await queueTwenty(redis);
    await redis.restart('crash');
    expect(await transport.queue.getJobCounts('prioritized')).toEqual({ prioritized: 0 });
    await transport.close();
  });
});
