import { beforeAll, describe, expect, it } from 'vitest';
import nodemailer from 'nodemailer';
import { EmlApiQueueTransport, startOutboxWorker } from '../../src/queue/index.js';
import { rejectionOf } from '../helpers/async.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { capturingLogger } from '../helpers/logger.js';
import { eventually } from '../helpers/outbox.js';
import { freePort } from '../helpers/redis-server.js';

/**
 * A newcomer's Redis that is not running (or not where they said). A worker
 * start neither rejected nor logged for 45 s and more, and the queue
 * transport and `eml-api queue status` said ioredis's "Reached the max
 * retries per request limit (which is 3). Refer to maxRetriesPerRequest",
 * an option the user must not change. Now the worker says so at once and
 * keeps saying so, and rejects with ECONNECTION after `timeouts.connect`
 * unless told to wait (`waitForRedis`); every error names the host and port,
 * the cause and what to check. Nothing listens on the port (no Redis runs).
 * The tests share nothing but that port, and mostly wait out timeouts (the
 * CLI's is its default, 10 s): they run at once.
 */

let nowhere: string;
const service = { apiKey: 'k', baseUrl: 'http://127.0.0.1:9' };

beforeAll(async () => {
  nowhere = `redis://127.0.0.1:${await freePort()}`;
});

const CAUSE = /the connection was refused \(ECONNREFUSED\): is Redis running at 127\.0\.0\.1:\d+/;
const FIX = /Check the connection option \(REDIS_URL or --redis with the CLI\)/;

describe.concurrent('a worker whose Redis is not running', () => {
  it('warns at once, keeps warning, and rejects with ECONNECTION after timeouts.connect', async () => {
    const logger = capturingLogger();
    const started = startOutboxWorker({ ...service, connection: nowhere, logger, timeouts: { connect: 2500 } });
    await eventually(() => logger.messages('warn').length >= 1, { timeout: 1000, what: 'a warning at once' });
    expect(logger.messages('warn')[0]).toMatch(CAUSE);
    const err = await rejectionOf(started);
    expect(err).toMatchObject({ code: 'ECONNECTION' });
    expect(err.message).toMatch(CAUSE);
    expect(err.message).toMatch(FIX);
    expect(err.message).toContain('timeouts.connect');
    expect(err.message).not.toMatch(/maxRetriesPerRequest/);
    expect(logger.messages('warn').length).toBeGreaterThan(1);
  });

  it('waits for Redis with waitForRedis, still saying so, until stopped', async () => {
    const logger = capturingLogger();
    const stop = new AbortController();
    const started = startOutboxWorker(
      { ...service, connection: nowhere, logger, timeouts: { connect: 500 }, waitForRedis: true },
      { signal: stop.signal },
    );
    await eventually(() => logger.messages('warn').length >= 2, { what: 'warnings while waiting' });
    stop.abort();
    expect(await rejectionOf(started)).toMatchObject({ code: 'EABORT' });
  });
});

describe.concurrent('the producer and eml-api queue status with Redis not running', () => {
  it('say where, why and what to check, never ioredis’s retry limit', async () => {
    const transport = new EmlApiQueueTransport({ connection: nowhere });
    try {
      const err = await rejectionOf(
        nodemailer.createTransport(transport).sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' }),
      );
      expect(err).toMatchObject({ code: 'ECONNECTION' });
      expect(err.message).toMatch(CAUSE);
      expect(err.message).toMatch(FIX);
      expect(await rejectionOf(transport.verify())).toMatchObject({ message: expect.stringMatching(CAUSE) });
    } finally {
      await transport.close();
    }
    const cli = await runCliCapturing(['queue', 'status'], { env: { REDIS_URL: nowhere } });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(CAUSE);
    expect(cli.stderr).not.toMatch(/maxRetriesPerRequest/);
  });

  it('eml-api worker exits 1 saying so, after timeouts.connect', async () => {
    const cli = await runCliCapturing(['worker'], {
      env: { REDIS_URL: nowhere, EML_API_URL: 'http://127.0.0.1:9', EML_API_KEY: 'k' },
    });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(CAUSE);
    expect(cli.stderr).toContain('--wait-for-redis');
  }, 30_000);
});
