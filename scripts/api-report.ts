// The API report: every entry point's public surface, as API Extractor reads it from the built types,
// committed in etc/<entry>.api.md so that a change to the surface is a visible diff in review.
//
//   npm run api:check    fails when a report differs from the built types (CI runs it after the build)
//   npm run api:update   writes the reports anew; commit them with the change
//
// Both need `npm run build` first: they read dist/<entry>.d.ts, what users' compilers read.
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Extractor, ExtractorConfig, ExtractorLogLevel, type IConfigFile } from '@microsoft/api-extractor';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const update = process.argv.includes('--update');

/** Every entry point of the package's `exports` map ('.' is index), so a new one cannot go without a report. */
async function entryPoints(): Promise<string[]> {
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
  return Object.keys(pkg.exports)
    .filter((key) => key !== './package.json')
    .map((key) => (key === '.' ? 'index' : key.slice(2)));
}

function configOf(entry: string): IConfigFile {
  return {
    projectFolder: ROOT,
    mainEntryPointFilePath: `<projectFolder>/dist/${entry}.d.ts`,
    compiler: {
      // The built declarations alone, checked as a user's NodeNext project would (the peers' types from node_modules).
      overrideTsconfig: {
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2023'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          types: ['node'],
          skipLibCheck: true,
        },
        files: [`dist/${entry}.d.ts`],
      },
      skipLibCheck: true,
    },
    apiReport: {
      enabled: true,
      reportFileName: `${entry}.api.md`,
      reportFolder: '<projectFolder>/etc/',
      // Where a check writes what it found when it differs (gitignored): diff it against etc/.
      reportTempFolder: '<projectFolder>/.tmp/api-report/',
    },
    docModel: { enabled: false },
    dtsRollup: { enabled: false },
    tsdocMetadata: { enabled: false },
    newlineKind: 'lf',
    messages: {
      compilerMessageReporting: { default: { logLevel: ExtractorLogLevel.Error } },
      extractorMessageReporting: {
        default: { logLevel: ExtractorLogLevel.Warning },
        // The package has one release level (no @alpha/@beta/@public tags): every export is public.
        'ae-missing-release-tag': { logLevel: ExtractorLogLevel.None },
        // Member-by-member TSDoc and {@link}s across entry points are the editors' concern, not the surface's.
        'ae-undocumented': { logLevel: ExtractorLogLevel.None },
        'ae-unresolved-link': { logLevel: ExtractorLogLevel.None },
        // A public signature that names a type users cannot import: export it from the entry point.
        'ae-forgotten-export': { logLevel: ExtractorLogLevel.Error, addToApiReportFile: true },
      },
      // The report is about the surface; the TSDoc is written for editors (JSDoc-style @throws {Type}, @default).
      tsdocMessageReporting: { default: { logLevel: ExtractorLogLevel.None } },
    },
  };
}

/** The names a report declares as exported. */
function exportedNames(report: string): string[] {
  return [
    ...report.matchAll(
      /^export (?:declare )?(?:abstract )?(?:class|interface|type|const|function|enum|namespace) (\w+)/gm,
    ),
  ].map((m) => m[1]!);
}

/** The types a report's signatures name that its entry point does not export (API Extractor's ae-forgotten-export). */
function forgottenNames(report: string): string[] {
  return [...report.matchAll(/\(ae-forgotten-export\) The symbol "(\w+)"/g)].map((m) => m[1]!);
}

let failed = 0;
await mkdir(join(ROOT, 'etc'), { recursive: true });
const entries = await entryPoints();
const reports = new Map<string, string>();
for (const entry of entries) {
  const dts = join(ROOT, 'dist', `${entry}.d.ts`);
  if (!existsSync(dts)) {
    console.error(`api-report: ${dts} is missing: run npm run build first`);
    process.exit(1);
  }
  const config = ExtractorConfig.prepare({
    configObject: configOf(entry),
    configObjectFullPath: undefined,
    packageJsonFullPath: join(ROOT, 'package.json'),
  });
  const result = Extractor.invoke(config, {
    localBuild: update,
    showVerboseMessages: false,
    // A check prints what changed, so that CI's log shows the diff.
    printApiReportDiff: !update,
    messageCallback: (message) => {
      // The version line is noise; the one line of a check that matters is said below, with the command that fixes it.
      if (
        message.messageId === 'console-preamble' ||
        message.messageId === 'console-api-report-not-copied' ||
        message.messageId === 'console-api-report-copied'
      ) {
        message.handled = true;
      }
    },
  });
  const report = `etc/${entry}.api.md`;
  if (update) {
    console.log(`${report}: ${result.apiReportChanged ? 'updated' : 'unchanged'}`);
  } else if (result.apiReportChanged) {
    console.error(
      `${report}: the public surface of ${entry === 'index' ? 'nodemailer-eml-api' : `nodemailer-eml-api/${entry}`} ` +
        `changed (see git diff --no-index ${report} .tmp/api-report/${entry}.api.md); ` +
        'if that is intended, run npm run api:update and commit the report',
    );
  }
  if (!result.succeeded || (!update && result.apiReportChanged)) failed++;
  reports.set(entry, await readFile(join(ROOT, '.tmp', 'api-report', `${entry}.api.md`), 'utf8'));
}
// Every entry point exports every type its signatures name (re-exporting another entry's), so that
// users import what they need to type their code from the entry point they use.
for (const [entry, report] of reports) {
  const unnamed = [...new Set(forgottenNames(report))];
  if (unnamed.length > 0) {
    console.error(
      `etc/${entry}.api.md: the public signatures name ${unnamed.join(', ')}, which this entry point does not export: ` +
        `export ${unnamed.length > 1 ? 'them' : 'it'} (or stop naming ${unnamed.length > 1 ? 'them' : 'it'})`,
    );
    failed++;
  }
}
const names = new Set([...reports.values()].flatMap(exportedNames));
console.log(`api-report: ${names.size} public names over ${reports.size} entry points`);
if (failed > 0) {
  console.error(`api-report: ${failed} entry point(s) failed`);
  process.exit(1);
}
console.log(update ? 'api-report: reports written' : 'api-report: every report matches the built types');
