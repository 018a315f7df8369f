import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { redisServerMissing, startRedisServer } from '../helpers/redis-server.js';
import { binOf, installedProject, runIn, start, type Finished } from './packed.js';

// Each part of the package installed with exactly the peers its section of the README names, as a
// newcomer installs it: what that part documents runs, every --help runs, and every other part
// says in one line what to install. The repository's own tests cannot see this: its
// devDependencies hold every peer.

/** The CLI's commands and subcommands, each with --help. */
const HELP = [
  [],
  ['serve'],
  ['send'],
  ['group'],
  ['group', 'add'],
  ['group', 'remove'],
  ['group', 'check'],
  ['relay'],
  ['worker'],
  ['queue'],
  ['queue', 'status'],
  ['queue', 'retry'],
  ['queue', 'watch'],
  ['queue', 'purge'],
];

/** An error the CLI prints: one line, naming what to install, no stack trace. */
function expectOneLineError(run: Finished, install: string): void {
  expect(run, run.stderr).toMatchObject({ code: 1, stdout: '' });
  const lines = run.stderr.trimEnd().split('\n');
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^eml-api: /);
  expect(lines[0]).toContain(`npm install ${install}`);
}

/** What `import()` and `require()` of an entry point throw in a project, or 'loaded'. */
async function loadIn(project: string, entry: string): Promise<Record<'esm' | 'cjs', unknown>> {
  await writeFile(
    join(project, 'load-entry.mjs'),
    `import { createRequire } from 'node:module';
const outcome = (err) => ({ code: err.code, message: err.message });
let esm = 'loaded';
try { await import(process.argv[2]); } catch (err) { esm = outcome(err); }
let cjs = 'loaded';
try { createRequire(import.meta.url)(process.argv[2]); } catch (err) { cjs = outcome(err); }
console.log(JSON.stringify({ esm, cjs }));
`,
  );
  const { stdout, stderr } = await runIn(project, 'node', ['load-entry.mjs', entry]);
  expect(stderr).toBe('');
  return JSON.parse(stdout) as Record<'esm' | 'cjs', unknown>;
}

const MESSAGE = 'From: a@example.test\r\nTo: cli@example.test\r\nSubject: cli\r\n\r\nhi\r\n';

describe('each part with only the peers its section names', () => {
  let emu: Emulator;
  let env: Record<string, string>;
  beforeAll(async () => {
    emu = await startEmulator({ groups: ['newsletter'] });
    env = { EML_API_URL: emu.url, EML_API_KEY: emu.apiKey, REDIS_URL: '' };
  });
  afterAll(() => emu?.close());

  it('nodemailer only (Install): the transport, send, group and every --help run; the other parts say what to install', async () => {
    const project = await installedProject([]);
    const bin = binOf(project);
    const helps = await Promise.all(HELP.map((args) => runIn(project, bin, [...args, '--help'])));
    helps.forEach((help, i) => {
      expect(help, HELP[i]!.join(' ')).toMatchObject({ code: 0, stderr: '' });
      expect(help.stdout, HELP[i]!.join(' ')).toMatch(/^Usage: eml-api/);
    });

    await writeFile(join(project, 'message.eml'), MESSAGE);
    expect((await runIn(project, bin, ['send', 'message.eml'], { env })).stdout).toMatch(/^202 Accepted/);
    const added = await runIn(project, bin, ['group', 'add', 'newsletter', 'ann@example.test'], { env });
    expect(added, added.stderr).toMatchObject({ code: 0 });
    expect(emu.members('newsletter').map((m) => m.email)).toEqual(['ann@example.test']);
    expect((await runIn(project, bin, ['group', 'check', 'newsletter', 'ann@example.test'], { env })).code).toBe(0);

    expectOneLineError(await runIn(project, bin, ['serve', '--port', '0'], { env }), '--save-dev mailparser');
    expectOneLineError(await runIn(project, bin, ['relay', '--port', '0'], { env }), 'smtp-server');
    const redis = { ...env, REDIS_URL: 'redis://127.0.0.1:1' };
    expectOneLineError(await runIn(project, bin, ['worker'], { env: redis }), 'bullmq ioredis');
    expectOneLineError(await runIn(project, bin, ['queue', 'status'], { env: redis }), 'bullmq ioredis');

    expect(await loadIn(project, 'nodemailer-eml-api')).toEqual({ esm: 'loaded', cjs: 'loaded' });
    expect(await loadIn(project, 'nodemailer-eml-api/protocol')).toEqual({ esm: 'loaded', cjs: 'loaded' });
    // The emulator loads; starting it says what to install (tests import it next to the app's code).
    expect(await loadIn(project, 'nodemailer-eml-api/emulator')).toEqual({ esm: 'loaded', cjs: 'loaded' });
    for (const [entry, install] of [
      ['nodemailer-eml-api/queue', 'bullmq ioredis'],
      ['nodemailer-eml-api/relay', 'smtp-server'],
    ] as const) {
      const loaded = await loadIn(project, entry);
      for (const format of ['esm', 'cjs'] as const) {
        expect(loaded[format], `${entry} ${format}`).toMatchObject({
          code: 'ECONFIG',
          message: expect.stringContaining(`npm install ${install}`),
        });
      }
    }
  }, 120_000);

  it('mailparser (the emulator): eml-api serve runs, and the emulator from code', async () => {
    const project = await installedProject(['mailparser']);
    const serve = start(project, binOf(project), ['serve', '--port', '0', '--group', 'newsletter']);
    try {
      const url = (await serve.line(/^Emulator listening on /)).split(' ').pop()!;
      const key = (await serve.line(/^API key/)).split(' ').pop()!;
      await writeFile(join(project, 'message.eml'), MESSAGE);
      const sent = await runIn(project, binOf(project), ['send', 'message.eml'], {
        env: { EML_API_URL: url, EML_API_KEY: key },
      });
      expect(sent.stdout).toMatch(/^202 Accepted/);
    } finally {
      expect(await serve.stop()).toMatchObject({ code: 0 });
    }
    await writeFile(
      join(project, 'emulator.mjs'),
      `import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';
const emu = await startEmulator();
const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', subject: 'Hi', text: 'x' });
console.log(emu.mailbox('b@example.test')[0].subject);
await emu.close();
`,
    );
    expect(await runIn(project, 'node', ['emulator.mjs'])).toMatchObject({ code: 0, stdout: 'Hi\n', stderr: '' });
  }, 120_000);

  it('smtp-server (the relay): the direct relay from the CLI and from code, ESM and CommonJS, without bullmq', async () => {
    const project = await installedProject(['smtp-server']);
    const bin = binOf(project);
    expect(await loadIn(project, 'nodemailer-eml-api/relay')).toEqual({ esm: 'loaded', cjs: 'loaded' });

    const relay = start(project, bin, ['relay', '--port', '0'], { env });
    try {
      const port = Number((await relay.line(/^SMTP relay listening on /)).match(/:(\d+),/)![1]);
      const smtp = nodemailer.createTransport({ host: '127.0.0.1', port, ignoreTLS: true });
      const info = await smtp.sendMail({ from: 'a@example.test', to: 'relayed-cli@example.test', text: 'x' });
      smtp.close();
      expect(info.response).toMatch(/^250 2\.0\.0 Ok: /);
      expect(emu.mailbox('relayed-cli@example.test')).toHaveLength(1);
    } finally {
      expect(await relay.stop()).toMatchObject({ code: 0 });
    }

    const program = (load: string, to: string) => `${load}
(async () => {
  const relay = await startEmlApiRelay({ baseUrl: process.env.EML_API_URL, apiKey: process.env.EML_API_KEY, port: 0 });
  const transporter = nodemailer.createTransport({ host: '127.0.0.1', port: relay.port, ignoreTLS: true });
  const info = await transporter.sendMail({ from: 'a@example.test', to: '${to}', bcc: 'c@example.test', text: 'hi' });
  transporter.close();
  await relay.close();
  console.log(info.response.slice(0, 13));
})();
`;
    await writeFile(
      join(project, 'relay.mjs'),
      program(
        `import nodemailer from 'nodemailer';\nimport { startEmlApiRelay } from 'nodemailer-eml-api/relay';`,
        'relayed-esm@example.test',
      ),
    );
    await writeFile(
      join(project, 'relay.cjs'),
      program(
        `const nodemailer = require('nodemailer');\nconst { startEmlApiRelay } = require('nodemailer-eml-api/relay');`,
        'relayed-cjs@example.test',
      ),
    );
    for (const [file, to] of [
      ['relay.mjs', 'relayed-esm@example.test'],
      ['relay.cjs', 'relayed-cjs@example.test'],
    ] as const) {
      expect(await runIn(project, 'node', [file], { env }), file).toMatchObject({
        code: 0,
        stdout: '250 2.0.0 Ok:\n',
        stderr: '',
      });
      expect(emu.mailbox(to)).toHaveLength(1);
    }

    const redis = { ...env, REDIS_URL: 'redis://127.0.0.1:1' };
    expectOneLineError(
      await runIn(project, bin, ['relay', '--port', '0', '--outbox'], { env: redis }),
      'bullmq ioredis',
    );
    const noMetrics = await runIn(project, bin, ['relay', '--port', '0', '--http-port', '0'], { env });
    expectOneLineError(noMetrics, 'prom-client');
    expect(noMetrics.stderr).toContain('--no-metrics');
  }, 120_000);

  it.skipIf(redisServerMissing)(
    'bullmq and ioredis (the outbox): queue and send from ESM and CommonJS, eml-api worker and queue; the relay says what to install',
    async () => {
      const project = await installedProject(['bullmq', 'ioredis']);
      const bin = binOf(project);
      expectOneLineError(await runIn(project, bin, ['relay', '--port', '0'], { env }), 'smtp-server');
      const program = (load: string, queue: string) => `${load}
(async () => {
  const transport = new EmlApiQueueTransport({ connection: process.env.REDIS_URL, queueName: '${queue}', maxMessageSize: 3000 });
  const transporter = nodemailer.createTransport(transport);
  const info = await transporter.sendMail({ from: 'a@example.test', to: '${queue}@example.test', subject: 'packed', text: 'hi' });
  let tooLarge;
  try { await transporter.sendMail({ from: 'a@example.test', to: 'b@example.test', text: 'x'.repeat(5000) }); } catch (e) { tooLarge = e; }
  const worker = await startOutboxWorker({ connection: process.env.REDIS_URL, queueName: '${queue}', apiKey: process.env.EML_API_KEY, baseUrl: process.env.EML_API_URL, cleanupInterval: 0 });
  const sent = await new Promise((resolve) => worker.once('sent', (job, result) => resolve(result.response)));
  await worker.close();
  await transport.close();
  console.log(JSON.stringify({ queued: info.response, sent, isEmlApiError: tooLarge instanceof EmlApiError, code: tooLarge.code }));
})();
`;
      await writeFile(
        join(project, 'queue.mjs'),
        program(
          `import nodemailer from 'nodemailer';
import { EmlApiError } from 'nodemailer-eml-api';
import { EmlApiQueueTransport, startOutboxWorker } from 'nodemailer-eml-api/queue';`,
          'esm',
        ),
      );
      await writeFile(
        join(project, 'queue.cjs'),
        program(
          `const nodemailer = require('nodemailer');
const { EmlApiError } = require('nodemailer-eml-api');
const { EmlApiQueueTransport, startOutboxWorker } = require('nodemailer-eml-api/queue');`,
          'cjs',
        ),
      );
      const redis = await startRedisServer();
      try {
        const redisEnv = { ...env, REDIS_URL: redis.url };
        for (const queue of ['esm', 'cjs']) {
          const { stdout, stderr } = await runIn(project, 'node', [`queue.${queue === 'esm' ? 'mjs' : 'cjs'}`], {
            env: redisEnv,
          });
          // An error of the outbox is an EmlApiError of the main entry point too.
          expect(JSON.parse(stdout), stderr).toEqual({
            queued: expect.stringMatching(/^250 Queued as [0-9a-f-]{36}$/),
            sent: '202 Accepted',
            isEmlApiError: true,
            code: 'EMESSAGE',
          });
          expect(emu.mailbox(`${queue}@example.test`)).toHaveLength(1);
        }
        const status = await runIn(project, bin, ['queue', 'status', '--queue', 'esm'], { env: redisEnv });
        expect(status, status.stderr).toMatchObject({ code: 0 });
        expect(status.stdout).toMatch(/^Queue "esm": /);
        const worker = start(project, bin, ['worker', '--queue', 'esm'], { env: redisEnv });
        await worker.line(/^Worker sending from queue "esm"/);
        expect(await worker.stop()).toMatchObject({ code: 0 });
      } finally {
        await redis.stop();
      }
    },
    120_000,
  );
});
