import { execFile } from 'node:child_process';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };
import { startEmulator } from '../../src/emulator/index.js';
import { ROOT, binOf, installedProject, packedFiles, packedTarball } from './packed.js';

const run = promisify(execFile);

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
// Each part with only its own peers is test/package/peers.test.ts; entry points across each other,
// entries.test.ts; the types, types.test.ts.
// Each test may wait for the build and pack, or for an install (test/package/packed.ts).
describe('the packed package', { timeout: 120_000 }, () => {
  it('contains only what users need', async () => {
    const files = await packedFiles();
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
    // dist/ as packed: the pack builds it first when it is older than src/.
    await packedTarball();
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
        'OutboxProducer',
        'openOutboxQueue',
        'outboxJobId',
        'purgeOutbox',
        'readOutboxSnapshot',
        'readOutboxStatus',
        'retryFailedSends',
        'startOutboxWorker',
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
    const dir = await installedProject(['mailparser']);
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
    const dir = await installedProject(['mailparser']);
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
    // A project of its own: the test moves a file of the package away for a moment.
    const dir = await installedProject([], 'build threads');
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

  it('installs the eml-api command', async () => {
    const dir = await installedProject([]);
    const { stdout } = await run(binOf(dir), ['--version'], { cwd: dir });
    expect(stdout.trim()).toBe(pkg.version);
  });
});
