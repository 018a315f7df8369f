import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { capturingLogger } from '../helpers/logger.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { startFakeService, type FakeReply, type FakeService } from '../helpers/fake-service.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { recordQueue } from '../../src/queue/outbox-job.js';

/**
 * A worker pointed at the wrong host (the marketing site, a single-page app,
 * a captive portal, a WAF's block page) that answers every request 200 with
 * an HTML page. The outbox used to take any 2xx for the service's
 * acceptance: every queued message "sent", its content deleted, its job
 * completed, nothing delivered (review F2, attack/14-catch-all-200.ts). A 2xx
 * that is not the service's answer (JSON with the send's id, CONTRACT.md) is
 * now an unknown outcome: the job keeps its content, records when it may
 * have been accepted, and is retried on its schedule; `eml-api worker` does
 * not start against such a host at all. Real redis-server, the fake service
 * over HTTP.
 */

const SITE_PAGE: FakeReply = {
  status: 200,
  text: '<!doctype html><html><body>Welcome to Example Corp</body></html>',
  headers: { 'content-type': 'text/html' },
};

let redis: RedisServer;
let site: FakeService;
let transport: EmlApiQueueTransport;
const logger = capturingLogger();
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: 'k'.repeat(32), baseUrl: site.url, logger }));

beforeAll(async () => {
  [redis, site] = await Promise.all([startRedisServer({ appendonly: true }), startFakeService()]);
  transport = new EmlApiQueueTransport({ connection: redis.url, retry: { delay: 100, maxDelay: 100, jitter: 0 } });
});

afterAll(async () => {
  await transport?.close();
  await site?.close();
  await redis?.stop();
});

beforeEach(async () => {
  site.clear();
  logger.clear();
  await transport.queue.obliterate({ force: true });
});

afterEach(() => workers.closeAll());

const send = (n: number) =>
  nodemailer.createTransport(transport).sendMail({
    from: 'a@example.test',
    to: 'b@example.test',
    subject: `order ${n}`,
    text: 'x',
    idempotencyKey: `order-${n}`,
  });

/** Whether the job still holds its message: inline in the job (up to 64 KiB stored) or under its content key. */
async function holdsContent(id: string): Promise<boolean> {
  const job = (await recordQueue(transport.queue).getJob(id))!;
  return job.data.inline !== undefined || (await redis.client.exists(job.data.contentKey)) === 1;
}

describe('a 2xx that is not the service answer', () => {
  it('does not count as sent: the content stays, the attempt may have been accepted, the job is retried', async () => {
    site.answer(SITE_PAGE);
    const info = await send(0);
    await workers.start();
    // Tried twice at least (each answered 200 HTML): it is being retried, not completed.
    await eventually(() => site.requests.length >= 2, { what: 'two attempts' });
    const job = await recordQueue(transport.queue).getJob(info.queueId);
    expect(await job!.getState()).not.toBe('completed');
    expect(job!.data.sent).toBeUndefined();
    expect(await holdsContent(info.queueId)).toBe(true);
    expect(job!.data.lastError).toMatchObject({ code: 'EAPI', responseCode: 200, permanent: false });
    expect(job!.data.lastError!.message).toMatch(/200 OK.*an HTML page.*not the service's answer.*baseUrl/);
    expect(job!.data.lastError!.message).toContain('the outbox sends it again with the same Idempotency-Key');
    // Whether the host took it is unknown: the service's idempotency window runs from the first attempt.
    expect(job!.data.possiblyAcceptedAt).toBeTypeOf('number');
    expect(logger.messages('error').some((m) => m.includes('not the service'))).toBe(true);

    // Pointed at the service again (here: the host answers as the service does), it is sent, once.
    site.answer({ status: 202, body: { id: 'msg_1', messageId: '<m1@example.test>', recipients: 1 } });
    await eventually(async () => (await recordQueue(transport.queue).getJob(info.queueId))!.finishedOn !== undefined, {
      what: 'the job completed',
    });
    const sent = await recordQueue(transport.queue).getJob(info.queueId);
    expect(await sent!.getState()).toBe('completed');
    expect(sent!.returnvalue).toMatchObject({ id: 'msg_1', response: '202 Accepted' });
    expect(await holdsContent(info.queueId)).toBe(false);
  });

  it('is also not sent on JSON without the id of the send, or an empty body', async () => {
    for (const [n, reply] of [
      [1, { status: 200, body: { ok: true } }],
      [2, { status: 202 }],
    ] as const) {
      site.clear();
      site.answer(reply);
      const info = await send(n);
      await workers.start();
      await eventually(() => site.requests.length >= 1, { what: 'an attempt' });
      await eventually(
        async () => (await recordQueue(transport.queue).getJob(info.queueId))!.data.lastError !== undefined,
        {
          what: 'the attempt recorded',
        },
      );
      const job = await recordQueue(transport.queue).getJob(info.queueId);
      expect(await job!.getState()).not.toBe('completed');
      expect(job!.data.lastError!.responseCode).toBe(reply.status);
      expect(await holdsContent(info.queueId)).toBe(true);
      await workers.closeAll();
    }
  });
});

describe('eml-api worker against a host that answers every request 200', () => {
  it('does not start: its start-up check takes a 2xx to an empty send for a wrong baseUrl', async () => {
    site.answer(SITE_PAGE);
    await send(0);
    const r = await runCliCapturing(['worker'], {
      env: { REDIS_URL: redis.url, EML_API_URL: site.url, EML_API_KEY: 'k'.repeat(32) },
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/answered 200 OK.*baseUrl/);
    expect(r.stdout).not.toContain('sent order-0');
    // Only the check was posted; the queued message was not taken.
    expect(site.requests).toHaveLength(1);
    expect(site.requests[0]!.text).toBe('{}');
    expect(await transport.queue.getJobCounts('prioritized', 'completed')).toEqual({ prioritized: 1, completed: 0 });
  });
});
