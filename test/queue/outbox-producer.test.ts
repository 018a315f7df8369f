import { PassThrough, Readable } from 'node:stream';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { OutboxProducer, type OutboxMessage } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * OutboxProducer, the store EmlApiQueueTransport and the relay go through,
 * used directly: a message built elsewhere is stored and sent byte for byte,
 * bad messages are refused naming the field with nothing stored, and
 * `concurrency` bounds the stores in progress. Real redis-server, the emulator.
 */

let redis: RedisServer;
let emu: Emulator;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));
const open: OutboxProducer[] = [];

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
});

beforeEach(async () => {
  emu.reset();
  await redis.client.flushall();
});

afterEach(async () => {
  await workers.closeAll();
  await Promise.all(open.splice(0).map((p) => p.close()));
});

afterAll(async () => {
  await emu?.close();
  await redis?.stop();
});

function producer(options: { concurrency?: number } = {}): OutboxProducer {
  const made = new OutboxProducer({ connection: redis.url, ...options });
  open.push(made);
  return made;
}

const EML = Buffer.from(
  'From: shop@example.test\r\nTo: ann@example.test\r\nSubject: Welcome\r\n' +
    'Message-ID: <welcome-ann@example.test>\r\nDate: Sat, 28 Nov 2026 12:00:00 +0000\r\n\r\nHello Ann\r\n',
);
const envelope = { from: 'shop@example.test', to: ['ann@example.test'] };

describe('OutboxProducer.enqueue', () => {
  it('stores an EML built elsewhere, answers as the queue transport does, and a worker posts those bytes', async () => {
    const info = await producer().enqueue({
      content: EML,
      envelope,
      messageId: '<welcome-ann@example.test>',
      idempotencyKey: 'welcome-ann',
    });
    expect(info).toEqual({
      envelope,
      messageId: '<welcome-ann@example.test>',
      accepted: ['ann@example.test'],
      rejected: [],
      pending: [],
      response: '250 Queued as welcome-ann',
      queueId: 'welcome-ann',
      idempotencyKey: 'welcome-ann',
      duplicate: false,
    });
    await workers.start();
    await eventually(() => emu.messages().length === 1, { what: 'the message sent' });
    expect(emu.messages()[0]!.raw.equals(EML)).toBe(true);
  });

  it('stores a stream of the size given, once per idempotency key', async () => {
    const store = producer();
    const first = await store.enqueue({
      content: Readable.from([EML]),
      size: EML.length,
      envelope,
      idempotencyKey: 'k',
    });
    const again = await store.enqueue({ content: EML, envelope, idempotencyKey: 'k' });
    expect(first.duplicate).toBe(false);
    expect(again).toMatchObject({ duplicate: true, queueId: 'k' });
    expect((await store.queue.getJobs(['waiting', 'prioritized'])).map((job) => job.id)).toEqual(['k']);
  });

  it.each<[string, Partial<OutboxMessage>, RegExp]>([
    ['content not bytes', { content: 'text' as never }, /content must be a Buffer, Uint8Array or Readable/],
    ['a stream without its size', { content: Readable.from([EML]) }, /size must be the bytes of content/],
    ['a size that is not the content’s', { size: 3 }, /size is 3, but content is \d+ bytes/],
    ['an envelope without recipients', { envelope: { from: 'a@example.test' } as never }, /envelope must be/],
    ['a group for an EML', { group: 'news' }, /group is for kind 'group' only/],
    ['an unknown kind', { kind: 'sms' as never }, /kind must be one of eml, email, group/],
    [
      'a recipient holding a line break',
      { envelope: { from: 'a@example.test', to: ['b@example.test', 'c@example.test\r\nBcc: d@example.test'] } },
      /envelope\.to\[1\] holds the control character U\+000D/,
    ],
    [
      'a sender holding a lone surrogate',
      { envelope: { from: 'a\ud800@example.test', to: ['b@example.test'] } },
      /envelope\.from holds a lone surrogate/,
    ],
    [
      'a Message-ID holding a control character',
      { messageId: '<a\u0000@example.test>' },
      /messageId holds the control character U\+0000/,
    ],
  ])('refuses %s with EMESSAGE, storing nothing', async (_what, change, message) => {
    const err = await producer()
      .enqueue({ content: EML, envelope, ...change })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'EMESSAGE' });
    expect((err as Error).message).toMatch(message);
    expect(await redis.client.dbsize()).toBe(0);
  });

  it('refuses a message once the producer is closed', async () => {
    const store = producer();
    await store.close();
    await expect(store.enqueue({ content: EML, envelope })).rejects.toMatchObject({
      code: 'ECONNECTION',
      message: expect.stringMatching(/closed/),
    });
  });

  it('stores `concurrency` messages at a time; the next waits for its turn', async () => {
    const store = producer({ concurrency: 1 });
    // The first message's stream is held open: its store cannot end until the stream does.
    const held = new PassThrough();
    held.write(EML.subarray(0, 10));
    const order: string[] = [];
    const first = store
      .enqueue({ content: held, size: EML.length, envelope, idempotencyKey: 'first' })
      .then(() => order.push('first'));
    const second = store.enqueue({ content: EML, envelope, idempotencyKey: 'second' }).then(() => order.push('second'));
    // Long enough for an unbounded second store to finish; the order below holds whatever the timing.
    await new Promise((resolve) => setTimeout(resolve, 300));
    held.end(EML.subarray(10));
    await Promise.all([first, second]);
    expect(order).toEqual(['first', 'second']);
  });
});
