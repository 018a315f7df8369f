import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import bullmqPkg from 'bullmq/package.json' with { type: 'json' };
import ioredisPkg from 'ioredis/package.json' with { type: 'json' };
import mailparserPkg from 'mailparser/package.json' with { type: 'json' };
import smtpServerPkg from 'smtp-server/package.json' with { type: 'json' };
import nodemailerPkg from 'nodemailer/package.json' with { type: 'json' };
import pkg from '../../package.json' with { type: 'json' };
import { startEmulator } from '../../src/emulator/index.js';
import { redisServerMissing, startRedisServer } from '../helpers/redis-server.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const USAGE = (load: string) => `${load}
(async () => {
  const emu = await startEmulator();
  const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
  const info = await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', subject: 'packed', text: 'hi' });
  let configError;
  try { new EmlApiClient({ apiKey: '', baseUrl: emu.url }); } catch (e) { configError = e; }
  console.log(JSON.stringify({
    response: info.response,
    delivered: emu.mailbox('b@example.test').length,
    isEmlApiError: configError instanceof EmlApiError,
    code: configError && configError.code,
    sendEml: API_PATHS.sendEml,
  }));
  await transporter.close();
  await emu.close();
})();
`;

const TYPES_USAGE = `
import nodemailer from 'nodemailer';
import { EmlApiTransport, EmlApiError, type EmlApiClient, type EmlApiSentMessageInfo } from 'nodemailer-eml-api';
import { startEmulator, type Emulator } from 'nodemailer-eml-api/emulator';
import {
  EmlApiQueueTransport,
  startEmlApiWorker,
  type EmlApiWorker,
  type EmlApiQueuedMessageInfo,
  type OutboxJob,
  type OutboxSendResult,
} from 'nodemailer-eml-api/queue';
import {
  API_PATHS,
  API_KEY_HEADER,
  encodePathSegment,
  type SendAcceptedResponse,
  type StandardEmailRequest,
  type ApiErrorBody,
} from 'nodemailer-eml-api/protocol';
export function contract(): string {
  const body: StandardEmailRequest = { to: [{ email: 'b@x.test' }], from: { email: 'a@x.test' }, subject: 's', textContent: { text: 'x' } };
  const answer: SendAcceptedResponse = { id: 'i', messageId: '<m@x.test>', recipients: 1 };
  const refusal: ApiErrorBody = { error: { code: 'invalid_api_key', message: 'no' } };
  return API_PATHS.sendEmail + API_KEY_HEADER + encodePathSegment('..') + body.subject + answer.id + refusal.error.code;
}
export function settings(client: EmlApiClient): number {
  // A read-only view: the dispatcher is not in it, nothing in it can be assigned.
  // @ts-expect-error not among the settings
  void client.options.dispatcher;
  // @ts-expect-error read-only
  client.options.maxConnections = 1;
  return client.options.timeouts.total + client.options.retry.attempts;
}
export async function check(): Promise<string> {
  const emu: Emulator = await startEmulator({ apiKeys: [{ key: 'k', scopes: ['sender'] }] });
  const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
  const info: EmlApiSentMessageInfo = await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'x' });
  // group and tracking are typed on sendMail through module augmentation: no casts.
  await transporter.sendMail({ from: 'a@x.test', subject: 'news', html: '<p>x</p>', group: 'newsletter' });
  await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', subject: 's', html: 'x', tracking: true });
  const err = new EmlApiError('EAPI', 'x');
  return info.messageId + err.code;
}
export async function checkQueue(): Promise<string> {
  const transport = new EmlApiQueueTransport({ connection: 'redis://127.0.0.1:6379', retry: { attempts: 10 } });
  const transporter = nodemailer.createTransport(transport);
  const info = (await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'x', idempotencyKey: 'k1' })) as EmlApiQueuedMessageInfo;
  const outbox: EmlApiWorker = await startEmlApiWorker({ connection: 'redis://127.0.0.1:6379', apiKey: 'k', baseUrl: 'http://127.0.0.1:1', rateLimit: { max: 20, duration: 1000 } });
  outbox.on('sent', (job: OutboxJob, result: OutboxSendResult) => console.log(job.id, result.response));
  // One way to start a worker: EmlApiWorker is a type, not a constructor.
  // @ts-expect-error only refers to a type
  void new EmlApiWorker({ connection: 'redis://127.0.0.1:6379', apiKey: 'k', baseUrl: 'http://127.0.0.1:1' });
  await outbox.close({ abort: true });
  return info.queueId + info.response;
}
`;

/** Installs the outbox's peers (bullmq, ioredis) into the packed package's folder, once. */
async function installOutboxPeers(dir: string): Promise<void> {
  if (
    await stat(join(dir, 'node_modules', 'bullmq')).then(
      () => true,
      () => false,
    )
  )
    return;
  await run(
    'npm',
    [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      `bullmq@${bullmqPkg.version}`,
      `ioredis@${ioredisPkg.version}`,
    ],
    { cwd: dir },
  );
}

describe('the packed package', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'eml-api-pack-'));
    await run('npm', ['pack', '--pack-destination', dir], { cwd: ROOT });
    const tarball = (await readdir(dir)).find((f) => f.endsWith('.tgz'))!;
    await writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
    // The registry is reachable but the cache already holds every dependency after `npm ci`.
    await run(
      'npm',
      [
        'install',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        join(dir, tarball),
        `nodemailer@${nodemailerPkg.version}`,
        '@types/node@20',
      ],
      { cwd: dir },
    );
  }, 240_000);
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('installs no MIME parser with the transport; the emulator then says what to install', async () => {
    // mailparser is an optional peer, needed by the emulator only.
    await expect(stat(join(dir, 'node_modules', 'mailparser'))).rejects.toThrow(/ENOENT/);
    const emu = await startEmulator();
    try {
      await writeFile(
        join(dir, 'transport-only.mjs'),
        `import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: process.env.KEY, baseUrl: process.env.URL }));
const info = await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', subject: 'lean', text: 'hi' });
let emulatorError;
try {
  const { startEmulator } = await import('nodemailer-eml-api/emulator');
  await startEmulator();
} catch (err) {
  emulatorError = { code: err.code, message: err.message };
}
console.log(JSON.stringify({ response: info.response, emulatorError }));
await transporter.close();
`,
      );
      const { stdout } = await run('node', ['transport-only.mjs'], {
        cwd: dir,
        env: { ...process.env, KEY: emu.apiKey, URL: emu.url },
      });
      const result = JSON.parse(stdout) as { response: string; emulatorError: { code: string; message: string } };
      expect(result.response).toBe('202 Accepted');
      expect(emu.mailbox('b@example.test')).toHaveLength(1);
      expect(result.emulatorError.code).toBe('ECONFIG');
      expect(result.emulatorError.message).toContain('npm install --save-dev mailparser');
    } finally {
      await emu.close();
    }
    await run(
      'npm',
      ['install', '--prefer-offline', '--no-audit', '--no-fund', `mailparser@${mailparserPkg.version}`],
      {
        cwd: dir,
      },
    );
  }, 120_000);

  it.skipIf(redisServerMissing)(
    'needs bullmq and ioredis for the outbox only, says so, and with them queues and sends from ESM and CJS',
    async () => {
      // Without them: the entry point says what to install as it is imported; the CLI still runs.
      await expect(stat(join(dir, 'node_modules', 'bullmq'))).rejects.toThrow(/ENOENT/);
      await writeFile(
        join(dir, 'queue-missing.mjs'),
        `import { createRequire } from 'node:module';
const describe = (err) => ({ code: err.code, message: err.message });
let esm;
try { await import('nodemailer-eml-api/queue'); } catch (err) { esm = describe(err); }
let cjs;
try { createRequire(import.meta.url)('nodemailer-eml-api/queue'); } catch (err) { cjs = describe(err); }
console.log(JSON.stringify({ esm, cjs }));
`,
      );
      const missing = JSON.parse((await run('node', ['queue-missing.mjs'], { cwd: dir })).stdout) as Record<
        string,
        { code: string; message: string }
      >;
      for (const format of ['esm', 'cjs']) {
        expect(missing[format]?.code).toBe('ECONFIG');
        expect(missing[format]?.message).toContain('npm install bullmq ioredis');
      }
      const cli = await run(
        join(dir, 'node_modules', '.bin', 'eml-api'),
        ['queue', 'status', '--redis', 'redis://127.0.0.1:1'],
        {
          cwd: dir,
        },
      ).catch((err: { code: number; stderr: string }) => err);
      expect(cli).toMatchObject({ code: 1, stderr: expect.stringContaining('npm install bullmq ioredis') });

      await installOutboxPeers(dir);
      const program = (load: string, queue: string) => `${load}
(async () => {
  const transport = new EmlApiQueueTransport({ connection: process.env.REDIS, queueName: '${queue}', maxMessageSize: 3000 });
  const transporter = nodemailer.createTransport(transport);
  const info = await transporter.sendMail({ from: 'a@example.test', to: '${queue}@example.test', subject: 'packed', text: 'hi' });
  let tooLarge;
  try { await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x'.repeat(5000) }); } catch (e) { tooLarge = e; }
  const worker = await startEmlApiWorker({ connection: process.env.REDIS, queueName: '${queue}', apiKey: process.env.KEY, baseUrl: process.env.URL, cleanupInterval: 0 });
  const sent = await new Promise((resolve) => worker.once('sent', (job, result) => resolve(result.response)));
  await worker.close();
  await transport.close();
  console.log(JSON.stringify({ queued: info.response, sent, isEmlApiError: tooLarge instanceof EmlApiError, code: tooLarge.code }));
})();
`;
      await writeFile(
        join(dir, 'queue.mjs'),
        program(
          `import nodemailer from 'nodemailer';
import { EmlApiError } from 'nodemailer-eml-api';
import { EmlApiQueueTransport, startEmlApiWorker } from 'nodemailer-eml-api/queue';`,
          'esm',
        ),
      );
      await writeFile(
        join(dir, 'queue.cjs'),
        program(
          `const nodemailer = require('nodemailer');
const { EmlApiError } = require('nodemailer-eml-api');
const { EmlApiQueueTransport, startEmlApiWorker } = require('nodemailer-eml-api/queue');`,
          'cjs',
        ),
      );
      const [redis, emu] = await Promise.all([startRedisServer(), startEmulator()]);
      try {
        for (const [file, queue] of [
          ['queue.mjs', 'esm'],
          ['queue.cjs', 'cjs'],
        ] as const) {
          const { stdout } = await run('node', [file], {
            cwd: dir,
            env: { ...process.env, REDIS: redis.url, KEY: emu.apiKey, URL: emu.url },
          });
          // An error of the outbox is an EmlApiError of the main entry point too.
          expect(JSON.parse(stdout)).toEqual({
            queued: expect.stringMatching(/^250 Queued as [0-9a-f-]{36}$/),
            sent: '202 Accepted',
            isEmlApiError: true,
            code: 'EMESSAGE',
          });
          expect(emu.mailbox(`${queue}@example.test`)).toHaveLength(1);
        }
      } finally {
        await emu.close();
        await redis.stop();
      }
    },
    180_000,
  );

  it('contains only what users need', async () => {
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT });
    const files = (JSON.parse(stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
    expect(files).toContain('dist/index.js');
    expect(files).toContain('dist/index.cjs');
    expect(files).toContain('dist/index.d.ts');
    expect(files).toContain('dist/emulator.d.cts');
    expect(files).toContain('dist/build-thread.js');
    expect(files).toContain('dist/build-thread.cjs');
    expect(files.some((f) => f.startsWith('src/') || f.startsWith('test/'))).toBe(false);
  });

  it('exports the same values from ESM and CommonJS, each entry point only what users call (types are in etc/*.api.md)', async () => {
    // Run in the package itself: Node resolves its own name through the exports map (bullmq is installed here).
    const entries = Object.keys(pkg.exports)
      .filter((key) => key !== './package.json')
      .map((key) => `nodemailer-eml-api${key.slice(1)}`);
    const list = `const out = {};
for (const name of ${JSON.stringify(entries)}) out[name] = Object.keys(await load(name)).sort();
console.log(JSON.stringify(out));`;
    const esm = await run('node', ['--input-type=module', '-e', `const load = (n) => import(n);\n${list}`], {
      cwd: ROOT,
    });
    const cjs = await run(
      'node',
      ['--input-type=commonjs', '-e', `const load = async (n) => require(n);\n(async () => {\n${list}\n})();`],
      { cwd: ROOT },
    );
    const expected = {
      'nodemailer-eml-api': ['EmlApiClient', 'EmlApiError', 'EmlApiTransport'],
      'nodemailer-eml-api/emulator': ['DEFAULT_EMULATOR_ACCOUNT', 'startEmulator'],
      'nodemailer-eml-api/relay': ['hashRelayPassword', 'startEmlApiRelay'],
      'nodemailer-eml-api/queue': [
        'EmlApiQueueTransport',
        'OUTBOX_STATES',
        'openOutboxQueue',
        'outboxJobId',
        'purgeOutbox',
        'readOutboxSnapshot',
        'readOutboxStatus',
        'retryFailedSends',
        'startEmlApiWorker',
      ],
      'nodemailer-eml-api/protocol': [
        'API_KEY_HEADER',
        'API_PATHS',
        'API_SCOPES',
        'IDEMPOTENCY_KEY_HEADER',
        'encodePathSegment',
      ],
    };
    expect(JSON.parse(esm.stdout)).toEqual(expected);
    expect(JSON.parse(cjs.stdout)).toEqual(expected);
  });

  it('works through import from an ES module', async () => {
    await writeFile(
      join(dir, 'esm.mjs'),
      USAGE(`import nodemailer from 'nodemailer';
import { EmlApiTransport, EmlApiClient, EmlApiError } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';
import { API_PATHS } from 'nodemailer-eml-api/protocol';`),
    );
    const { stdout } = await run('node', ['esm.mjs'], { cwd: dir });
    expect(JSON.parse(stdout)).toEqual({
      response: '202 Accepted',
      delivered: 1,
      isEmlApiError: true,
      code: 'ECONFIG',
      sendEml: '/v1/send/eml',
    });
  });

  it('works through require from CommonJS', async () => {
    await writeFile(
      join(dir, 'cjs.cjs'),
      USAGE(`const nodemailer = require('nodemailer');
const { EmlApiTransport, EmlApiClient, EmlApiError } = require('nodemailer-eml-api');
const { startEmulator } = require('nodemailer-eml-api/emulator');
const { API_PATHS } = require('nodemailer-eml-api/protocol');`),
    );
    const { stdout } = await run('node', ['cjs.cjs'], { cwd: dir });
    expect(JSON.parse(stdout)).toEqual({
      response: '202 Accepted',
      delivered: 1,
      isEmlApiError: true,
      code: 'ECONFIG',
      sendEml: '/v1/send/eml',
    });
  });

  it('builds on threads from ESM and CommonJS, each format with its own thread script, and exits without close()', async () => {
    const program = (load: string, format: string) => `${load}
(async () => {
  const logs = [];
  const keep = (meta, message) => logs.push({ message, meta });
  const logger = { debug: keep, info() {}, warn: keep, error: keep };
  const transport = new EmlApiTransport({ apiKey: process.env.KEY, baseUrl: process.env.URL, buildThreads: 2, logger });
  const info = await nodemailer.createTransport(transport).sendMail({
    from: 'a@example.test', to: 'threads-${format}@example.test', subject: 'threads', text: 'hi',
    attachments: [{ filename: 'a.txt', content: Buffer.from('attached') }],
  });
  const sending = logs.find((l) => l.message === 'Sending message');
  console.log(JSON.stringify({
    response: info.response,
    builtOnThread: sending.meta.builtOnThread,
    others: logs.filter((l) => l !== sending).map((l) => l.message),
  }));
  // No close(): idle build threads must not keep the process alive.
})();
`;
    await writeFile(
      join(dir, 'threads.mjs'),
      program(
        `import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';`,
        'esm',
      ),
    );
    await writeFile(
      join(dir, 'threads.cjs'),
      program(
        `const nodemailer = require('nodemailer');
const { EmlApiTransport } = require('nodemailer-eml-api');`,
        'cjs',
      ),
    );
    const dist = join(dir, 'node_modules', 'nodemailer-eml-api', 'dist');
    const emu = await startEmulator();
    try {
      for (const [file, format, other] of [
        ['threads.mjs', 'esm', 'build-thread.cjs'],
        ['threads.cjs', 'cjs', 'build-thread.js'],
      ] as const) {
        // The other format's script is moved away: each format starts its own.
        await rename(join(dist, other), join(dist, `${other}.away`));
        try {
          const { stdout } = await run('node', [file], {
            cwd: dir,
            env: { ...process.env, KEY: emu.apiKey, URL: emu.url },
          });
          expect(JSON.parse(stdout), file).toEqual({ response: '202 Accepted', builtOnThread: true, others: [] });
        } finally {
          await rename(join(dist, `${other}.away`), join(dist, other));
        }
        expect(emu.mailbox(`threads-${format}@example.test`)).toHaveLength(1);
      }
    } finally {
      await emu.close();
    }
  });

  it('type-checks for ESM and CommonJS consumers, group and tracking on sendMail and the outbox included', async () => {
    // The outbox's types name bullmq and ioredis: installed here too, where the Redis test above is skipped.
    await installOutboxPeers(dir);
    await writeFile(join(dir, 'check.mts'), TYPES_USAGE);
    await writeFile(join(dir, 'check.cts'), TYPES_USAGE);
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const args = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext'];
    for (const file of ['check.mts', 'check.cts']) {
      await expect(run('node', [tsc, ...args, '--esModuleInterop', file], { cwd: dir })).resolves.toBeDefined();
    }
  }, 120_000);

  it('installs the eml-api command', async () => {
    const { stdout } = await run(join(dir, 'node_modules', '.bin', 'eml-api'), ['--version'], { cwd: dir });
    expect(stdout.trim()).toBe(pkg.version);
  });

  it('nodemailer-eml-api/relay says what to install without smtp-server (eml-api send still works), and relays from ESM and CommonJS with it', async () => {
    await expect(stat(join(dir, 'node_modules', 'smtp-server'))).rejects.toThrow(/ENOENT/);
    const emu = await startEmulator();
    const env = { ...process.env, EML_API_URL: emu.url, EML_API_KEY: emu.apiKey };
    const bin = join(dir, 'node_modules', '.bin', 'eml-api');
    try {
      await writeFile(
        join(dir, 'relay-missing.mjs'),
        `try { await import('nodemailer-eml-api/relay'); console.log('{}'); } catch (err) { console.log(JSON.stringify({ code: err.code, message: err.message })); }`,
      );
      const missing = JSON.parse((await run('node', ['relay-missing.mjs'], { cwd: dir })).stdout) as Record<
        string,
        string
      >;
      expect(missing.code).toBe('ECONFIG');
      expect(missing.message).toContain('npm install smtp-server');
      await writeFile(
        join(dir, 'cli.eml'),
        'From: a@example.test\r\nTo: cli@example.test\r\nSubject: cli\r\n\r\nhi\r\n',
      );
      expect((await run(bin, ['send', 'cli.eml'], { cwd: dir, env })).stdout).toMatch(/^202 Accepted/);
      const relayCli = await run(bin, ['relay', '--port', '0'], { cwd: dir, env }).catch(
        (e: { code: number; stderr: string }) => e,
      );
      expect(relayCli).toMatchObject({ code: 1, stderr: expect.stringContaining('npm install smtp-server') });

      await run(
        'npm',
        ['install', '--prefer-offline', '--no-audit', '--no-fund', `smtp-server@${smtpServerPkg.version}`],
        {
          cwd: dir,
        },
      );
      // Health and metrics: /metrics needs prom-client, an optional peer; the CLI says so, or runs without it.
      await expect(stat(join(dir, 'node_modules', 'prom-client'))).rejects.toThrow(/ENOENT/);
      const noProm = await run(bin, ['relay', '--port', '0', '--http-port', '0'], { cwd: dir, env }).catch(
        (e: { code: number; stderr: string }) => e,
      );
      expect(noProm).toMatchObject({
        code: 1,
        stderr: expect.stringContaining('npm install prom-client'),
      });
      expect((noProm as { stderr: string }).stderr).toContain('--no-metrics');
      const usage = (load: string) => `${load}
(async () => {
  const emu = await startEmulator();
  const relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0 });
  const transporter = nodemailer.createTransport({ host: '127.0.0.1', port: relay.port, ignoreTLS: true });
  const info = await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', bcc: 'c@example.test', subject: 'relayed', text: 'hi' });
  transporter.close();
  console.log(JSON.stringify({ response: info.response.slice(0, 13), delivered: emu.mailbox('c@example.test').length }));
  await relay.close();
  await emu.close();
})();
`;
      await writeFile(
        join(dir, 'relay.mjs'),
        usage(`import nodemailer from 'nodemailer';
import { startEmlApiRelay } from 'nodemailer-eml-api/relay';
import { startEmulator } from 'nodemailer-eml-api/emulator';`),
      );
      await writeFile(
        join(dir, 'relay.cjs'),
        usage(`const nodemailer = require('nodemailer');
const { startEmlApiRelay } = require('nodemailer-eml-api/relay');
const { startEmulator } = require('nodemailer-eml-api/emulator');`),
      );
      for (const file of ['relay.mjs', 'relay.cjs']) {
        const { stdout } = await run('node', [file], { cwd: dir });
        expect(JSON.parse(stdout), file).toEqual({ response: '250 2.0.0 Ok:', delivered: 1 });
      }
    } finally {
      await emu.close();
    }
  }, 120_000);

  it('type-checks for Nodemailer 6 users, group and tracking included; their @types/nodemailer types info as SMTP info', async () => {
    const dir6 = join(dir, 'nodemailer6');
    await mkdir(dir6);
    await writeFile(join(dir6, 'package.json'), JSON.stringify({ name: 'consumer6', private: true }));
    const tarball = (await readdir(dir)).find((f) => f.endsWith('.tgz'))!;
    await run(
      'npm',
      [
        'install',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        join(dir, tarball),
        'nodemailer@6.9.16',
        '@types/nodemailer@6.4.9',
        '@types/node@20',
      ],
      { cwd: dir6 },
    );
    // The documented pattern: @types/nodemailer 6 returns SMTP's SentMessageInfo for any
    // custom transport, so the richer info needs a cast.
    const source = `import nodemailer from 'nodemailer';
import { EmlApiTransport, type EmlApiSentMessageInfo } from 'nodemailer-eml-api';
export async function check(): Promise<string> {
  const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: 'k', baseUrl: 'http://127.0.0.1:1' }));
  await transporter.verify();
  const info = (await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'x' })) as EmlApiSentMessageInfo;
  await transporter.sendMail({ from: 'a@x.test', subject: 'news', html: '<p>x</p>', group: 'newsletter' });
  await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', subject: 's', html: 'x', tracking: true });
  transporter.close();
  return info.messageId + String(info.id) + info.accepted.join(',');
}
`;
    await writeFile(join(dir6, 'check.mts'), source);
    await writeFile(join(dir6, 'check.cts'), source);
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    await expect(
      run(
        'node',
        [
          tsc,
          '--noEmit',
          '--strict',
          '--module',
          'nodenext',
          '--moduleResolution',
          'nodenext',
          '--esModuleInterop',
          'check.mts',
        ],
        {
          cwd: dir6,
        },
      ),
    ).resolves.toBeDefined();
  }, 120_000);
});
