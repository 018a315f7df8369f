import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { EmlApiClient } from '../../src/index.js';
import type { OutboxWorkerOptions } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';
import { REDIS_KINDS } from '../helpers/outbox-redis.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * Queued messages reach the service: through an outage, through lost
 * answers (group and tracked sends replayed with the same body and key),
 * and at 25 MB. Real redis-server (one, and a Redis Cluster: issue 21), real
 * emulator, workers in this process.
 */

/** Fast retries for tests: 200 ms doubling to 1 s. */
const FAST_RETRY = { attempts: 40, delay: 200, maxDelay: 1000, jitter: 0 };

// The kinds run side by side (each has its own Redis, emulator and workers); the tests of a kind, in turn.
describe.concurrent.each(REDIS_KINDS)('on %s Redis', (kind) => {
  const outbox = useOutbox({ kind, emulator: { groups: ['newsletter'] }, transport: { retry: FAST_RETRY } });
  const worker = (options: Partial<OutboxWorkerOptions> = {}) => outbox.workers.start(options);

  const allSent = (n: number) => async () => (await outbox.transport.queue.getJobCounts('completed')).completed === n;

  describe.sequential('an outage of the service', () => {
    it('503 until every message was refused three times, then back: every message delivered, none twice, none failed', async () => {
      const messageIds = new Set<string>();
      for (let i = 0; i < 40; i++) {
        const info = await outbox.transporter.sendMail({
          from: 'shop@example.test',
          to: `c${i}@example.test`,
          text: `n${i}`,
        });
        messageIds.add(info.messageId);
      }
      outbox.emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
      const w = await worker({ concurrency: 5 });
      const retries: number[] = [];
      w.on('retrying', (_job, err: { responseCode?: number }) => retries.push(err.responseCode ?? 0));
      // Each message's attempts go through the worker's retry schedule (a job is not retried before its delay).
      await eventually(() => (outbox.emu.faultStats()?.unavailable ?? 0) >= 3 * 40, {
        what: 'every message refused three times',
      });
      const refused = outbox.emu.faultStats()!.unavailable;
      outbox.emu.setFaults(undefined);
      expect(outbox.emu.messages()).toHaveLength(0);
      await eventually(allSent(40), { what: 'all 40 sent', timeout: 20_000 });
      const delivered = outbox.emu.messages().map((m) => m.messageId);
      expect(delivered).toHaveLength(40);
      expect(new Set(delivered)).toEqual(messageIds);
      expect(await outbox.transport.queue.getJobCounts('failed', 'waiting', 'delayed')).toEqual({
        failed: 0,
        waiting: 0,
        delayed: 0,
      });
      expect(retries.length).toBe(refused);
      expect(new Set(retries)).toEqual(new Set([503]));
      console.log(`outage: ${refused} attempts refused with 503, then 40 of 40 delivered once each`);
    }, 40_000);
  });

  describe.sequential('answers lost after the service processed the send', () => {
    it('group and tracked sends are replayed with the same body and key: delivered once', async () => {
      const client = new EmlApiClient({ apiKey: outbox.emu.apiKey, baseUrl: outbox.emu.url });
      await client.addToGroup('newsletter', [
        { email: 'ann@example.test', substitutions: { first_name: 'Ann' } },
        { email: 'bob@example.test', substitutions: { first_name: 'Bob' } },
      ]);
      await client.close();
      await outbox.transporter.sendMail({
        from: 'news@example.test',
        subject: 'Hello {{first_name}}',
        html: '<p>Hi {{first_name}}</p>',
        group: 'newsletter',
      });
      await outbox.transporter.sendMail({
        from: 'shop@example.test',
        to: 'carl@example.test',
        subject: 'Tracked',
        html: '<p>x</p>',
        tracking: true,
      });
      // Every send is processed, then its connection dropped: the worker cannot know it went through.
      outbox.emu.setFaults({ resetAfterProcessing: 1 });
      const w = await worker({ concurrency: 2 });
      await eventually(() => (outbox.emu.faultStats()?.resetAfterProcessing ?? 0) >= 2, { what: 'both answers lost' });
      outbox.emu.setFaults(undefined);
      const sent: string[] = [];
      w.on('sent', (job) => sent.push(job.name));
      await eventually(allSent(2), { what: 'both sent' });
      expect(outbox.emu.mailbox('ann@example.test').map((m) => m.subject)).toEqual(['Hello Ann']);
      expect(outbox.emu.mailbox('bob@example.test').map((m) => m.subject)).toEqual(['Hello Bob']);
      expect(outbox.emu.mailbox('carl@example.test')).toHaveLength(1);
      expect(outbox.emu.messages()).toHaveLength(2);
      const completed = await recordQueue(outbox.transport.queue).getCompleted();
      for (const job of completed) expect(job.attemptsMade).toBeGreaterThanOrEqual(2);
    }, 30_000);
  });

  describe.sequential('a 25 MB message', () => {
    it('queues and sends intact; Redis holds its raw bytes until it is sent, then nothing', async () => {
      const attachment = randomBytes(25 * 1024 * 1024);
      const info = await outbox.transporter.sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        subject: 'Large',
        text: 'See attachment',
        attachments: [{ filename: 'big.bin', content: attachment }],
      });
      const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
      const stored = await outbox.redis.client.strlen(job!.data.contentKey);
      expect(stored).toBe(job!.data.size);
      expect(stored).toBeGreaterThan(25 * 1024 * 1024 * 1.3); // the attachment's Base64 inside the EML
      expect(stored).toBeLessThan(25 * 1024 * 1024 * 1.4); // but not Base64 again
      await worker();
      await eventually(allSent(1), { what: 'the large message sent', timeout: 60_000 });
      const [copy] = outbox.emu.mailbox('ann@example.test');
      const received = copy!.attachments.find((a) => a.filename === 'big.bin');
      expect(received?.size).toBe(attachment.length);
      const raw = copy!.raw.toString('latin1');
      const base64 = raw.slice(raw.indexOf('\r\n\r\n', raw.indexOf('filename=big.bin')) + 4).split('\r\n--')[0]!;
      expect(
        createHash('sha256')
          .update(Buffer.from(base64.replace(/\r\n/g, ''), 'base64'))
          .digest('hex'),
      ).toBe(createHash('sha256').update(attachment).digest('hex'));
      await eventually(
        async () => (await outbox.redis.keys(`${outbox.redis.location.contentKeyPrefix}*`)).length === 0,
        {
          what: 'the content removed after the send',
        },
      );
    }, 90_000);
  });
});
