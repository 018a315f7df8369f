import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport, type EmlApiQueueTransportOptions } from '../../src/queue/index.js';
import { rejectionOf } from '../helpers/async.js';
import { capturingLogger } from '../helpers/logger.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * Two apps on one Redis with the default prefix and queue name: app B's
 * messages went out through app A's account, and a worker holding
 * encryption keys still posted jobs stored in clear. The queue now records
 * its owner: the account its producers and workers name (`account`), and
 * that its mail is encrypted. A producer or worker of another account, or a
 * producer without encryption on an encrypted queue, refuses it; a worker
 * refuses jobs queued for another account, and jobs queued in clear once the
 * queue is encrypted; a worker of a queue that names no account warns when
 * workers with another API key send from it. Real redis-server, the emulator
 * with keys of two accounts, workers in this process.
 */

const outbox = useOutbox({
  emulator: {
    apiKeys: [
      { key: 'k-shop-a', scopes: ['sender'], account: 'shop-a' },
      { key: 'k-shop-b', scopes: ['sender'], account: 'shop-b' },
    ],
  },
  clean: 'queue',
});

const producers: EmlApiQueueTransport[] = [];
afterEach(async () => {
  await Promise.all(producers.splice(0).map((p) => p.close()));
});

function producer(options: Partial<EmlApiQueueTransportOptions>) {
  const transport = new EmlApiQueueTransport({ connection: outbox.redis.url, ...options });
  producers.push(transport);
  return nodemailer.createTransport(transport);
}

const message = (to: string) => ({ from: 'shop@example.test', to, subject: 'Hi', text: 'x' });
const KEYS = { k1: randomBytes(32) };

describe('a queue that names its account', () => {
  it('is refused to the producers and workers of another account', async () => {
    await producer({ account: 'shop-a' }).sendMail(message('a1@example.test'));
    await outbox.workers.start({ apiKey: 'k-shop-a', account: 'shop-a' });
    await eventually(() => outbox.emu.mailbox('a1@example.test').length === 1);

    const refused = await rejectionOf(producer({ account: 'shop-b' }).sendMail(message('b1@example.test')));
    expect(refused).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('another account') });
    const worker = await rejectionOf(outbox.workers.start({ apiKey: 'k-shop-b', account: 'shop-b' }));
    expect(worker).toMatchObject({ code: 'ECONFIG', message: expect.stringContaining('another account') });
    // A producer or worker that names none on a queue that does.
    expect(await rejectionOf(producer({}).sendMail(message('b2@example.test')))).toMatchObject({
      code: 'ECONFIG',
      message: expect.stringContaining('account'),
    });
    expect(outbox.emu.mailbox('b1@example.test')).toEqual([]);
  });

  it('has its workers refuse a job queued for another account, with a clear error', async () => {
    // B queued first on a queue no one owned yet; then the record was lost (a Redis that lost data).
    const info = await producer({ account: 'shop-b' }).sendMail(message('b3@example.test'));
    await outbox.redis.client.del('bull:eml-api:outbox:owner');
    const failures: string[] = [];
    const worker = await outbox.workers.start({ apiKey: 'k-shop-a', account: 'shop-a' });
    worker.on('failed', (_job, err: Error) => failures.push(err.message));
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    expect((await outbox.transport.queue.getJob(info.queueId))!.data.lastError).toMatchObject({
      code: 'EMESSAGE',
      message: expect.stringContaining('queued for another account'),
    });
    expect(outbox.emu.mailbox('b3@example.test')).toEqual([]);
  });
});

describe('a queue that came to name its account', () => {
  it('has its workers refuse what a producer naming none queued since, and send the backlog from before', async () => {
    const unnamed = producer({});
    const before = await unnamed.sendMail(message('d1@example.test'));
    await producer({ account: 'shop-a' }).sendMail(message('d2@example.test'));
    // A producer that checked before the queue named its account queues until it checks again.
    const after = await unnamed.sendMail(message('d3@example.test'));
    await outbox.workers.start({ apiKey: 'k-shop-a', account: 'shop-a' });
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    await eventually(() => outbox.emu.messages().length === 2);
    expect(outbox.emu.mailbox('d3@example.test')).toEqual([]);
    expect((await outbox.transport.queue.getJob(after.queueId))!.data.lastError?.message).toContain('names no account');
    expect((await outbox.transport.queue.getJob(before.queueId))!.finishedOn).toBeDefined();
  });
});

describe('a queue that came to name its account, and a producer whose clock is behind', () => {
  it("has its workers refuse what that producer queued since, by Redis's time, not the producer's", async () => {
    // Another app's producer, naming no account, on a machine 2 days behind (BullMQ stamps jobs with it).
    const unnamed = producer({ jobOptions: { timestamp: Date.now() - 48 * 3_600_000 } });
    const before = await unnamed.sendMail(message('e1@example.test'));
    await producer({ account: 'shop-a' }).sendMail(message('e2@example.test'));
    const after = await unnamed.sendMail(message('e3@example.test'));
    await outbox.workers.start({ apiKey: 'k-shop-a', account: 'shop-a' });
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    await eventually(() => outbox.emu.messages().length === 2);
    expect(outbox.emu.mailbox('e3@example.test')).toEqual([]);
    expect((await outbox.transport.queue.getJob(after.queueId))!.data.lastError?.message).toContain('names no account');
    expect((await outbox.transport.queue.getJob(before.queueId))!.finishedOn).toBeDefined();
  });
});

describe('a queue that names no account', () => {
  it('warns when workers with another API key send from it', async () => {
    await outbox.workers.start({ apiKey: 'k-shop-a' });
    const logger = capturingLogger();
    await outbox.workers.start({ apiKey: 'k-shop-b', logger });
    expect(logger.messages('warn')).toContainEqual(expect.stringMatching(/another API key .* account/));
    // A worker with the first key hears of the second one, once.
    const again = capturingLogger();
    await outbox.workers.start({ apiKey: 'k-shop-a', logger: again });
    expect(again.messages('warn').filter((m) => m.includes('another API key'))).toHaveLength(1);
  });
});

describe('a queue whose mail is encrypted', () => {
  it('is refused to a producer without encryption, and its workers refuse what was queued in clear since', async () => {
    const clear = producer({});
    const before = await clear.sendMail(message('c1@example.test'));
    await producer({ encryption: { keyId: 'k1', keys: KEYS } }).sendMail(message('c2@example.test'));
    // A producer that checked before the queue was encrypted queues in clear until it checks again.
    const after = await clear.sendMail(message('c3@example.test'));
    expect(await rejectionOf(producer({}).sendMail(message('c4@example.test')))).toMatchObject({
      code: 'ECONFIG',
      message: expect.stringContaining('encrypt'),
    });
    await outbox.workers.start({ encryption: { keys: KEYS } });
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 1);
    await eventually(() => outbox.emu.messages().length === 2);
    expect(outbox.emu.mailbox('c1@example.test')).toHaveLength(1);
    expect(outbox.emu.mailbox('c2@example.test')).toHaveLength(1);
    expect(outbox.emu.mailbox('c3@example.test')).toEqual([]);
    expect((await outbox.transport.queue.getJob(after.queueId))!.data.lastError?.message).toContain('in clear');
    expect((await outbox.transport.queue.getJob(before.queueId))!.finishedOn).toBeDefined();
  });
});
