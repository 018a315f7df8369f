import nodemailer from 'nodemailer';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { EmlApiQueueTransport } from '../../../src/queue/index.js';
import { eventually, inProcessWorkers } from '../../helpers/outbox.js';
import { startRedisServer, type RedisServer } from '../../helpers/redis-server.js';

let redis: RedisServer;
let emu: Emulator;
const workers = inProcessWorkers(() => ({ connection: redis.url, apiKey: emu.apiKey, baseUrl: emu.url }));
beforeAll(async () => {
  [redis, emu] = await Promise.all([startRedisServer({ appendonly: true, appendfsync: 'always' }), startEmulator()]);
});
afterAll(async () => {
  await workers.closeAll();
  await emu?.close();
  await redis?.stop();
});

const msg = (i: number) => ({
  from: 'a@example.test',
  to: `u${i}@example.test`,
  subject: `m${i}`,
  text: `m${i}`,
  ...(i % 3 === 0 ? { attachments: [{ filename: 'p.bin', content: Buffer.alloc(100_000, i % 250) }] } : {}),
  idempotencyKey: `m${i}`,
});

it.each([
  ['allkeys-lru', ['--maxmemory-policy', 'allkeys-lru']],
  ['crash only', []],
])('burst through a Redis crash-restart (%s)', async (_name, args) => {
  const transport = new EmlApiQueueTransport({ connection: redis.url, durability: 'aof-always', concurrency: 20 });
  const mailer = nodemailer.createTransport(transport);
  const N = 300;
  const outcomes = new Map<number, string>();
  let done = 0;
  const sends = Array.from({ length: N }, (_, i) =>
    mailer.sendMail(msg(i)).then(
      () => outcomes.set(i, 'ok'),
      (e: { code?: string; mayHaveBeenAccepted?: boolean }) => outcomes.set(i, `${e.code}:${e.mayHaveBeenAccepted}`),
    ).finally(() => done++),
  );
  await eventually(() => done > 80);
  await redis.restart('crash', { args });
  await Promise.all(sends);
  await redis.client.config('SET', 'maxmemory-policy', 'noeviction');
  const tally: Record<string, number> = {};
  for (const o of outcomes.values()) tally[o] = (tally[o] ?? 0) + 1;
  console.log(_name, tally);
  // The app queues again what may have been accepted (and what was refused for settings).
  for (const [i, o] of outcomes) {
    if (o !== 'ok' && !o.endsWith(':false')) {
      await mailer.sendMail(msg(i));
      outcomes.set(i, 'requeued');
    }
  }
  await workers.start({ concurrency: 20 });
  const expected = [...outcomes].filter(([, o]) => o === 'ok' || o === 'requeued').map(([i]) => `m${i}`);
  await eventually(() => new Set(emu.messages().map((m) => m.subject)).size >= expected.length, { timeout: 60_000, what: () => `${new Set(emu.messages().map((m) => m.subject)).size} of ${expected.length}` });
  await eventually(async () => {
    const c = await transport.queue.getJobCounts('prioritized', 'waiting', 'active', 'delayed');
    return Object.values(c).every((n) => n === 0);
  }, { timeout: 60_000 });
  const subjects = emu.messages().map((m) => m.subject!);
  const counts = new Map<string, number>();
  for (const s of subjects) counts.set(s, (counts.get(s) ?? 0) + 1);
  const twice = [...counts].filter(([, n]) => n > 1);
  const missing = expected.filter((s) => !counts.has(s));
  const extra = [...counts.keys()].filter((s) => !expected.includes(s));
  console.log({ delivered: subjects.length, twice, missing, extra, failed: (await transport.queue.getJobCounts('failed')).failed });
  expect(twice).toEqual([]);
  expect(missing).toEqual([]);
  await workers.closeAll();
  await transport.close();
  await redis.client.flushall();
  emu.reset();
}, 180_000);
