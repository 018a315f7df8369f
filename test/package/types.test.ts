import { copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, installedProject } from './packed.js';
import { exampleModule, publicNames, tsdocExamples } from './tsdoc-examples.js';

/** The packages the types name (the outbox's peers; prom-client for the metrics registry's example). */
const TYPES_PROJECT = ['bullmq', 'ioredis', 'prom-client', '@types/node'];

/** The strict settings of a user's project. */
const STRICT: ts.CompilerOptions = {
  noEmit: true,
  strict: true,
  esModuleInterop: true,
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2023.d.ts'],
  types: ['node'],
};

/**
 * Declaration files as parsed, by path and the way each program reads them, shared by the programs
 * of this file as `tsc --build` shares them between projects: each setup checks alike, parsing less.
 */
const parsed = new Map<string, ts.SourceFile | undefined>();
afterAll(() => parsed.clear());

/** The diagnostics of `files` in `project` under {@link STRICT} and `options`, as tsc prints them ('' for none). */
function typeCheck(project: string, options: ts.CompilerOptions, files: string[]): string {
  const settings = { ...STRICT, ...options };
  const host = ts.createCompilerHost(settings);
  host.getCurrentDirectory = () => project;
  const read = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, language, ...rest) => {
    if (!fileName.endsWith('.d.ts')) return read(fileName, language, ...rest);
    const { languageVersion, impliedNodeFormat } =
      typeof language === 'object' ? language : { languageVersion: language };
    const key = `${fileName} ${languageVersion} ${impliedNodeFormat}`;
    if (!parsed.has(key)) parsed.set(key, read(fileName, language, ...rest));
    return parsed.get(key);
  };
  const program = ts.createProgram(
    files.map((file) => join(project, file)),
    settings,
    host,
  );
  const shown = { getCanonicalFileName: (f: string) => f, getCurrentDirectory: () => project, getNewLine: () => '\n' };
  return ts.formatDiagnostics(ts.getPreEmitDiagnostics(program), shown).trim();
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
  const { CommonJS, Node16, NodeNext, ESNext } = ts.ModuleKind;
  const resolution = ts.ModuleResolutionKind;
  const consumerTs = ['consumer/consumer.ts'];
  const consumerMtsCts = ['consumer/consumer.mts', 'consumer/consumer.cts'];
  const outputs = {
    // No exports map under node10: the subpath entry points resolve through typesVersions.
    'commonjs (node10)': typeCheck(
      project,
      { skipLibCheck: true, module: CommonJS, moduleResolution: resolution.Node10 },
      consumerTs,
    ),
    node16: typeCheck(
      project,
      { skipLibCheck: true, module: Node16, moduleResolution: resolution.Node16 },
      consumerMtsCts,
    ),
    nodenext: typeCheck(project, { module: NodeNext, moduleResolution: resolution.NodeNext }, [
      ...consumerMtsCts,
      ...exampleFiles,
    ]),
    bundler: typeCheck(
      project,
      { skipLibCheck: true, module: ESNext, moduleResolution: resolution.Bundler },
      consumerTs,
    ),
  };
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
    // Every public name has one (test/repository/public-docs.test.ts), most members too.
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
    const nodenext = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext };
    expect(typeCheck(project, nodenext, ['check6.mts'])).toBe('');
  }, 120_000);
});
