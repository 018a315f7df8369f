import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, startOutboxWorker } from '../../src/queue/index.js';
import { hashRelayPassword, startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { SmtpDialog } from './relay-harness.js';
import { capturingLogger } from '../helpers/logger.js';
import { runCli } from '../../src/cli/run-cli.js';
import { eventually } from '../helpers/async.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Store-and-forward (`queue`, `eml-api relay --redis`): the relay answers 250
 * once the outbox stored the message, so SMTP senders keep sending while the
 * service is down, and the outbox's workers deliver when it is back.
 */

let redis: RedisServer;
let emu: Emulator;
let relay: EmlApiRelay;
const FAST_RETRY = { attempts: 40, delay: 200, maxDelay: 1000, jitter: 0 };

beforeAll(async () => {
  [redis, emu] = await Promise.all([
    startRedisServer(),
    // Another account's key, valid for sending: it must not let a client send through this relay.
    startEmulator({ apiKeys: [{ key: 'k-another-account', scopes: ['sender'] }] }),
  ]);
  relay = await startEmlApiRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    queue: { connection: redis.url, retry: FAST_RETRY },
    users: [
      { username: 'billing', passwordHash: await hashRelayPassword('billing-secret-pw') },
      { username: 'cron', password: 'cron-secret-pw' },
    ],
    // Failed AUTHs are answered at once: the test refuses several.
    authFailureDelay: 0,
  });
});

afterAll(async () => {
  await relay?.close();
  await emu?.close();
  await redis?.stop();
});

const smtp = () => nodemailer.createTransport({ host: '127.0.0.1', port: relay.port, secure: false, ignoreTLS: true });

describe('the relay with the outbox', () => {
  it('answers 250 while the service is down, and the message is delivered once after it recovers', async () => {
    emu.setFaults({ unavailable: 1, retryAfterSeconds: 0 });
    const info = await smtp().sendMail({
      from: 'cron@host.example',
      to: 'ops@example.test',
      bcc: 'audit@example.test',
      subject: 'Nightly report',
      text: 'All jobs ran.',
    });
    expect(info.response).toMatch(/^250 2\.0\.0 Ok: \S+/);
    expect(emu.messages()).toHaveLength(0);
    const worker = await startOutboxWorker({
      connection: redis.url,
      apiKey: emu.apiKey,
      baseUrl: emu.url,
      cleanupInterval: 0,
    });
    try {
      await eventually(() => (emu.faultStats()?.unavailable ?? 0) >= 2, {
        what: 'the worker tried while the service was down',
      });
      expect(emu.messages()).toHaveLength(0);
      emu.setFaults(undefined);
      await eventually(() => emu.mailbox('ops@example.test').length === 1, { what: 'delivery after recovery' });
      await eventually(() => emu.mailbox('audit@example.test').length === 1, { what: 'delivery to the Bcc' });
      const [copy] = emu.mailbox('audit@example.test');
      expect(copy!.raw.toString()).not.toMatch(/^Bcc:/im);
      expect(emu.messages()).toHaveLength(1);
    } finally {
      await worker.close();
    }
  });

  it('stores a message its client sends again (same bytes) once', async () => {
    const queue = new EmlApiQueueTransport({ connection: redis.url });
    try {
      await queue.queue.obliterate({ force: true });
      const raw =
        'From: app@example.test\r\nTo: ann@example.test\r\nSubject: Twice\r\nMessage-ID: <twice@example.test>\r\n\r\nHi\r\n';
      const envelope = { from: 'app@example.test', to: ['ann@example.test'] };
      const first = await smtp().sendMail({ envelope, raw });
      const again = await smtp().sendMail({ envelope, raw });
      expect(first.response).toBe(again.response);
      expect(await queue.queue.count()).toBe(1);
    } finally {
      await queue.close();
    }
  });

  it("AUTH: only the relay's users and its own key, never another API key the service accepts; the service is not asked", async () => {
    const plain = (user: string, password: string) => Buffer.from(`\0${user}\0${password}`).toString('base64');
    emu.setFaults({});
    const tries: [string, string, number][] = [
      ['app', 'k-another-account', 535],
      ['billing', 'billing-secret-pw', 235],
      ['billing', 'cron-secret-pw', 535],
      ['cron', 'cron-secret-pw', 235],
      ['anyone', emu.apiKey, 235],
    ];
    for (const [user, password, code] of tries) {
      const { dialog } = await SmtpDialog.open(relay.port);
      await dialog.command('EHLO client.example');
      const reply = await dialog.command(`AUTH PLAIN ${plain(user, password)}`);
      expect([user, reply.code]).toEqual([user, code]);
      if (code === 535) {
        expect(reply.text).toMatch(/^5\.7\.8 Authentication credentials invalid/);
      } else {
        expect((await dialog.command('MAIL FROM:<app@example.test>')).code).toBe(250);
      }
      dialog.close();
    }
    const asked = emu.faultStats()!.none;
    emu.setFaults(undefined);
    expect(asked).toBe(0);
    // Loopback may send without AUTH (allowUnauthenticatedFrom), so the relay's users matter from other hosts;
    // Nodemailer's SMTP transport with a user's login stores the message.
    const transporter = nodemailer.createTransport({
      host: '127.0.0.1',
      port: relay.port,
      ignoreTLS: true,
      auth: { user: 'billing', pass: 'billing-secret-pw' },
    });
    const info = await transporter.sendMail({ from: 'billing@example.test', to: 'ann@example.test', text: 'x' });
    transporter.close();
    expect(info.response).toMatch(/^250 2\.0\.0 Ok: \S+/);
  });

  it.each([
    ['no From', 'To: ann@example.test', /^5\.6\.0 .*no From header/],
    ['a From of a name alone', 'From: Shop\r\nTo: ann@example.test', /^5\.6\.0 .*From header has no address/],
    ['a From of <>', 'From: <>\r\nTo: ann@example.test', /^5\.6\.0 .*From header has no address/],
    ['a From of an empty group', 'From: shop:;\r\nTo: ann@example.test', /^5\.6\.0 .*From header has no address/],
    ['a From of a comment', 'From: Shop (shop@example.test)\r\nTo: ann@example.test', /^5\.6\.0 .*From header has no/],
    [
      'a From of an encoded name',
      'From: =?utf-8?B?U2hvcA==?=\r\nTo: ann@example.test',
      /^5\.6\.0 .*From header has no/,
    ],
    [
      'a From of a Base64 word holding a bare address',
      'From: =?utf-8?B?c2hvcEBleGFtcGxlLnRlc3Q=?=\r\nTo: ann@example.test',
      /^5\.6\.0 .*From header has no/,
    ],
    [
      'two From fields, the last empty',
      'From: shop@example.test\r\nFrom:\r\nTo: ann@example.test',
      /^5\.6\.0 .*From header has no/,
    ],
    [
      'a From with a bidi control',
      'From: \u202eshop@example.test\r\nTo: ann@example.test',
      /^5\.6\.0 .*From header holds/,
    ],
    [
      'a Reply-To with a zero-width space',
      'From: shop@example.test\r\nReply-To: a\u200b@example.test\r\nTo: ann@example.test',
      /^5\.6\.0 .*Reply-To header holds/,
    ],
  ])('%s: 554 at DATA, as the direct relay answers it; nothing is stored', async (_label, head, reply) => {
    const queue = new EmlApiQueueTransport({ connection: redis.url });
    try {
      await queue.queue.obliterate({ force: true });
      const { dialog } = await SmtpDialog.open(relay.port);
      await dialog.command('EHLO client.example');
      expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
      expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
      const answer = await dialog.data(Buffer.from(`${head}\r\nSubject: s\r\n\r\nhi\r\n`));
      dialog.close();
      expect([answer.code, answer.text]).toEqual([554, expect.stringMatching(reply)]);
      expect(await queue.queue.count()).toBe(0);
    } finally {
      await queue.close();
    }
  });

  it('a Redis that refuses or is gone: 451 4.3.0, try again later, quoting nothing of Redis; the log says what', async () => {
    const own = await startRedisServer();
    const logger = capturingLogger();
    const storing = await startEmlApiRelay({
      baseUrl: emu.url,
      apiKey: emu.apiKey,
      port: 0,
      logger,
      queue: { connection: own.url, timeouts: { store: 1000 } },
    });
    const port = new URL(own.url).port;
    const attempt = async (subject: string) => {
      const { dialog } = await SmtpDialog.open(storing.port);
      await dialog.command('EHLO client.example');
      await dialog.command('MAIL FROM:<cron@host.example>');
      await dialog.command('RCPT TO:<ops@example.test>');
      const reply = await dialog.data(
        `From: cron@host.example\r\nTo: ops@example.test\r\nSubject: ${subject}\r\n\r\nx\r\n`,
      );
      dialog.close();
      return `${reply.code} ${reply.text}`;
    };
    try {
      await own.client.config('SET', 'maxmemory', '1');
      expect(await attempt('redis full')).toBe('451 4.3.0 The relay could not store the message, try again later');
      await own.stop();
      expect(await attempt('redis gone')).toBe('451 4.3.0 The relay could not store the message, try again later');
      const logged = logger.at('error').filter((l) => l.message === 'Message refused');
      expect(logged.map((l) => l.meta.err)).toEqual([expect.stringMatching(/OOM/), expect.stringContaining(port)]);
    } finally {
      await storing.close();
      await own.stop();
    }
  });

  it('an xn-- domain that decodes to a zero-width space: 553 at RCPT TO, 554 at DATA in a header; nothing is stored', async () => {
    const queue = new EmlApiQueueTransport({ connection: redis.url });
    try {
      await queue.queue.obliterate({ force: true });
      // "a\u200bb": mailparser decodes it before the service checks the address, which it then refuses.
      const hidden = 'ann@xn--ab-g1t.test';
      const { dialog } = await SmtpDialog.open(relay.port);
      await dialog.command('EHLO client.example');
      expect((await dialog.command('MAIL FROM:<shop@example.test>')).code).toBe(250);
      expect((await dialog.command(`RCPT TO:<${hidden}>`)).code).toBe(553);
      expect((await dialog.command('RCPT TO:<ann@example.test>')).code).toBe(250);
      const answer = await dialog.data(
        `From: shop@example.test\r\nTo: ann@example.test, ${hidden}\r\nSubject: s\r\n\r\nhi\r\n`,
      );
      dialog.close();
      expect([answer.code, answer.text]).toEqual([
        554,
        expect.stringMatching(/^5\.6\.0 .*reads as "ann@a\u200bb\.test", which it refuses/),
      ]);
      expect(await queue.queue.count()).toBe(0);
    } finally {
      await queue.close();
    }
  });

  it("needs the relay's own key: the workers send later with theirs", async () => {
    const err = await startEmlApiRelay({ baseUrl: emu.url, port: 0, queue: { connection: redis.url } }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'ECONFIG' });
    expect((err as Error).message).toContain("needs the relay's own apiKey");
  });
});

describe('eml-api relay: store-and-forward is chosen with a flag, the Redis URL best given in REDIS_URL', () => {
  /** Runs `eml-api relay` in this process until stopped; its output, and the port it listens on. */
  async function relayCli(args: string[], env: Record<string, string>) {
    let out = '';
    const stop = new AbortController();
    const exit = runCli(['relay', '--port', '0', '--url', emu.url, ...args], {
      stdout: { write: (text: string) => (out += text) },
      stderr: { write: (text: string) => (out += text) },
      env: { EML_API_KEY: emu.apiKey, ...env },
      signal: stop.signal,
    });
    await eventually(() => /listening on/.test(out) || /eml-api:/.test(out), { timeout: 10_000 });
    const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(out)?.[1]);
    return { port, output: () => out, stop: async () => (stop.abort(), exit) };
  }
  const sendTo = (port: number, subject: string) =>
    nodemailer
      .createTransport({ host: '127.0.0.1', port, ignoreTLS: true })
      .sendMail({ from: 'cron@host.example', to: 'ops@example.test', subject, text: 'x' });

  it('--outbox stores in the Redis of REDIS_URL, and says so (the URL never on the command line)', async () => {
    const queue = new EmlApiQueueTransport({ connection: redis.url });
    try {
      await queue.queue.obliterate({ force: true });
      const run = await relayCli(['--outbox'], { REDIS_URL: redis.url });
      const info = await sendTo(run.port, 'stored via REDIS_URL');
      expect(info.response).toMatch(/^250 2\.0\.0 Ok: \S+/);
      expect(await queue.queue.count()).toBe(1);
      expect(emu.messages().some((m) => m.subject === 'stored via REDIS_URL')).toBe(false);
      expect(await run.stop()).toBe(0);
      expect(run.output()).toContain(`Mode: store-and-forward, each message is stored in the outbox at ${redis.url}`);
    } finally {
      await queue.close();
    }
  });

  it('REDIS_URL alone does not switch the relay to store-and-forward: it runs direct, and says so', async () => {
    const run = await relayCli([], { REDIS_URL: redis.url });
    const info = await sendTo(run.port, 'direct despite REDIS_URL');
    expect(info.response).toMatch(/^250 2\.0\.0 Ok: msg_/);
    expect(emu.messages().some((m) => m.subject === 'direct despite REDIS_URL')).toBe(true);
    expect(await run.stop()).toBe(0);
    expect(run.output()).toContain('Mode: direct, each message is uploaded to the service before its 250');
    expect(run.output()).toContain('REDIS_URL is set, but the relay runs direct');
  });

  it('--redis with a password warns that ps shows it, and no output repeats it', async () => {
    const withPassword = redis.url.replace('redis://', 'redis://:s3cret-redis-pw@');
    const run = await relayCli(['--redis', withPassword], {});
    expect(await run.stop()).toBe(0);
    expect(run.output()).toContain('warning: a password in --redis shows in ps to every user of this machine');
    expect(run.output()).toContain(`Mode: store-and-forward, each message is stored in the outbox at ${redis.url}`);
    expect(run.output().replace('redis://:s3cret', '')).not.toContain('s3cret-redis-pw');
  });

  it('--durability aof: refuses to start on a Redis without its append-only file (exit 1), starts on one with it', async () => {
    let err = '';
    const code = await runCli(['relay', '--port', '0', '--url', emu.url, '--outbox', '--durability', 'aof'], {
      stdout: { write: () => true },
      stderr: { write: (text: string) => (err += text) },
      env: { EML_API_KEY: emu.apiKey, REDIS_URL: redis.url },
    });
    expect(code).toBe(1);
    expect(err).toMatch(/appendonly no.*durability: 'aof'/);
    const durable = await startRedisServer({ appendonly: true });
    try {
      const run = await relayCli(['--outbox', '--durability', 'aof'], { REDIS_URL: durable.url });
      expect((await sendTo(run.port, 'stored durably')).response).toMatch(/^250 2\.0\.0 Ok: \S+/);
      expect(await run.stop()).toBe(0);
    } finally {
      await durable.stop();
    }
  });

  it.each([
    [
      ['--outbox', '--durability', 'always'],
      { REDIS_URL: 'redis://127.0.0.1:1' },
      /--durability: expected warn, aof, aof-always, got "always"/,
    ],
    [['--durability', 'aof'], {}, /--durability goes with the outbox/],
    [['--outbox'], {}, /--outbox needs a Redis: set REDIS_URL/],
    [
      ['--queue', 'mail'],
      { REDIS_URL: 'redis://127.0.0.1:1' },
      /--queue goes with the outbox: pass --outbox \(with REDIS_URL\) or --redis/,
    ],
  ])('%j (env %j) is a usage error', async (args, env, message) => {
    let err = '';
    const code = await runCli(['relay', '--port', '0', '--url', emu.url, ...args], {
      stdout: { write: () => true },
      stderr: { write: (text: string) => (err += text) },
      env: { EML_API_KEY: emu.apiKey, ...env },
    });
    expect(code).toBe(2);
    expect(err).toMatch(message);
  });
});
