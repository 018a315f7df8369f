import { describe, expect, it } from 'vitest';
import { addJob } from '../../src/queue/add-job.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { recordQueue, type OutboxJobRecord } from '../../src/queue/outbox-job.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { eventually, pastContentDeadlines } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * The outbox's scripts read a job's data in Lua (cjson) to tell whether it points at stored content; cjson refuses
 * the escape of a lone UTF-16 surrogate, which JSON.stringify writes (`\ud800`). Data they could not read was taken
 * for a job that no longer needs its content: the sweeper freed the content of a queued message and it was never
 * sent. Real redis-server, the emulator, a worker in this process.
 */

const outbox = useOutbox({ transport: { timeouts: { store: 500 } } });
const location = resolveQueueLocation(undefined, undefined);

/** Stored beside its job (over 64 KiB), so the sweeper judges it. */
const eml = Buffer.from(
  `From: shop@example.test\r\nTo: ann@example.test\r\nSubject: Odd\r\n\r\n${'x'.repeat(100_000)}\r\n`,
);

describe('a queued job whose data holds odd characters', () => {
  it('keeps its content through a sweep past its deadline when its data holds lone surrogates, and is sent', async () => {
    const info = await outbox.transport.producer.enqueue({
      content: eml,
      envelope: { from: 'shop@example.test', to: ['ann@example.test'] },
      idempotencyKey: 'odd-1',
    });
    // enqueue refuses such text; the scripts must not depend on that to keep a queued job's content.
    const jobKey = `bull:eml-api:${info.queueId}`;
    const stored = JSON.parse((await outbox.redis.client.hget(jobKey, 'data'))!) as OutboxJobRecord;
    const odd = {
      ...stored,
      envelope: { from: 'shop@example.test', to: ['ann\ud800@example.test', '"q\\"uo\u0000te%"@example.test'] },
      messageId: '<\udc00%[a-z]*@example.test>',
    };
    await outbox.redis.client.hset(jobKey, 'data', JSON.stringify(odd));
    await pastContentDeadlines(outbox.redis.client);
    expect(await sweepStoredContent(outbox.redis.client, location)).toBe(0);
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobState(info.queueId)) === 'completed', {
      what: 'the job sent',
    });
    expect(outbox.emu.messages()).toHaveLength(1);
    const job = await recordQueue(outbox.transport.queue).getJob(info.queueId);
    expect(job!.data.envelope.to).toEqual(['ann\ud800@example.test', '"q\\"uo\u0000te%"@example.test']);
    expect(job!.data.sent?.id).toBeDefined();
    expect(await outbox.redis.client.exists(job!.data.contentKey)).toBe(0);
  });

  it('is not added when its content is not whole, even when its data holds lone surrogates', async () => {
    const contentKey = 'bull:eml-api:content:odd-2:1-00';
    const data = {
      kind: 'eml',
      contentKey,
      size: 100,
      envelope: { from: 'shop@example.test', to: ['ann\udfff@example.test'] },
      messageId: '',
      idempotencyKey: 'odd-2',
    } as OutboxJobRecord;
    const added = await addJob(recordQueue(outbox.transport.queue), {
      name: 'eml',
      data,
      options: {},
      jobId: 'odd-2',
      contentKey,
    });
    expect(added).toMatchObject({ kind: 'added', state: { refused: true, data: null } });
    expect(await outbox.transport.queue.getJob('odd-2')).toBeUndefined();
  });
});
