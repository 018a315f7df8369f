import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import { retryFailedSends, startOutboxWorker } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * `eml-api queue retry` (retryFailedSends) while workers run, which is how
 * it is used: a put-back message that fails again at once must not be put
 * back again by the same call. The call used to read the failed list while
 * it retried, so a worker failing the messages again as fast as they came
 * back kept it going without end, each round a new request to the service.
 * Real redis-server, real emulator; the workers' key lacks the "sender" scope
 * (403, permanent, and cured by fixing the key, so the content stays to be put back).
 */

const GROUPS_ONLY_KEY = 'k-groups-only';

const MESSAGES = 150;

const outbox = useOutbox({
  emulator: { apiKeys: [{ key: GROUPS_ONLY_KEY, scopes: ['group:insert'] }] },
  clean: 'nothing',
});

describe('putting failed messages back while workers run', () => {
  it('puts each failed message back once and returns, even when the workers fail them again at once', async () => {
    const transporter = nodemailer.createTransport(outbox.transport);
    for (let i = 0; i < MESSAGES; i++) {
      await transporter.sendMail({ from: 'shop@example.test', to: 'ann@example.test', subject: `#${i}`, text: 'x' });
    }
    const worker = await startOutboxWorker({
      connection: outbox.redis.url,
      apiKey: GROUPS_ONLY_KEY,
      baseUrl: outbox.emu.url,
      concurrency: 20,
      cleanupInterval: 0,
    });
    try {
      let failures = 0;
      worker.on('failed', () => failures++);
      const allFailed = () =>
        eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === MESSAGES, {
          what: `${MESSAGES} failed messages`,
        });
      await allFailed();
      // A worker tells of a failure just after Redis has it: wait for the last 'failed' events.
      await eventually(() => failures >= MESSAGES, { what: `${MESSAGES} failed events` });
      expect(failures).toBe(MESSAGES);

      failures = 0;
      const outcome = await Promise.race([
        retryFailedSends(outbox.transport.queue),
        new Promise<'still retrying'>((resolve) => setTimeout(() => resolve('still retrying'), 15_000)),
      ]);
      expect(outcome === 'still retrying' ? outcome : outcome.retried.length).toBe(MESSAGES);
      await allFailed();
      await eventually(async () => (await outbox.transport.queue.getJobCounts('active', 'waiting')).active === 0);
      await eventually(() => failures >= MESSAGES, { what: `${MESSAGES} failed events` });
      // One more attempt each: one more request each to the service, no more.
      expect(failures).toBe(MESSAGES);

      // With nothing failed, the command says so and succeeds.
      await outbox.transport.queue.clean(0, 0, 'failed');
      const { code, stdout } = await runCliCapturing(['queue', 'retry'], { env: { REDIS_URL: outbox.redis.url } });
      expect({ code, stdout }).toEqual({ code: 0, stdout: 'Put back 0 failed messages\n' });
    } finally {
      await worker.close({ abort: true });
    }
  }, 60_000);
});
