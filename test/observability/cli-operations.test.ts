import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { jsonLogLine } from '../../src/cli/lib/ops-flags.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { runCli } from '../../src/cli/run-cli.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/** `eml-api queue status --json`, `eml-api queue watch`, the operating flags' checks, and JSON log lines. */

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
let env: Record<string, string>;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
  env = { REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey };
});
afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});
beforeEach(async () => {
  await transport.queue.obliterate({ force: true });
});

const queueTwo = async () => {
  const transporter = nodemailer.createTransport(transport);
  for (const to of ['ann@example.test', 'bob@example.test']) {
    await transporter.sendMail({ from: 'shop@example.test', to, subject: 'Hi', text: 'x' });
  }
};

describe('eml-api queue status --json and queue watch', () => {
  it('status --json adds the oldest waiting job’s age, the parked jobs and the last minute’s sends', async () => {
    await queueTwo();
    const { code, stdout } = await runCliCapturing(['queue', 'status', '--json'], { env });
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({
      queue: 'eml-api',
      counts: { prioritized: 2, failed: 0 },
      oldestWaitingSeconds: expect.any(Number),
      parked: 0,
      sentLastMinute: 0,
      failedLastMinute: 0,
    });
  });

  it('watch prints a line per interval with counts, rate and oldest age, as text or JSON, until --count', async () => {
    await queueTwo();
    const text = await runCliCapturing(['queue', 'watch', '--interval', '1', '--count', '2'], { env });
    expect(text.code).toBe(0);
    const lines = text.stdout.trim().split('\n');
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line).toMatch(
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ {2}prioritized 2 {2}waiting 0 {2}delayed 0 {2}active 0 {2}failed 0 \(parked 0\) {2}sent 0\.0\/s {2}oldest \d+\.\ds$/,
      );
    }
    const json = await runCliCapturing(['queue', 'watch', '--count', '1', '--json'], { env });
    expect(JSON.parse(json.stdout)).toMatchObject({ queue: 'eml-api', counts: { prioritized: 2 }, sentPerSecond: 0 });
    const stop = new AbortController();
    const watching = runCliCapturing(['queue', 'watch', '--interval', '3600'], { env, signal: stop.signal });
    stop.abort();
    expect((await watching).code).toBe(0);
  });

  it('worker --http-port --no-metrics serves health without metrics', async () => {
    const stop = new AbortController();
    let out = '';
    const running = runCli(['worker', '--http-port', '0', '--no-metrics'], {
      stdout: { write: (s: string) => (out += s) },
      stderr: { write: (s: string) => (out += s) },
      env,
      signal: stop.signal,
    });
    await eventually(() => /Health and metrics on (http:\/\/\S+)/.test(out), { what: 'the port' });
    const url = /Health and metrics on (http:\/\/\S+)/.exec(out)![1]!;
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    expect((await fetch(`${url}/metrics`)).status).toBe(404);
    stop.abort();
    expect(await running).toBe(0);
  });

  it.each([
    [['queue', 'watch', '--interval', '0'], /--interval: expected 1-3600/],
    [['worker', '--http-port', 'x'], /--http-port: expected 0-65535/],
    [['worker', '--log-format', 'xml'], /--log-format: expected text or json/],
    [['worker', '--grace', '-1'], /--grace/],
    [['relay', '--http-host', '0.0.0.0'], /--http-host and --no-metrics go with --http-port/],
  ])('%j is a usage error (exit 2)', async (args, message) => {
    const r = await runCliCapturing(args, { env });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });
});

describe('JSON log lines', () => {
  it('name the fields a pipeline queries, never write a key, and take secrets out of what they quote', () => {
    const line = JSON.parse(
      jsonLogLine(
        'warn',
        'Message refused',
        {
          client: '127.0.0.1',
          session: 's1',
          key: 'relay',
          reply: '451 4.4.1 The email service could not be reached: key sk_live_0123456789abcdef refused',
          messageId: '<m@x>',
          apiKey: 'sk_live_0123456789abcdef',
          password: 'pw',
        },
        ['sk_live_0123456789abcdef'],
      ),
    );
    expect(line).toEqual({
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      level: 'warn',
      msg: 'Message refused',
      client_address: '127.0.0.1',
      session_id: 's1',
      key_id: 'relay',
      reply: '451 4.4.1 The email service could not be reached: key [redacted] refused',
      reply_code: 451,
      message_id: '<m@x>',
    });
    const stored = JSON.parse(
      jsonLogLine('info', 'Message accepted', { id: 'job-1', destination: 'outbox', bytes: 10 }, []),
    );
    expect(stored).toMatchObject({ id: 'job-1', queue_id: 'job-1', reply_code: 250, bytes: 10 });
  });
});
