/**
 * SIGTERM stops a relay process gracefully while messages spooled to files
 * (past 512 KiB) are in flight: the one that arrived in full is handed on and
 * gets its 250; the one still arriving finishes within the CLI's --grace
 * (250), or, with `relay.close()` from code, gets 421; the process exits 0 and
 * leaves no spool folder. Real child processes, real signals: the CLI
 * (`eml-api relay`), and a relay started from code as docs/relay.md shows
 * (`process.once('SIGTERM', () => relay.close())`). The spool's own signal
 * listener once took such a signal for one nobody handled, removed the files
 * and killed the process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/async.js';
import { DEFAULT_REPLY, startFakeService, type FakeService } from '../helpers/fake-service.js';
import { startRedisHoldProxy, type RedisHoldProxy } from '../helpers/redis-hold-proxy.js';
import { redisServerMissing, startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { EmlApiQueueTransport } from '../../src/queue/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { capturingLogger } from '../helpers/logger.js';
import { SmtpDialog } from './relay-harness.js';
import { nodeArgs } from '../helpers/compiled.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const FIXTURE = fileURLToPath(new URL('./fixtures/relay-until-sigterm.ts', import.meta.url));
const KEY = 'relay-key-0000000000000000';

let service: FakeService;
let dir: string;
const children: ChildProcess[] = [];
const opened: SmtpDialog[] = [];

beforeEach(async () => {
  service = await startFakeService();
  // The relay's key check at start is answered (a 400 to an empty body: the key may send); every upload is then held.
  service.script([{ status: 400, body: { error: { code: 'invalid_eml', message: 'empty' } } }], 'hold');
  dir = mkdtempSync(join(tmpdir(), 'relay-signals-'));
});
afterEach(async () => {
  for (const dialog of opened.splice(0)) dialog.close();
  for (const child of children.splice(0))
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await service.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a relay process; resolves with its port once it listens, and its exit (code, signal). */
async function startProcess(args: string[], env: Record<string, string>, listening: RegExp) {
  const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', ...args]), {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  await eventually(() => listening.test(out), { timeout: 20_000 });
  return { child, port: Number(listening.exec(out)![1]), exit, output: () => out };
}

/** A message of about 700 KB: past the 512 KiB spool threshold, so it is spooled to a file. */
const big = (subject: string) =>
  `From: cron@example.test\r\nTo: ops@example.test\r\nSubject: ${subject}\r\nMessage-ID: <${subject}@example.test>\r\n\r\n` +
  `${'x'.repeat(998)}\r\n`.repeat(700);

/** A session whose transaction has its sender and recipient, before DATA. */
async function openTransaction(port: number): Promise<SmtpDialog> {
  const { dialog } = await SmtpDialog.open(port);
  opened.push(dialog);
  await dialog.command('EHLO client.example');
  expect((await dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(250);
  expect((await dialog.command('RCPT TO:<ops@example.test>')).code).toBe(250);
  return dialog;
}

async function openData(port: number): Promise<SmtpDialog> {
  const dialog = await openTransaction(port);
  expect((await dialog.command('DATA')).code).toBe(354);
  return dialog;
}

const SMALL = 'From: cron@example.test\r\nTo: ops@example.test\r\nSubject: s\r\n\r\nbody\r\n';

const spoolFolders = (folder: string) => readdirSync(folder).filter((name) => name.startsWith('eml-api-'));

/**
 * One message in full, its upload held by the service; one still arriving
 * (600 KB of it sent, spooled to a file too); then SIGTERM.
 */
async function sigtermWithMessagesInFlight(
  relay: Awaited<ReturnType<typeof startProcess>>,
  spoolDir: string,
  { finishArriving = false }: { finishArriving?: boolean } = {},
) {
  const arriving = await openData(relay.port);
  arriving.write(big('arriving').slice(0, 600_000));
  const complete = await openData(relay.port);
  complete.write(`${big('complete')}.\r\n`);
  const completeReply = complete.reply();
  // Both are in spool files, and the complete one is being uploaded.
  await eventually(() => service.held === 1 && spoolFolders(spoolDir).length === 2, { timeout: 20_000 });
  relay.child.kill('SIGTERM');
  // The relay stops, and waits for the upload in flight: the service answers it then.
  await eventually(() => /Stopping/.test(relay.output()), { timeout: 20_000 });
  if (finishArriving) {
    // eml-api relay gives the messages in flight its --grace period, those still arriving too: the rest
    // of this one arrives after the signal, and is handed on (its upload held like the other's).
    arriving.write(`${big('arriving').slice(600_000)}.\r\n`);
    await eventually(() => service.held === 2, { timeout: 20_000 });
  }
  service.releaseAll();
  return { completeReply: await completeReply, arrivingReply: await arriving.reply(), exit: await relay.exit };
}

describe('SIGTERM with spooled messages in flight', () => {
  it('eml-api relay: both messages, the one still arriving too, finish within --grace (250), exit 0, no spool folder left', async () => {
    const relay = await startProcess(
      ['src/cli/main.ts', 'relay', '--port', '0', '--url', service.url],
      // The spool goes to os.tmpdir(), which TMPDIR sets.
      { EML_API_KEY: KEY, TMPDIR: dir },
      /listening on 127\.0\.0\.1:(\d+)/,
    );
    const { completeReply, arrivingReply, exit } = await sigtermWithMessagesInFlight(relay, dir, {
      finishArriving: true,
    });
    expect(arrivingReply.code, relay.output()).toBe(250);
    expect(completeReply.code, relay.output()).toBe(250);
    expect(completeReply.text).toBe('2.0.0 Ok: held');
    expect(exit, relay.output()).toEqual({ code: 0, signal: null });
    expect(relay.output()).toContain('SMTP relay stopped');
    expect(spoolFolders(dir)).toEqual([]);
  });

  it('eml-api relay: a second SIGTERM stops at once: the message being handed on gets 451, the one arriving 421, exit 4, no spool folder left', async () => {
    const relay = await startProcess(
      ['src/cli/main.ts', 'relay', '--port', '0', '--url', service.url, '--grace', '60'],
      { EML_API_KEY: KEY, TMPDIR: dir },
      /listening on 127\.0\.0\.1:(\d+)/,
    );
    const arriving = await openData(relay.port);
    arriving.write(big('arriving').slice(0, 600_000));
    const complete = await openData(relay.port);
    complete.write(`${big('complete')}.\r\n`);
    await eventually(() => service.held === 1 && spoolFolders(dir).length === 2, { timeout: 20_000 });
    relay.child.kill('SIGTERM');
    await eventually(() => /Stopping/.test(relay.output()), { timeout: 20_000 });
    expect(relay.output()).toContain('signal again to stop at once');
    relay.child.kill('SIGTERM');
    // The service never answers: the second signal alone ends the wait.
    const [completeReply, arrivingReply, exit] = await Promise.all([complete.reply(), arriving.reply(), relay.exit]);
    expect(completeReply.code, relay.output()).toBe(451);
    expect(arrivingReply.code, relay.output()).toBe(421);
    // The log gives each message the reply its client got.
    const logged = relay
      .output()
      .split('\n')
      .filter((line) => line.includes('Message refused'))
      .map((line) => /reply="([^"]*)"/.exec(line)?.[1]);
    expect(logged.sort(), relay.output()).toEqual([`421 ${arrivingReply.text}`, `451 ${completeReply.text}`].sort());
    expect(exit, relay.output()).toEqual({ code: 4, signal: null });
    expect(relay.output()).toMatch(/SMTP relay stopped at once: 2 message\(s\) in flight given up/);
    expect(relay.output()).not.toContain('grace period ran out');
    expect(spoolFolders(dir)).toEqual([]);
  });

  it('eml-api relay: a second SIGTERM once it has stopped, nothing in flight, does not kill it: exit 0', async () => {
    const relay = await startProcess(
      ['src/cli/main.ts', 'relay', '--port', '0', '--url', service.url],
      { EML_API_KEY: KEY, TMPDIR: dir },
      /listening on 127\.0\.0\.1:(\d+)/,
    );
    relay.child.kill('SIGTERM');
    await eventually(() => /SMTP relay stopped/.test(relay.output()) || relay.child.exitCode !== null, {
      timeout: 20_000,
    });
    relay.child.kill('SIGTERM');
    expect(await relay.exit, relay.output()).toEqual({ code: 0, signal: null });
  });

  it("a relay started from code with process.once('SIGTERM', () => relay.close()): the same", async () => {
    const relay = await startProcess([FIXTURE, service.url, KEY, dir], {}, /listening (\d+)/);
    const { completeReply, arrivingReply, exit } = await sigtermWithMessagesInFlight(relay, dir);
    expect(arrivingReply.code, relay.output()).toBe(421);
    expect(completeReply.code, relay.output()).toBe(250);
    expect(exit, relay.output()).toEqual({ code: 0, signal: null });
    expect(relay.output()).toContain('closed');
    expect(spoolFolders(dir)).toEqual([]);
  });
});

describe('close() from code', () => {
  const relays: EmlApiRelay[] = [];
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.close({ abort: true })));
  });
  async function relayFromCode() {
    const relay = await startEmlApiRelay({ baseUrl: service.url, apiKey: KEY, port: 0, retry: false, logger: false });
    relays.push(relay);
    return relay;
  }

  it('refused for a grace that is no whole number of ms, it does nothing, abort included: the relay takes mail as before', async () => {
    const relay = await relayFromCode();
    service.answer(DEFAULT_REPLY);
    await expect(relay.close({ abort: true, grace: 2.5 })).rejects.toMatchObject({ code: 'ECONFIG' });
    const dialog = await openData(relay.port);
    dialog.write(`${SMALL}.\r\n`);
    expect((await dialog.reply()).code).toBe(250);
    expect(await relay.close()).toEqual({ givenUp: 0 });
  });

  it('without grace: counts the messages it gives up, one still arriving and one whose DATA comes after (421); the one being uploaded gets its 250', async () => {
    const relay = await relayFromCode();
    const uploading = await openData(relay.port);
    uploading.write(`${SMALL}.\r\n`);
    const uploaded = uploading.reply();
    await eventually(() => service.held === 1, { what: 'the upload held' });
    const arriving = await openData(relay.port);
    arriving.write(SMALL);
    const late = await openTransaction(relay.port);
    const closed = relay.close();
    expect((await arriving.reply()).code).toBe(421);
    expect((await late.command('DATA')).code).toBe(354);
    expect((await late.reply()).code).toBe(421);
    service.releaseAll();
    expect((await uploaded).code).toBe(250);
    expect(await closed).toEqual({ givenUp: 2 });
  });

  it('{ abort: true } without grace: counts what it gives up, the upload (451) and the message arriving (421)', async () => {
    const relay = await relayFromCode();
    const uploading = await openData(relay.port);
    uploading.write(`${SMALL}.\r\n`);
    await eventually(() => service.held === 1, { what: 'the upload held' });
    const arriving = await openData(relay.port);
    arriving.write(SMALL);
    const closed = relay.close({ abort: true });
    expect((await uploading.reply()).code).toBe(451);
    expect((await arriving.reply()).code).toBe(421);
    expect(await closed).toEqual({ givenUp: 2 });
  });
});

describe('--outbox: a message whose Redis write has started when the relay gives up', () => {
  let redis: RedisServer | undefined;
  let proxy: RedisHoldProxy | undefined;
  let outbox: EmlApiQueueTransport | undefined;
  afterEach(async () => {
    proxy?.release();
    await outbox?.close();
    await proxy?.close();
    await redis?.stop();
    [redis, proxy, outbox] = [undefined, undefined, undefined];
  });

  /**
   * A relay storing in Redis through a proxy that holds the job's add (a Lua script naming the
   * content); one message sent in full, its write under way; then `stop` (signals), waiting for
   * the relay to say `givesUp`; then the write lands. The write is never cut short: it ends, and
   * the client gets its 250.
   */
  async function writeLandsAfterGivingUp(
    grace: string,
    stop: (relay: Awaited<ReturnType<typeof startProcess>>) => Promise<void>,
    givesUp: RegExp,
  ) {
    redis = await startRedisServer();
    proxy = await startRedisHoldProxy(redis.port);
    outbox = new EmlApiQueueTransport({ connection: redis.url });
    const relay = await startProcess(
      ['src/cli/main.ts', 'relay', '--port', '0', '--url', service.url, '--outbox', '--grace', grace],
      { EML_API_KEY: KEY, REDIS_URL: proxy.url, TMPDIR: dir },
      /listening on 127\.0\.0\.1:(\d+)/,
    );
    proxy.holdNext(/"contentKey"/);
    const dialog = await openData(relay.port);
    dialog.write('From: cron@example.test\r\nTo: ops@example.test\r\nSubject: s\r\n\r\nbody\r\n.\r\n');
    const reply = dialog.reply();
    await eventually(() => proxy!.held > 0, { what: 'the job add held' });
    await stop(relay);
    await eventually(() => givesUp.test(relay.output()), { timeout: 20_000, what: relay.output });
    proxy.release();
    return { reply: await reply, exit: await relay.exit, output: relay.output() };
  }

  it.skipIf(redisServerMissing)(
    'on a second signal: the client gets its 250 and it is not counted as given up (exit 0)',
    async () => {
      const { reply, exit, output } = await writeLandsAfterGivingUp(
        '60',
        async (relay) => {
          relay.child.kill('SIGTERM');
          await eventually(() => /Stopping:/.test(relay.output()), { timeout: 20_000 });
          relay.child.kill('SIGTERM');
        },
        /WARN Stopping at once: giving up the messages in flight/,
      );
      expect(reply.code, output).toBe(250);
      const counts = await outbox!.queue.getJobCounts('waiting', 'prioritized');
      expect((counts.waiting ?? 0) + (counts.prioritized ?? 0)).toBe(1);
      expect(output).toMatch(/\nSMTP relay stopped\n$/);
      expect(exit, output).toEqual({ code: 0, signal: null });
    },
  );

  /** A relay storing in a real Redis behind the hold proxy, whose next job add is held. */
  async function outboxRelayHoldingItsAdd(timeouts?: { store: number }) {
    redis = await startRedisServer();
    proxy = await startRedisHoldProxy(redis.port);
    const logger = capturingLogger();
    const relay = await startEmlApiRelay({
      baseUrl: service.url,
      apiKey: KEY,
      port: 0,
      queue: { connection: proxy.url, ...(timeouts ? { timeouts } : {}) },
      logger,
    });
    proxy.holdNext(/"contentKey"/);
    return { relay, logger, proxy };
  }

  it.skipIf(redisServerMissing)(
    'a write that then fails (its store timeout, not the stop) gets 451 and is counted as given up',
    async () => {
      const { relay, logger } = await outboxRelayHoldingItsAdd({ store: 1000 });
      const dialog = await openData(relay.port);
      dialog.write('From: cron@example.test\r\nTo: ops@example.test\r\nSubject: s\r\n\r\nbody\r\n.\r\n');
      const reply = dialog.reply();
      await eventually(() => proxy!.held > 0, { what: 'the job add held' });
      const closed = relay.close({ grace: 60_000 });
      void relay.close({ abort: true });
      expect((await reply).code).toBe(451);
      expect(await closed).toEqual({ givenUp: 1 });
      const refused = logger.lines.find((line) => line.message === 'Message refused');
      expect(refused?.meta.err).toMatch(/ETIMEDOUT/);
    },
  );

  it.skipIf(redisServerMissing)(
    'a message whose DATA comes after the relay gave up gets 421 and is counted as given up',
    async () => {
      const { relay, logger, proxy: held } = await outboxRelayHoldingItsAdd();
      const stored = await openData(relay.port);
      stored.write(`${SMALL}.\r\n`);
      const storedReply = stored.reply();
      await eventually(() => proxy!.held > 0, { what: 'the job add held' });
      const late = await openTransaction(relay.port);
      const closed = relay.close({ grace: 60_000 });
      void relay.close({ abort: true });
      await eventually(() => logger.lines.some((line) => line.message.startsWith('Stopping at once')));
      expect((await late.command('DATA')).code).toBe(354);
      expect((await late.reply()).code).toBe(421);
      held.release();
      expect((await storedReply).code).toBe(250);
      expect(await closed).toEqual({ givenUp: 1 });
    },
  );

  it.skipIf(redisServerMissing)('when --grace runs out: the same (the client gets its 250, exit 0)', async () => {
    const { reply, exit, output } = await writeLandsAfterGivingUp(
      '1',
      async (relay) => void relay.child.kill('SIGTERM'),
      /WARN Grace period over: giving up the messages in flight/,
    );
    expect(reply.code, output).toBe(250);
    expect(output).toMatch(/\nSMTP relay stopped\n$/);
    expect(exit, output).toEqual({ code: 0, signal: null });
  });
});
