import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { openOutboxQueue, readOutboxSnapshot, readOutboxStatus, retryFailedSends } from '../../src/queue/index.js';
import { startRedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { sweepStoredContent } from '../../src/queue/content-sweeper.js';
import { resolveQueueLocation } from '../../src/queue/queue-location.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { addFailedJobs, eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * What a metrics scrape, `eml-api queue status` and each `eml-api queue
 * watch` line cost Redis. They counted the parked jobs with one script that
 * read the data of the newest 10,000 failed jobs: with failed jobs keeping
 * their 40 KB content, one scrape blocked Redis for about a second. Parked
 * jobs are now kept in a set of their own as jobs are parked and put back
 * (the workers' sweep drops what a dashboard changed), and read with one
 * command: the cost is counted in Redis's own command statistics, whatever
 * the number of failed jobs. Real redis-server, the emulator, real workers.
 */

// A message whose outcome is unknown is parked when it runs again, after its retry delay: a short one here.
const outbox = useOutbox({ clean: 'redis', transport: { retry: { delay: 100, maxDelay: 100, jitter: 0 } } });

/** Every command Redis has run, those of scripts included (INFO commandstats). */
async function commandsRun(): Promise<number> {
  const stats = await outbox.redis.client.info('commandstats');
  return [...stats.matchAll(/calls=(\d+)/g)].reduce((sum, [, calls]) => sum + Number(calls), 0);
}

describe('the cost of the outbox snapshot', () => {
  it('is a handful of Redis commands whatever the number of failed jobs', async () => {
    await addFailedJobs(outbox.redis.client, { count: 3000, contentBytes: 1024 });
    const before = await commandsRun();
    const snapshot = await readOutboxSnapshot(outbox.transport.queue);
    // INFO itself counts once more.
    const used = (await commandsRun()) - before - 1;
    expect(snapshot.counts.failed).toBe(3000);
    expect(used).toBeLessThan(30);
  });
});

describe('parked jobs', () => {
  it('are counted as they are parked, put back, and removed', async () => {
    // The service takes the message and the connection is reset: an unknown outcome, parked at once
    // by a worker told the service keeps no keys.
    outbox.emu.setFaults({ resetAfterProcessing: 1 });
    const transporter = nodemailer.createTransport(outbox.transport);
    const first = await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
    const second = await transporter.sendMail({ from: 'a@example.test', to: 'c@example.test', text: 'y' });
    await outbox.workers.start({ idempotencyWindow: 0 });
    await eventually(async () => (await readOutboxSnapshot(outbox.transport.queue)).parked === 2, {
      what: 'two jobs parked',
    });
    await outbox.workers.closeAll();
    outbox.emu.setFaults(undefined);

    // Put back by a person: no longer waiting for one.
    expect((await retryFailedSends(outbox.transport.queue, { ids: [first.queueId] })).retried).toEqual([first.queueId]);
    expect((await readOutboxSnapshot(outbox.transport.queue)).parked).toBe(1);
    const { stdout } = await runCliCapturing(['queue', 'status'], { env: { REDIS_URL: outbox.redis.url } });
    expect(stdout).toContain('parked for a person 1');

    // Removed behind the outbox's back (a dashboard): the workers' sweep sees it.
    await outbox.transport.queue.remove(second.queueId);
    await sweepStoredContent(outbox.redis.client, resolveQueueLocation(undefined, undefined));
    expect((await readOutboxSnapshot(outbox.transport.queue)).parked).toBe(0);
    expect((await readOutboxStatus(outbox.transport.queue)).counts.failed).toBe(0);
  });

  it('stay counted when a worker parks a job again before the put-back that preceded it has taken it out', async () => {
    outbox.emu.setFaults({ resetAfterProcessing: 1 });
    const info = await nodemailer
      .createTransport(outbox.transport)
      .sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
    await outbox.workers.start({ idempotencyWindow: 0 });
    await eventually(async () => (await readOutboxSnapshot(outbox.transport.queue)).parked === 1, {
      what: 'the job parked',
    });
    const parkedRun = (await outbox.transport.queue.getJob(info.queueId))!.processedOn;
    // queue retry through a connection whose taking out of the parked set is late.
    const hold = await startRedisHoldProxy(outbox.redis.port);
    const admin = await openOutboxQueue({ connection: hold.url });
    try {
      hold.holdNext(/\$(4\r\nzrem|7\r\nevalsha|4\r\neval)\r\n.*outbox:parked/is);
      const retrying = retryFailedSends(admin.queue, { ids: [info.queueId] });
      // Meanwhile the worker takes it, and parks it again (the service's answer is lost again).
      await eventually(
        async () => {
          const job = (await outbox.transport.queue.getJob(info.queueId))!;
          return job.processedOn !== parkedRun && (await job.isFailed());
        },
        { what: 'the job parked again' },
      );
      hold.release();
      expect((await retrying).retried).toEqual([info.queueId]);
      expect((await readOutboxSnapshot(outbox.transport.queue)).parked).toBe(1);
    } finally {
      await admin.close();
      await hold.close();
    }
  });
});
