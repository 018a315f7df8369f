import { QueueKeys } from 'bullmq';
import nodemailer, { type Transporter } from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  EmlApiQueueTransport,
  outboxJobId,
  startOutboxWorker,
  type OutboxQueuedMessageInfo,
  type OutboxWorker,
} from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Idempotency keys that are also the names of BullMQ's own keys of a queue
 * (`meta`, `wait`, `completed`...). A job id is the last part of its Redis
 * key (`bull:eml-api:<id>`), so such a key once made the job's hash collide
 * with the queue's own keys: the message was not queued (or `sendMail`
 * crashed with a TypeError), and `completed`/`failed` broke the whole queue
 * for every later message. Real redis-server, real emulator.
 */

/**
 * The names of BullMQ's own keys of a queue, read from the installed BullMQ (not copied from our list, so a key
 * a new BullMQ adds fails this test until outboxJobId knows it).
 */
const BULLMQ_KEY_NAMES = Object.keys(new QueueKeys('bull').getKeys('eml-api')).filter((name) => name !== '');

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
let transporter: Transporter<OutboxQueuedMessageInfo>;
let worker: OutboxWorker | undefined;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
  transporter = nodemailer.createTransport(transport) as unknown as Transporter<OutboxQueuedMessageInfo>;
});

afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

beforeEach(async () => {
  emu.reset();
  await redis.client.flushall();
});

afterEach(async () => {
  await worker?.close({ abort: true });
  worker = undefined;
});

const message = (idempotencyKey: string) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: 'Order',
  text: `key ${idempotencyKey}`,
  idempotencyKey,
});

describe('idempotency keys named like BullMQ keys', () => {
  it('never map onto a job id that is one of the queue’s own key names', () => {
    for (const name of BULLMQ_KEY_NAMES) expect(outboxJobId(name)).not.toBe(name);
    expect(outboxJobId('meta')).toBe('%6Deta');
    expect(decodeURIComponent(outboxJobId('completed'))).toBe('completed');
    // Other keys keep their documented ids.
    expect(outboxJobId('metadata')).toBe('metadata');
    expect(outboxJobId('order-1042')).toBe('order-1042');
  });

  it('queue each message, leave the queue usable and are all delivered once', async () => {
    // A message first, so that the queue already has its meta hash and wait list.
    await transporter.sendMail(message('before'));
    const infos: OutboxQueuedMessageInfo[] = [];
    for (const name of BULLMQ_KEY_NAMES) {
      const info = await transporter.sendMail(message(name));
      expect(info).toMatchObject({ idempotencyKey: name, duplicate: false });
      infos.push(info);
    }
    await transporter.sendMail(message('after'));
    expect(await transport.queue.getJobCounts('prioritized')).toEqual({ prioritized: BULLMQ_KEY_NAMES.length + 2 });
    worker = await startOutboxWorker({
      connection: redis.url,
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      cleanupInterval: 0,
    });
    const errors: Error[] = [];
    worker.on('error', (err: Error) => errors.push(err));
    await eventually(
      async () => (await transport.queue.getJobCounts('completed')).completed === BULLMQ_KEY_NAMES.length + 2,
      { what: 'every message sent' },
    );
    expect(errors).toEqual([]);
    expect(emu.messages()).toHaveLength(BULLMQ_KEY_NAMES.length + 2);
    // Queueing one again is recognised as the same job.
    expect(await transporter.sendMail(message('completed'))).toMatchObject({
      duplicate: true,
      queueId: infos[8]!.queueId,
    });
  });
});
