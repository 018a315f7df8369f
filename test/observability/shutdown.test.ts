import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { promtoolMissing, promtoolProblems, sample } from '../helpers/telemetry.js';
import { nodeArgs } from '../helpers/compiled.js';

/**
 * `eml-api relay` and `eml-api worker` as real child processes, stopped with
 * SIGTERM in the middle of traffic: nothing lost, nothing delivered twice, the
 * exit code saying whether the grace period was enough; `/metrics` scraped
 * during the traffic counts what was sent; `--log-format json` prints only JSON.
 * Messages stay under the relay's 512 KiB spool threshold (see the report on the
 * spool's signal handler).
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SMTP_SEND = fileURLToPath(new URL('./fixtures/smtp-send.py', import.meta.url));
const python = spawnSync('python3', ['--version']).status === 0;
const onCi = Boolean(process.env.CI) && process.env.CI !== 'false';
if (!python && onCi) throw new Error('The relay shutdown tests send with python3 smtplib: install python3');

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true }), startEmulator()]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
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

/** A CLI command in a child process, as a service manager runs it. */
interface Command {
  readonly child: ChildProcess;
  output(): string;
  /** The health and metrics port, once it printed it. */
  httpUrl(): Promise<string>;
  /** The SMTP port of a relay, once it printed it. */
  smtpPort(): Promise<number>;
  exited: Promise<number | null>;
}

function run(args: string[]): Command {
  const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', ...args]), {
    cwd: ROOT,
    env: { ...process.env, REDIS_URL: redis.url, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const printed = async (pattern: RegExp) => {
    await eventually(() => pattern.test(output) || child.exitCode !== null, { what: `${pattern} in the output` });
    const match = pattern.exec(output);
    if (!match) throw new Error(`exited without printing ${pattern}:\n${output}`);
    return match[1]!;
  };
  return {
    child,
    output: () => output,
    httpUrl: async () => printed(/Health and metrics on (http:\/\/[0-9.:]+)/),
    smtpPort: async () => Number(await printed(/listening on 127\.0\.0\.1:(\d+)/)),
    exited,
  };
}

const metrics = async (url: string) => (await fetch(`${url}/metrics`)).text();

/** Sends messages with Python's smtplib, all at once; resolves with each id's final reply code. */
function smtpSend(port: number, ids: string[]): Promise<Map<string, number>> {
  return new Promise((resolve, reject) => {
    const child = spawn('python3', [SMTP_SEND, String(port), ...ids], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('exit', () =>
      resolve(
        new Map(
          out
            .trim()
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as { id: string; code: number })
            .map((r) => [r.id, r.code]),
        ),
      ),
    );
  });
}

/** How many times each subject reached the service. */
function deliveries(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const m of emu.messages()) counts.set(m.subject ?? '', (counts.get(m.subject ?? '') ?? 0) + 1);
  return counts;
}

describe.skipIf(!python)('eml-api relay, stopped with SIGTERM mid-traffic', () => {
  it('counts what it relayed on /metrics, finishes the messages in flight within --grace, exits 0; nothing lost or twice', async () => {
    const relay = run(['relay', '--port', '0', '--http-port', '0', '--grace', '30', '--log-format', 'json']);
    const [port, url] = await Promise.all([relay.smtpPort(), relay.httpUrl()]);
    // Traffic, then a scrape: the counts are what was sent.
    const first = await smtpSend(port, ['a1', 'a2', 'a3', 'a4', 'a5']);
    expect([...first.values()]).toEqual([250, 250, 250, 250, 250]);
    const text = await metrics(url);
    expect(sample(text, 'eml_api_relay_messages_total', { outcome: 'accepted', code: '250' })).toBe(5);
    expect(sample(text, 'eml_api_upload_bytes_count', { component: 'relay' })).toBe(5);
    expect(emu.messages()).toHaveLength(5);
    if (!promtoolMissing) expect(promtoolProblems(text)).toBe('');

    // Six more, slow to upload; SIGTERM once they are in flight.
    emu.setFaults({ latencyMs: 800 });
    const ids = ['b1', 'b2', 'b3', 'b4', 'b5', 'b6'];
    const sending = smtpSend(port, ids);
    await eventually(() => (emu.faultStats()?.none ?? 0) >= 6, { what: 'six uploads in flight' });
    relay.child.kill('SIGTERM');
    // Not ready while it finishes; a new client is refused.
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 503, { what: 'readyz 503' });
    const second = await sending;
    expect(await relay.exited).toBe(0);
    expect([...second.values()]).toEqual([250, 250, 250, 250, 250, 250]);
    expect(deliveries()).toEqual(new Map([...first.keys(), ...ids].map((id) => [id, 1])));

    const lines = relay.output().trim().split('\n');
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
    const accepted = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'Message accepted');
    expect(accepted).toHaveLength(11);
    expect(accepted[0]).toMatchObject({
      level: 'info',
      reply_code: 250,
      message_id: expect.stringMatching(/@smtp-send/),
      id: expect.any(String),
    });
    expect(relay.output()).not.toContain(emu.apiKey);
  }, 60_000);

  it('gives up what is still in flight when --grace runs out (exit 4); the senders retry elsewhere, and each message is delivered once', async () => {
    const relay = run(['relay', '--port', '0', '--grace', '1']);
    const port = await relay.smtpPort();
    emu.setFaults({ latencyMs: 5000 });
    const ids = ['c1', 'c2', 'c3'];
    const sending = smtpSend(port, ids);
    await eventually(() => (emu.faultStats()?.none ?? 0) >= 3, { what: 'three uploads in flight' });
    relay.child.kill('SIGTERM');
    const codes = await sending;
    expect(await relay.exited).toBe(4);
    expect(relay.output()).toMatch(/grace period ran out, 3 message\(s\) in flight given up/);
    expect([...codes.values()].every((code) => code >= 400 && code < 500)).toBe(true);
    // The senders' queues try again, through another relay: the service answers each retry from its
    // first upload (the same Idempotency-Key), or takes it now; either way once.
    emu.setFaults(undefined);
    const again = run(['relay', '--port', '0']);
    const retried = await smtpSend(await again.smtpPort(), ids);
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);
    expect([...retried.values()]).toEqual([250, 250, 250]);
    await eventually(() => emu.messages().length >= 3);
    expect(deliveries()).toEqual(new Map(ids.map((id) => [id, 1])));
  }, 60_000);
});

describe('eml-api worker, stopped with SIGTERM mid-traffic', () => {
  const queue = async (n: number, prefix: string) => {
    const transporter = nodemailer.createTransport(transport);
    for (let i = 1; i <= n; i++) {
      await transporter.sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        subject: `${prefix}${i}`,
        text: 'x',
      });
    }
  };

  it('finishes its sends in flight within --grace and exits 0; /metrics counted them as they went; nothing lost or twice', async () => {
    await queue(12, 'w');
    emu.setFaults({ latencyMs: 300 });
    const worker = run(['worker', '--concurrency', '3', '--http-port', '0', '--grace', '30', '--log-format', 'json']);
    const url = await worker.httpUrl();
    // A scrape during the traffic: never more sends counted than the service received, and it catches up.
    await eventually(() => emu.messages().length >= 4, { what: 'four sent' });
    const during = sample(await metrics(url), 'eml_api_sends_total', { component: 'worker', outcome: 'sent' });
    expect(during).toBeLessThanOrEqual(emu.messages().length);
    expect(during).toBeGreaterThanOrEqual(3);
    await eventually(async () => (await transport.queue.getJobCounts('active')).active! > 0, {
      what: 'sends in flight',
    });
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(0);
    const lines = worker
      .output()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const sent = lines.filter((l) => l.msg === 'Queued message sent');
    expect(sent.length).toBe(emu.messages().length);
    expect(sent[0]).toMatchObject({
      level: 'info',
      status: 202,
      queue_id: expect.any(String),
      message_id: expect.stringMatching(/^<.+>$/),
    });
    expect(await transport.queue.getJobCounts('active', 'failed')).toEqual({ active: 0, failed: 0 });
    expect(worker.output()).not.toContain(emu.apiKey);

    // Another worker sends the rest: each message once.
    emu.setFaults(undefined);
    const rest = run(['worker']);
    await eventually(() => emu.messages().length === 12, { what: 'all twelve sent' });
    rest.child.kill('SIGTERM');
    expect(await rest.exited).toBe(0);
    expect(deliveries()).toEqual(new Map(Array.from({ length: 12 }, (_, i) => [`w${i + 1}`, 1])));
  }, 60_000);

  it('hands its sends back to the queue when --grace runs out (exit 4); another worker delivers each once', async () => {
    const worker = run(['worker', '--concurrency', '4', '--grace', '1']);
    // Slow sends only once it runs: its check of the key at start would wait as long.
    await eventually(() => worker.output().includes('Worker sending from queue'), { what: 'the worker running' });
    emu.setFaults({ latencyMs: 4000 });
    await queue(4, 'h');
    await eventually(async () => (await transport.queue.getJobCounts('active')).active === 4, {
      what: 'four in flight',
    });
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(4);
    expect(worker.output()).toMatch(/Worker stopped: 0 sent, 0 failed, 4 handed back to the queue/);
    expect(await transport.queue.getJobCounts('active', 'failed')).toEqual({ active: 0, failed: 0 });
    emu.setFaults(undefined);
    const rest = run(['worker']);
    await eventually(async () => (await transport.queue.getJobCounts('completed')).completed === 4, {
      what: 'all four sent',
    });
    rest.child.kill('SIGTERM');
    expect(await rest.exited).toBe(0);
    // A send aborted while the service held it may have been delivered then: the resend, under the same
    // Idempotency-Key, is answered from it. Once each, either way.
    expect(deliveries()).toEqual(new Map(['h1', 'h2', 'h3', 'h4'].map((id) => [id, 1])));
  }, 60_000);
});
