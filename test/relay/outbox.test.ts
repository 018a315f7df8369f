import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiError } from '../../src/index.js';
import { EmlApiQueueTransport, startEmlApiWorker } from '../../src/queue/index.js';
import { startSmtpRelay, type SmtpRelay } from '../../src/relay/index.js';
import { eventually } from '../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Store-and-forward (`queue`, `eml-api relay --redis`): the relay answers 250
 * once the outbox stored the message, so SMTP senders keep sending while the
 * service is down, and the outbox's workers deliver when it is back.
 */

let redis: RedisServer;
let emu: Emulator;
let relay: SmtpRelay;
const FAST_RETRY = { attempts: 40, delay: 200, maxDelay: 1000, jitter: 0 };

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  relay = await startSmtpRelay({
    baseUrl: emu.url,
    apiKey: emu.apiKey,
    port: 0,
    queue: { connection: redis.url, retry: FAST_RETRY },
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
    const worker = await startEmlApiWorker({
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

  it("needs the relay's own key: the workers send later with theirs", async () => {
    const err = await startSmtpRelay({ baseUrl: emu.url, port: 0, queue: { connection: redis.url } }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EmlApiError);
    expect(err).toMatchObject({ code: 'ECONFIG' });
    expect((err as Error).message).toContain("needs the relay's own apiKey");
  });
});
