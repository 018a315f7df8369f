import nodemailer from 'nodemailer';
import { describe, expect, it } from 'vitest';
import type { OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { useOutbox } from '../helpers/outbox-fixture.js';

/**
 * A message well over the service's body limit: the emulator answers 413 as
 * soon as it reads Content-Length and closes the connection while the worker
 * is still uploading. The worker's write then fails (EPIPE); the answer used
 * to be lost with the socket, so the job was retried as a connection error
 * for a day (nearly every one of these did). Now it fails at once with the
 * 413. Real redis-server, the emulator over HTTP.
 */

const outbox = useOutbox({
  emulator: { maxRequestSize: 1024 * 1024 },
  transport: { retry: { delay: 100, jitter: 0 } },
  clean: 'nothing',
});

describe('a message over the service body limit', () => {
  it('fails at once with EAPI 413, after one attempt, instead of being retried as a connection error', async () => {
    const transporter = nodemailer.createTransport(outbox.transport);
    const infos: OutboxQueuedMessageInfo[] = [];
    for (let i = 0; i < 5; i++) {
      infos.push(
        (await transporter.sendMail({
          from: 'a@example.test',
          to: 'b@example.test',
          text: `big ${i}`,
          attachments: [{ filename: 'big.bin', content: Buffer.alloc(6 * 1024 * 1024, i) }],
        })) as unknown as OutboxQueuedMessageInfo,
      );
    }
    const w = await outbox.workers.start({ concurrency: 1 });
    const retried: string[] = [];
    w.on('retrying', (_job, err: Error) => retried.push(err.message));
    await eventually(async () => (await outbox.transport.queue.getJobCounts('failed')).failed === 5, {
      what: 'five failed jobs',
    });
    expect(retried).toEqual([]);
    for (const info of infos) {
      const job = await outbox.transport.queue.getJob(info.queueId);
      expect(job!.attemptsMade).toBe(1);
      expect(job!.data.lastError).toMatchObject({
        code: 'EAPI',
        responseCode: 413,
        apiCode: 'payload_too_large',
        permanent: true,
      });
    }
    expect(outbox.emu.messages()).toEqual([]);
  });
});
