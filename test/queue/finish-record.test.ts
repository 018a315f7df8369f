import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiQueueTransport, type OutboxQueuedMessageInfo } from '../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../helpers/outbox.js';
import { monitorBeside, startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * A worker records a send (the service's answer, the content deleted) in the same script as BullMQ's
 * completion of the job (job-record.ts): one Redis command per finished job, not two. Real
 * redis-server (MONITOR), the emulator, a worker in this process.
 */

let redis: RedisServer;
let emu: Emulator;
let transport: EmlApiQueueTransport;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));

beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
  transport = new EmlApiQueueTransport({ connection: redis.url });
});

afterAll(async () => {
  await workers.closeAll();
  await transport?.close();
  await emu?.close();
  await redis?.stop();
});

/** Script calls seen by MONITOR, by their number of keys. */
async function watchScripts(): Promise<{ keys: string[]; stop(): void }> {
  const monitor = await monitorBeside(redis.client);
  const keys: string[] = [];
  monitor.on('monitor', (_time: string, args: string[]) => {
    if (/^eval(sha)?$/i.test(args[0]!)) keys.push(args[2]!);
  });
  return { keys, stop: () => monitor.disconnect() };
}

describe('a worker finishing a job it sent', () => {
  it('records the send and completes the job in one script', async () => {
    const worker = await workers.start();
    const send = (n: number) =>
      nodemailer.createTransport(transport).sendMail({
        from: 'shop@example.test',
        to: 'ann@example.test',
        subject: `Receipt ${n}`,
        text: 'Thank you',
      }) as unknown as Promise<OutboxQueuedMessageInfo>;
    // The scripts are loaded on the connection first (EVAL, then EVALSHA).
    await send(0);
    await eventually(() => emu.mailbox('ann@example.test').length === 1, { what: 'the first sent' });
    const seen = await watchScripts();
    try {
      const sent = new Promise<void>((resolve) => {
        let n = 0;
        worker.on('sent', () => ++n === 3 && resolve());
      });
      const infos = await Promise.all([1, 2, 3].map(send));
      await sent;
      await eventually(() => seen.keys.filter((k) => k === '19').length === 3, {
        what: 'three completions carrying their record',
      });
      // The record alone (5 keys) is never sent.
      expect(seen.keys).not.toContain('5');
      for (const info of infos) {
        const job = await transport.queue.getJob(info.queueId);
        expect(await job!.getState()).toBe('completed');
        expect(job!.data).toMatchObject({ sent: { id: expect.any(String) } });
        expect(job!.data).not.toHaveProperty('inline');
      }
    } finally {
      seen.stop();
    }
  });
});
