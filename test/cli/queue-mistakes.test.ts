import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { runCli } from '../../src/cli/run-cli.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/** `eml-api queue` given a queue name or prefix with a typo, as an operator types them. */

let redis: RedisServer;
let env: Record<string, string>;

beforeAll(async () => {
  redis = await startRedisServer();
  env = { REDIS_URL: redis.url };
  const transport = new EmlApiQueueTransport({ connection: redis.url });
  await nodemailer
    .createTransport(transport)
    .sendMail({ from: 'shop@example.test', to: 'ann@example.test', subject: 'Hi', text: 'x' });
  await transport.close();
});
afterAll(async () => {
  await redis?.stop();
});

describe('eml-api queue with a queue that is not in Redis', () => {
  it('warns that Redis holds no such queue, naming the flags to check, and writes nothing to Redis', async () => {
    const before = (await redis.client.keys('*')).sort();
    for (const argv of [
      ['queue', 'status', '--queue', 'eml-apl'],
      ['queue', 'status', '--prefix', 'bul', '--json'],
      ['queue', 'retry', '--queue', 'eml-apl'],
      ['queue', 'watch', '--count', '1', '--queue', 'eml-apl'],
    ]) {
      const run = await runCliCapturing(argv, { env });
      expect(run.code, argv.join(' ')).toBe(0);
      expect(run.stderr, argv.join(' ')).toMatch(
        /^warning: Redis holds no queue "eml-ap[il]" under the prefix "bull?": check --queue and --prefix\n$/,
      );
    }
    expect((await redis.client.keys('*')).sort()).toEqual(before);
  });

  it('does not warn of the queue in use', async () => {
    const run = await runCliCapturing(['queue', 'status'], { env });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toContain('prioritized 1');
  });
});

describe('eml-api queue when Redis goes away while it runs', () => {
  it('watch says where Redis was and why it failed, never ioredis’s retry limit', { timeout: 60_000 }, async () => {
    const gone = await startRedisServer();
    let lines = 0;
    let stderr = '';
    const watching = runCli(['queue', 'watch', '--interval', '1'], {
      stdout: {
        write: (s: string) => {
          lines += s.split('\n').length - 1;
          if (lines === 1) void gone.stop();
          return true;
        },
      },
      stderr: { write: (s: string) => ((stderr += s), true) },
      stdin: Readable.from([]),
      env: { REDIS_URL: gone.url },
    });
    expect(await watching).toBe(1);
    expect(stderr).not.toContain('maxRetriesPerRequest');
    expect(stderr).toMatch(
      new RegExp(`^eml-api: Could not reach Redis at 127\\.0\\.0\\.1:${gone.port}: .*is Redis running at`, 'm'),
    );
  });
});
