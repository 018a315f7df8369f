import { createHash, randomBytes } from 'node:crypto';
import nodemailer, { type Transporter } from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient } from '../../src/index.js';
import { EmlApiQueueTransport, type EmlApiQueuedMessageInfo, type EmlApiWorkerOptions } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { REDIS_KINDS, startOutboxRedis, type OutboxRedisUnderTest } from '../helpers/outbox-redis.js';

/**
 * Queued messages reach the service: through an outage, through lost
 * answers (group and tracked sends replayed with the same body and key),
 * and at 25 MB. Real redis-server (one, and a Redis Cluster: issue 21), real
 * emulator, workers in this process.
 */

/** Fast retries for tests: 200 ms doubling to 1 s. */
const FAST_RETRY = { attempts: 40, delay: 200, maxDelay: 1000, jitter: 0 };

describe.each(REDIS_KINDS)('on %s Redis', (kind) => {
  let redis: OutboxRedisUnderTest;
  let emu: Emulator;
  let transport: EmlApiQueueTransport;
  let transporter: Transporter<EmlApiQueuedMessageInfo>;
  const workers = inProcessWorkers(() => ({
    connection: redis.connection,
    prefix: redis.prefix,
    apiKey: emu.apiKey,
    baseUrl: emu.url,
  }));

  beforeAll(async () => {
    [redis, emu] = await Promise.all([startOutboxRedis(kind), startEmulator({ groups: ['newsletter'] })]);
    transport = new EmlApiQueueTransport({ connection: redis.connection, prefix: redis.prefix, retry: FAST_RETRY });
    transporter = nodemailer.createTransport(transport) as unknown as Transporter<EmlApiQueuedMessageInfo>;
  });

  afterAll(async () => {
    await transport?.close();
    await emu?.close();
    await redis?.stop();
  });

  beforeEach(async () => {
    emu.reset();
    emu.setFaults(undefined);
    await transport.queue.obliterate({ force: true });
  });

  afterEach(() => workers.closeAll());

  const worker = (options: Partial<EmlApiWorkerOptions> = {}) => workers.start(options);

  const allSent = (n: number) => async () => (await transport.queue.getJobCounts('completed')).completed === n;

  describe('an outage of the service', () => {
    it('503 for 5 seconds, then back: every message delivered, none twice, none failed', async () => {
      const messageIds = new Set<string>();
      for (let i = 0; i < 40; i++) {
        const info = await transporter.sendMail({ from: 'shop@example.test', to: `c${i}@example.test`, text: `n${i}` });
        messageIds.add(info.messageId);
      }
      emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
      const w = await worker({ concurrency: 5 });
      const retries: number[] = [];
      w.on('retrying', (_job, err: { responseCode?: number }) => retries.push(err.responseCode ?? 0));
      const outageStart = Date.now();
      await eventually(() => (emu.faultStats()?.unavailable ?? 0) >= 40, { what: 'every message tried once' });
      await new Promise((resolve) => setTimeout(resolve, 5000 - (Date.now() - outageStart)));
      const refused = emu.faultStats()!.unavailable;
      emu.setFaults(undefined);
      expect(emu.messages()).toHaveLength(0);
      await eventually(allSent(40), { what: 'all 40 sent', timeout: 20_000 });
      const delivered = emu.messages().map((m) => m.messageId);
      expect(delivered).toHaveLength(40);
      expect(new Set(delivered)).toEqual(messageIds);
      expect(await transport.queue.getJobCounts('failed', 'waiting', 'delayed')).toEqual({
        failed: 0,
        waiting: 0,
        delayed: 0,
      });
      expect(retries.length).toBe(refused);
      expect(new Set(retries)).toEqual(new Set([503]));
      console.log(`outage: ${refused} attempts refused with 503 over 5 s, then 40 of 40 delivered once each`);
    }, 40_000);
  });

  describe('answers lost after the service processed the send', () => {
    it('group and tracked sends are replayed with the same body and key: delivered once', async () => {
      const client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url });
      await client.addToGroup('newsletter', [
        { email: 'ann@example.test', substitutions: { first_name: 'Ann' } },
        { email: 'bob@example.test', substitutions: { first_name: 'Bob' } },
      ]);
      await client.close();
      await transporter.sendMail({
        from: 'news@example.test',
        subject: 'Hello {{first_name}}',
        html: '<p>Hi {{first_name}}</p>',
        group: 'newsletter',
      });
      await transporter.sendMail({
        from: 'shop@example.test',
        to: 'carl@example.test',
        subject: 'Tracked',
        html: '<p>x</p>',
        tracking: true,
      });
      // Every send is processed, then its connection dropped: the worker cannot know it went through.
      emu.setFaults({ resetAfterProcessing: 1 });
      const w = await worker({ concurrency: 2 });
      await eventually(() => (emu.faultStats()?.resetAfterProcessing ?? 0) >= 2, { what: 'both answers lost' });
      emu.setFaults(undefined);
      const sent: string[] = [];
      w.on('sent', (job) => sent.push(job.name));
      await eventually(allSent(2), { what: 'both sent' });
      expect(emu.mailbox('ann@example.test').map((m) => m.subject)).toEqual(['Hello Ann']);
      expect(emu.mailbox('bob@example.test').map((m) => m.subject)).toEqual(['Hello Bob']);
      expect(emu.mailbox('carl@example.test')).toHaveLength(1);
      expect(emu.messages()).toHaveLength(2);
      const completed = await transport.queue.getCompleted();
      for (const job of completed) expect(job.attemptsMade).toBeGreaterThanOrEqual(2);
    }, 30_000);
  });

  describe('a 25 MB message', () => {
    it('queues and sends intact; Redis holds its raw bytes until it is sent, then nothing', async () => {
      const attachment = randomBytes(25 * 1024 * 1024);
      const info = await transporter.sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        subject: 'Large',
        text: 'See attachment',
        attachments: [{ filename: 'big.bin', content: attachment }],
      });
      const job = await transport.queue.getJob(info.queueId);
      const stored = await redis.client.strlen(job!.data.contentKey);
      expect(stored).toBe(job!.data.size);
      expect(stored).toBeGreaterThan(25 * 1024 * 1024 * 1.3); // the attachment's Base64 inside the EML
      expect(stored).toBeLessThan(25 * 1024 * 1024 * 1.4); // but not Base64 again
      await worker();
      await eventually(allSent(1), { what: 'the large message sent', timeout: 60_000 });
      const [copy] = emu.mailbox('ann@example.test');
      const received = copy!.attachments.find((a) => a.filename === 'big.bin');
      expect(received?.size).toBe(attachment.length);
      const raw = copy!.raw.toString('latin1');
      const base64 = raw.slice(raw.indexOf('\r\n\r\n', raw.indexOf('filename=big.bin')) + 4).split('\r\n--')[0]!;
      expect(
        createHash('sha256')
          .update(Buffer.from(base64.replace(/\r\n/g, ''), 'base64'))
          .digest('hex'),
      ).toBe(createHash('sha256').update(attachment).digest('hex'));
      await eventually(async () => (await redis.keys(`${redis.location.contentKeyPrefix}*`)).length === 0, {
        what: 'the content removed after the send',
      });
    }, 90_000);
  });
});
