import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { terminalText } from '../../src/cli/cli-io.js';
import { parseRate, redisConnection } from '../../src/cli/lib/ops-flags.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { nodeArgs } from '../helpers/compiled.js';

/** `eml-api worker` and `eml-api queue`: in-process through runCli(), and the real command with SIGTERM. */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
let env: Record<string, string>;

beforeAll(async () => {
  // With its append-only file, as docs/outbox.md asks: a worker warns on stderr about a Redis without it.
  [redis, emu] = await Promise.all([
    startRedisServer({ appendonly: true }),
    startEmulator({ faults: { latencyMs: 0 } }),
  ]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
  env = { REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey };
});

afterAll(async () => {
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

beforeEach(async () => {
  emu.reset();
  emu.setFaults(undefined);
  await transport.queue.obliterate({ force: true });
});

function cli(argv: string[], options: { env?: Record<string, string>; signal?: AbortSignal } = {}) {
  return runCliCapturing(argv, { env: options.env ?? env, ...(options.signal ? { signal: options.signal } : {}) });
}

const send = (to: string) =>
  nodemailer.createTransport(transport).sendMail({ from: 'shop@example.test', to, subject: 'Hi', text: 'x' });

describe('eml-api worker', () => {
  it('sends what is queued until stopped, printing a line per message', async () => {
    await send('ann@example.test');
    const stop = new AbortController();
    const running = cli(['worker', '--concurrency', '2', '--rate', '50/s'], { signal: stop.signal });
    await eventually(() => emu.messages().length === 1, { what: 'the queued message sent' });
    await send('ann@example.test'); // one more while it runs
    await eventually(() => emu.messages().length === 2, { what: 'the second message sent' });
    stop.abort();
    const { code, stdout, stderr } = await running;
    expect(code).toBe(0);
    expect(stderr).toBe('');
    expect(stdout).toMatch(
      /^Worker sending from queue "eml-api", 2 at a time, at most 50 per 1 s across all workers$/m,
    );
    expect(stdout.match(/^sent \S+ 202 Accepted id=msg_\S+$/gm)).toHaveLength(2);
    expect(stdout).toMatch(/Worker stopped: 2 sent, 0 failed\n$/);
    expect(stdout + stderr).not.toContain(emu.apiKey);
  });

  it('finishes the send in flight on SIGTERM, then exits 0 (the real command)', async () => {
    const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', 'worker']), {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stdout += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    // A slow send only once it runs: its check of the key at start would wait as long.
    await eventually(() => stdout.includes('Worker sending from queue'), { what: 'the worker running' });
    emu.setFaults({ latencyMs: 1500 });
    await send('slow@example.test');
    await eventually(async () => (await transport.queue.getJobCounts('active')).active === 1, {
      what: 'the send in flight',
    });
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(stdout).toContain('Stopping: finishing the sends in flight');
    expect(stdout).toMatch(/Worker stopped: 1 sent, 0 failed/);
    expect(emu.messages()).toHaveLength(1);
    expect(await transport.queue.getJobCounts('completed', 'active')).toEqual({ completed: 1, active: 0 });
  }, 30_000);

  it('refuses to start with a key the service refuses, rather than failing every queued message', async () => {
    await send('ann@example.test');
    const r = await cli(['worker'], { env: { ...env, EML_API_KEY: 'wrong-key' } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/401 invalid_api_key.*\[EAUTH\]/);
    expect(r.stderr).not.toContain('wrong-key');
    expect(await transport.queue.getJobCounts('prioritized', 'failed')).toEqual({ prioritized: 1, failed: 0 });
  });

  it('reports wrong usage with exit code 2', async () => {
    expect(await cli(['worker'], { env: { EML_API_URL: emu.url, EML_API_KEY: emu.apiKey } })).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('no Redis: pass --redis or set REDIS_URL'),
    });
    expect(await cli(['worker'], { env: { REDIS_URL: redis.url } })).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('no service URL'),
    });
    expect(await cli(['worker', '--rate', 'fast'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--rate'),
    });
    expect(await cli(['worker', '--concurrency', '0'])).toMatchObject({ code: 2 });
    expect(await cli(['worker', '--processes', 'many'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--processes: expected 1-1024, got "many"'),
    });
    expect(await cli(['worker', '--redis', 'http://nope'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('redis://'),
    });
    expect(await cli(['queue'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('status, retry, watch or purge'),
    });
    expect(await cli(['queue', 'purge'])).toMatchObject({ code: 2 });
  });

  it('documents itself in --help', async () => {
    expect((await cli(['worker', '--help'])).stdout).toContain('Usage: eml-api worker');
    expect((await cli(['queue', '--help'])).stdout).toContain('Usage: eml-api queue <subcommand>');
    expect((await cli(['queue', 'status', '--help'])).stdout).toContain('Usage: eml-api queue status');
    expect((await cli(['queue', 'retry', '--help'])).stdout).toContain('Usage: eml-api queue retry');
    expect((await cli(['queue', 'purge', '--help'])).stdout).toContain('Usage: eml-api queue purge');
    expect((await cli(['--help'])).stdout).toMatch(/worker .*\n.*queue status/);
  });
});

describe('eml-api queue status', () => {
  it('counts jobs by state', async () => {
    await send('ann@example.test');
    await send('bob@example.test');
    const { code, stdout } = await cli(['queue', 'status']);
    expect(code).toBe(0);
    expect(stdout).toMatch(
      /^Queue "eml-api": waiting 0, prioritized 2, delayed 0, active 0, waiting-children 0, failed 0, completed 0\nOldest waiting \d+\.\d s, parked for a person 0, in the last minute 0 sent and 0 failed\n$/,
    );
  });

  it('fails with exit code 1 when Redis does not answer', async () => {
    const r = await cli(['queue', 'status', '--redis', 'redis://127.0.0.1:1']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/Could not reach Redis at 127\.0\.0\.1:1/);
  });
});

describe('terminal text and rates', () => {
  it('strips escape sequences, C1 controls and bidi overrides; turns line breaks into spaces', () => {
    expect(terminalText('a\u001b[31mred\u001b[0m b')).toBe('ared b');
    expect(terminalText('\u001b]8;;http://evil\u001b\\link\u001b]8;;\u001b\\')).toBe('link');
    expect(terminalText('x\u009b2Jy\u202eevil\u0085')).toBe('xyevil');
    expect(terminalText('title\u001b]0;pwned\u0007 and \u001b(Bcharset')).toBe('title and charset');
    expect(terminalText('one\r\ntwo\tthree\u0000')).toBe('one two three ');
  });

  it('reads --rate as N/s, N/m or N/h', () => {
    expect(parseRate('20/s')).toEqual({ max: 20, duration: 1000 });
    expect(parseRate('20')).toEqual({ max: 20, duration: 1000 });
    expect(parseRate('600/m')).toEqual({ max: 600, duration: 60_000 });
    expect(parseRate('1/h')).toEqual({ max: 1, duration: 3_600_000 });
    expect(() => parseRate('0/s')).toThrow(/--rate/);
  });
});

describe('the outbox’s Redis from flags and the environment', () => {
  it('is one URL, or a cluster from several URLs or --redis-cluster (REDIS_CLUSTER)', () => {
    expect(redisConnection({ redis: ['redis://a:6379'] }, {})).toEqual({ connection: 'redis://a:6379' });
    expect(redisConnection({}, { REDIS_URL: 'redis://a:6379' })).toEqual({ connection: 'redis://a:6379' });
    const nodes = ['redis://a:7000', 'redis://b:7000'];
    expect(redisConnection({ redis: nodes }, {})).toEqual({ connection: { cluster: nodes } });
    expect(redisConnection({}, { REDIS_URL: 'redis://a:7000, redis://b:7000' })).toEqual({
      connection: { cluster: nodes },
    });
    expect(redisConnection({ redis: ['redis://a:7000'], 'redis-cluster': true }, {})).toEqual({
      connection: { cluster: ['redis://a:7000'] },
    });
    expect(redisConnection({}, { REDIS_URL: 'redis://a:7000', REDIS_CLUSTER: '1' })).toEqual({
      connection: { cluster: ['redis://a:7000'] },
    });
    // Flags win over the environment.
    expect(redisConnection({ redis: ['redis://c:6379'] }, { REDIS_URL: nodes.join(',') })).toEqual({
      connection: 'redis://c:6379',
    });
    expect(() => redisConnection({}, { REDIS_URL: 'redis://a:7000', REDIS_CLUSTER: 'maybe' })).toThrow(
      /REDIS_CLUSTER: expected 1 or 0/,
    );
    expect(() => redisConnection({}, {})).toThrow(/no Redis: pass --redis or set REDIS_URL/);
    // A comma inside one URL (a password holding one) is not a second node: nodes start with redis:// or rediss://.
    expect(redisConnection({}, { REDIS_URL: 'redis://:pa,ss@a:6379' })).toEqual({
      connection: 'redis://:pa,ss@a:6379',
    });
    expect(redisConnection({}, { REDIS_URL: 'redis://:p,w@a:7000,rediss://b:7000' })).toEqual({
      connection: { cluster: ['redis://:p,w@a:7000', 'rediss://b:7000'] },
    });
  });

  it('takes the password from REDIS_PASSWORD, and warns of one in a flag (ps shows flags), never repeating it', () => {
    expect(redisConnection({ redis: ['redis://a:6379'] }, { REDIS_PASSWORD: 's3cret' })).toEqual({
      connection: 'redis://:s3cret@a:6379',
    });
    expect(redisConnection({ redis: ['redis://a:7000', 'redis://b:7000'] }, { REDIS_PASSWORD: 's3cret' })).toEqual({
      connection: {
        cluster: ['redis://a:7000', 'redis://b:7000'],
        clusterOptions: { redisOptions: { password: 's3cret' } },
      },
    });
    const flagged = redisConnection({ redis: ['redis://:s3cret@a:6379'] }, {});
    expect(flagged.warning).toContain('a password in --redis shows in ps');
    expect(flagged.warning).not.toContain('s3cret');
    expect(redisConnection({}, { REDIS_URL: 'redis://:s3cret@a:6379' }).warning).toBeUndefined();
  });
});
