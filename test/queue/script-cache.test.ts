import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordQueue } from '../../src/queue/outbox-job.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * The outbox's scripts (the add, the record of a send with BullMQ's completion) go as EVAL the first time on a
 * connection, EVALSHA after: a Redis that forgot them (SCRIPT FLUSH, a failover to a replica without them) answers
 * NOSCRIPT, and each is sent again whole, once. Real redis-server, the fake service holding the sends.
 */

const outbox = useOutbox();
let service: FakeService;

beforeAll(async () => {
  service = await startFakeService();
});

afterAll(async () => {
  await service?.close();
});

const receipt = (n: number) => ({
  from: 'shop@example.test',
  to: 'ann@example.test',
  subject: `Receipt ${n}`,
  text: 'Thanks',
});

describe('Redis forgetting the scripts (SCRIPT FLUSH)', () => {
  it('between adds and between fetches and completions, loses and doubles nothing', async () => {
    await outbox.transporter.sendMail(receipt(0));
    await outbox.redis.client.script('FLUSH');
    const infos = await Promise.all([1, 2, 3, 4, 5].map((n) => outbox.transporter.sendMail(receipt(n))));
    expect(new Set(infos.map((info) => info.queueId)).size).toBe(5);
    expect(await outbox.transport.queue.getJobCountByTypes('wait', 'prioritized')).toBe(6);
    service.answer('hold');
    const worker = await outbox.workers.start({ baseUrl: service.url, concurrency: 6 });
    const sent: string[] = [];
    worker.on('sent', (job) => void sent.push(String(job.id)));
    await eventually(() => service.held === 6, { what: 'six sends held' });
    await outbox.redis.client.script('FLUSH');
    service.releaseAll();
    await eventually(() => sent.length === 6, { what: () => `six sent (${sent.length})` });
    expect(service.requests).toHaveLength(6);
    const jobs = await recordQueue(outbox.transport.queue).getJobs(['completed']);
    expect(jobs).toHaveLength(6);
    for (const job of jobs) {
      expect(job.data.sent?.id).toBe('held');
      expect(job.data).not.toHaveProperty('inline');
    }
    expect(await outbox.transport.queue.getJobCountByTypes('wait', 'prioritized', 'active', 'delayed', 'failed')).toBe(
      0,
    );
    // The adds and the completions did meet a Redis without their scripts.
    const noscript = /errorstat_NOSCRIPT:count=(\d+)/.exec(await outbox.redis.client.info('errorstats'));
    expect(Number(noscript?.[1] ?? 0)).toBeGreaterThanOrEqual(2);
  });
});
