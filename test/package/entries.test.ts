import { readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { redisServerMissing, startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { installedProject, runIn } from './packed.js';

/** The classes each built file declares at its top level, by file. */
async function classesOf(dir: string, extension: '.js' | '.cjs'): Promise<Map<string, string[]>> {
  const declared = new Map<string, string[]>();
  for (const file of await readdir(dir)) {
    if (!file.endsWith(extension) || file.startsWith('build-thread')) continue;
    const code = await readFile(join(dir, file), 'utf8');
    for (const match of code.matchAll(/^(?:class (\w+)|(?:var|let|const) (\w+) = class\b)/gm)) {
      const name = (match[1] ?? match[2])!;
      declared.set(name, [...(declared.get(name) ?? []), file]);
    }
  }
  return declared;
}

// One script for both formats: `load` is the format's way of loading an entry point.
const CROSS_ENTRY = `
const { EmlApiError, EmlApiClient, EmlApiTransport } = load('nodemailer-eml-api');
const { EmlApiQueueTransport, startOutboxWorker } = load('nodemailer-eml-api/queue');
const { startEmlApiRelay } = load('nodemailer-eml-api/relay');
const { startEmulator } = load('nodemailer-eml-api/emulator');
const nodemailer = load('nodemailer');

async function refusal(make) {
  try { await make(); } catch (err) { return err; }
  throw new Error('no error');
}

async function main() {
  // An error made by any entry point is the main entry point's EmlApiError: the same class, not a look-alike.
  const errors = {
    client: await refusal(() => new EmlApiClient({ apiKey: 'k', baseUrl: 'https://x.test', bogus: 1 })),
    transport: await refusal(() => new EmlApiTransport({ apiKey: 'k', baseUrl: 'https://x.test', bogus: 1 })),
    queue: await refusal(() => new EmlApiQueueTransport({ connection: process.env.REDIS_URL, bogus: 1 })),
    worker: await refusal(() => startOutboxWorker({ connection: process.env.REDIS_URL, apiKey: 'k', baseUrl: 'https://x.test', bogus: 1 })),
    relay: await refusal(() => startEmlApiRelay({ apiKey: 'k', baseUrl: 'https://x.test', bogus: 1 })),
    emulator: await refusal(() => startEmulator({ bogus: 1 })),
  };
  const sameClass = Object.fromEntries(
    Object.entries(errors).map(([entry, err]) => [entry, Object.getPrototypeOf(err) === EmlApiError.prototype && err.code]),
  );

  // A queue transport made with nodemailer-eml-api/queue is the relay's store (docs/relay.md, Store-and-forward).
  const queue = new EmlApiQueueTransport({ connection: process.env.REDIS_URL, queueName: process.env.QUEUE });
  const relay = await startEmlApiRelay({ apiKey: process.env.EML_API_KEY, baseUrl: process.env.EML_API_URL, port: 0, queue });
  const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: relay.port, ignoreTLS: true });
  const stored = await smtp.sendMail({ from: 'a@example.test', to: process.env.QUEUE + '@example.test', text: 'hi' });
  smtp.close();
  await relay.close();
  const worker = await startOutboxWorker({
    connection: process.env.REDIS_URL, queueName: process.env.QUEUE,
    apiKey: process.env.EML_API_KEY, baseUrl: process.env.EML_API_URL, cleanupInterval: 0,
  });
  // The worker's client is the main entry point's EmlApiClient.
  const workerClient = worker.client instanceof EmlApiClient;
  const sent = await new Promise((resolve) => worker.once('sent', (job, result) => resolve(result.response)));
  await worker.close();
  // The relay leaves a queue transport it was given open: it is the app's.
  const afterRelay = await nodemailer.createTransport(queue).sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x' });
  await queue.close();
  console.log(JSON.stringify({ sameClass, stored: stored.response.slice(0, 13), sent, workerClient, afterRelay: afterRelay.response.slice(0, 12) }));
}
main().catch((err) => { console.error(err); process.exitCode = 1; });
`;

describe('the entry points of the packed package', () => {
  it('share one copy of each class per format (ESM, CommonJS), so instanceof holds across them', async () => {
    // Unpacked from the tarball, as users get it.
    const dist = join(await installedProject([]), 'node_modules', 'nodemailer-eml-api', 'dist');
    for (const extension of ['.js', '.cjs'] as const) {
      const classes = await classesOf(dist, extension);
      expect(classes.get('EmlApiError'), extension).toHaveLength(1);
      expect(classes.get('EmlApiQueueTransport'), extension).toHaveLength(1);
      const twice = [...classes].filter(([name, files]) => files.length > 1 || /\d$/.test(name));
      expect(twice, extension).toEqual([]);
    }
  }, 120_000);

  describe.skipIf(redisServerMissing)('across entry points, with Redis', () => {
    let emu: Emulator;
    let redis: RedisServer;
    beforeAll(async () => {
      [emu, redis] = await Promise.all([startEmulator(), startRedisServer()]);
    });
    afterAll(async () => {
      await emu?.close();
      await redis?.stop();
    });

    it('a queue transport from /queue is the relay store; errors of every entry point are one EmlApiError (ESM and CommonJS)', async () => {
      const project = await installedProject(['smtp-server', 'bullmq', 'ioredis']);
      // ESM: every entry point through import.
      await writeFile(
        join(project, 'cross-entry.mjs'),
        `const modules = {
  'nodemailer-eml-api': await import('nodemailer-eml-api'),
  'nodemailer-eml-api/queue': await import('nodemailer-eml-api/queue'),
  'nodemailer-eml-api/relay': await import('nodemailer-eml-api/relay'),
  'nodemailer-eml-api/emulator': await import('nodemailer-eml-api/emulator'),
  nodemailer: (await import('nodemailer')).default,
};
const load = (name) => modules[name];
${CROSS_ENTRY}`,
      );
      await writeFile(join(project, 'cross-entry.cjs'), `const load = require;\n${CROSS_ENTRY}`);
      for (const [file, queue] of [
        ['cross-entry.mjs', 'entries-esm'],
        ['cross-entry.cjs', 'entries-cjs'],
      ] as const) {
        const { code, stdout, stderr } = await runIn(project, 'node', [file], {
          env: { EML_API_URL: emu.url, EML_API_KEY: emu.apiKey, REDIS_URL: redis.url, QUEUE: queue },
        });
        expect({ code, stderr }, file).toEqual({ code: 0, stderr: '' });
        expect(JSON.parse(stdout), file).toEqual({
          sameClass: {
            client: 'ECONFIG',
            transport: 'ECONFIG',
            queue: 'ECONFIG',
            worker: 'ECONFIG',
            relay: 'ECONFIG',
            emulator: 'ECONFIG',
          },
          stored: '250 2.0.0 Ok:',
          sent: '202 Accepted',
          workerClient: true,
          afterRelay: '250 Queued a',
        });
        expect(emu.mailbox(`${queue}@example.test`), file).toHaveLength(1);
      }
    }, 120_000);
  });
});
