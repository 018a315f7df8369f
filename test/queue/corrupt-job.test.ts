import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { readOutboxStatus, retryFailedSends } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * A failed job whose data in Redis is not valid JSON (cut, or written by
 * hand). `eml-api queue status` exited 1 for the whole queue, and `queue
 * retry` exited 1 without saying that it had put the other jobs back. Such a
 * job is now reported, with what is wrong with it, and the rest works. Real
 * redis-server, the emulator, a worker in this process.
 */

const outbox = useOutbox({ clean: 'queue' });

/** Four group sends to a group the service does not have: failed at once (404), content kept. */
async function fourFailed(): Promise<string[]> {
  const transporter = nodemailer.createTransport(outbox.transport);
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) {
    const info = await transporter.sendMail({
      from: 'shop@example.test',
      subject: `News ${i}`,
      html: '<p>x</p>',
      group: 'no-such-group',
    });
    ids.push(info.queueId);
  }
  await outbox.workers.start();
  await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 4);
  await outbox.workers.closeAll();
  return ids;
}

const env = () => ({ REDIS_URL: outbox.redis.url });

describe('a failed job whose data is not valid JSON', () => {
  it('is listed by queue status with what is wrong, and the others as usual', async () => {
    const ids = await fourFailed();
    await outbox.redis.client.hset(`bull:eml-api:${ids[1]}`, 'data', '{"v":1,"kind":"eml","conte');
    const status = await readOutboxStatus(outbox.transport.queue);
    expect(status.failed).toHaveLength(4);
    const corrupt = status.failed.find((f) => f.queueId === ids[1])!;
    expect(corrupt.error.message).toMatch(/cannot be read.*not valid JSON/);
    const { code, stdout } = await runCliCapturing(['queue', 'status'], { env: env() });
    expect(code).toBe(0);
    expect(stdout).toContain(ids[1]);
    expect(stdout).toContain('not valid JSON');
    expect(stdout.match(/EAPI 404 group_not_found/g)).toHaveLength(3);
  });

  it('is left by queue retry, saying so, while the others are put back', async () => {
    const ids = await fourFailed();
    await outbox.redis.client.hset(`bull:eml-api:${ids[2]}`, 'data', 'garbage');
    const { retried, skipped } = await retryFailedSends(outbox.transport.queue);
    expect(retried.sort()).toEqual([ids[0], ids[1], ids[3]].sort());
    expect(skipped).toEqual([{ queueId: ids[2], reason: expect.stringMatching(/not valid JSON/) }]);
    await outbox.workers.start();
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 4);
    await outbox.workers.closeAll();
    await outbox.redis.client.hset(`bull:eml-api:${ids[0]}`, 'data', 'garbage');
    const { code, stdout, stderr } = await runCliCapturing(['queue', 'retry'], { env: env() });
    expect(stdout).toBe('Put back 2 failed messages\n');
    expect(stderr).toMatch(/Left 2 failed messages as they are: .*not valid JSON/);
    expect(code).toBe(0);
    const named = await runCliCapturing(['queue', 'retry', ids[0]!], { env: env() });
    expect(named.code).toBe(1);
    expect(named.stderr).toContain(`${ids[0]}: not put back:`);
  });
});
