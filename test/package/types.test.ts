import { copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, TSC, installedProject, runIn } from './packed.js';
import { exampleModule, publicNames, tsdocExamples } from './tsdoc-examples.js';

/** The packages the types name (the outbox's peers; prom-client for the metrics registry's example). */
const TYPES_PROJECT = ['bullmq', 'ioredis', 'prom-client', '@types/node'];

/** The strict settings a user's project has, for tsc's command line. */
const STRICT = [
  '--noEmit',
  '--strict',
  '--esModuleInterop',
  '--target',
  'es2022',
  '--lib',
  'es2023',
  '--types',
  'node',
];

/** tsc in a project; resolves with its diagnostics ('' when it found nothing). */
async function tsc(project: string, args: string[]): Promise<string> {
  const { stdout, stderr } = await runIn(project, 'node', [TSC, ...STRICT, ...args], { timeout: 120_000 });
  return `${stdout}${stderr}`.trim();
}

/** Each failing example by the name it documents, with its errors. */
type Failing = Record<string, string[]>;

/**
 * The diagnostics of test/types/consumer.ts in each module setup users have, and of every `@example`
 * of the declarations (under nodenext, in the program that checks the declaration files too).
 */
async function compile(): Promise<{ consumer: Record<string, string>; examples: Failing; count: number }> {
  const project = await installedProject(TYPES_PROJECT);
  const dir = join(project, 'consumer');
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir);
  const source = join(ROOT, 'test', 'types', 'consumer.ts');
  for (const extension of ['ts', 'mts', 'cts']) await copyFile(source, join(dir, `consumer.${extension}`));

  const dist = join(project, 'node_modules', 'nodemailer-eml-api', 'dist');
  const examples = tsdocExamples(dist);
  const names = publicNames(dist);
  const examplesDir = join(project, 'examples');
  await rm(examplesDir, { recursive: true, force: true });
  await mkdir(examplesDir);
  const exampleFiles = await Promise.all(
    examples.map(async (example, i) => {
      const file = join('examples', `example-${i}.mts`);
      await writeFile(join(project, file), exampleModule(example, names));
      return file;
    }),
  );

  // nodenext also checks the declaration files themselves (and those of the peers they name): the
  // other setups skip that, as most projects do, which is 4 times faster.
  const setups: Record<string, string[]> = {
    // No exports map under node10: the subpath entry points resolve through typesVersions.
    'commonjs (node10)': [
      '--skipLibCheck',
      '--module',
      'commonjs',
      '--moduleResolution',
      'node10',
      'consumer/consumer.ts',
    ],
    node16: [
      '--skipLibCheck',
      '--module',
      'node16',
      '--moduleResolution',
      'node16',
      'consumer/consumer.mts',
      'consumer/consumer.cts',
    ],
    nodenext: [
      '--module',
      'nodenext',
      '--moduleResolution',
      'nodenext',
      'consumer/consumer.mts',
      'consumer/consumer.cts',
      ...exampleFiles,
    ],
    bundler: ['--skipLibCheck', '--module', 'esnext', '--moduleResolution', 'bundler', 'consumer/consumer.ts'],
  };
  // Side by side: each tsc is one thread.
  const outputs = Object.fromEntries(
    await Promise.all(Object.entries(setups).map(async ([name, args]) => [name, await tsc(project, args)] as const)),
  );
  const failing: Failing = {};
  const consumer: Record<string, string> = {};
  for (const [name, output] of Object.entries(outputs)) {
    // One diagnostic per line, with the indented lines that go on with its message.
    const diagnostics = output.split(/\n(?=\S)/).filter((d) => d !== '');
    const exampleOf = (d: string) => /^examples\/example-(\d+)\.mts/.exec(d);
    consumer[name] = diagnostics.filter((d) => !exampleOf(d)).join('\n');
    for (const diagnostic of diagnostics.filter((d) => exampleOf(d))) {
      const example = examples[Number(exampleOf(diagnostic)![1])]!;
      const key = `${example.symbol}: ${example.code.split('\n')[0]}`;
      (failing[key] ??= []).push(diagnostic.replace(/^.*?error /, ''));
    }
  }
  return { consumer, examples: failing, count: examples.length };
}

// The package's types as a strict TypeScript project sees them, read from the packed tarball's .d.ts
// files: test/types/consumer.ts (typed events, option types as narrow as the runtime, every entry
// point) in each module setup users have, and every @example of the declarations.
describe('the types of the packed package', () => {
  let compiled: ReturnType<typeof compile> | undefined;

  it('compile a user of every entry point under commonjs (node10 resolution), node16, nodenext and bundler', async () => {
    const { consumer } = await (compiled ??= compile());
    expect(consumer).toEqual({ 'commonjs (node10)': '', node16: '', nodenext: '', bundler: '' });
  }, 240_000);

  it('compile every @example of the declarations', async () => {
    const { examples, count } = await (compiled ??= compile());
    // Every public name has one (test/package/public-docs.test.ts), most members too.
    expect(count).toBeGreaterThan(150);
    expect(examples).toEqual({});
  }, 240_000);

  it('type-check for Nodemailer 6 users, group and tracking included; their @types/nodemailer types info as SMTP info', async () => {
    const project = await installedProject(['nodemailer@6.9.16', '@types/nodemailer@6.4.9', '@types/node']);
    // The documented pattern: @types/nodemailer 6 returns SMTP's SentMessageInfo for any custom
    // transport, so the richer info needs a cast.
    await writeFile(
      join(project, 'check6.mts'),
      `import nodemailer from 'nodemailer';
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
`,
    );
    expect(await tsc(project, ['--module', 'nodenext', '--moduleResolution', 'nodenext', 'check6.mts'])).toBe('');
  }, 120_000);
});
