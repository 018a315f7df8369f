import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/** An `@example` of the built declarations, and what it documents. */
export interface TsdocExample {
  /** The documented name, e.g. `EmlApiClient.settings`. */
  symbol: string;
  /** The declaration file it was read from. */
  file: string;
  code: string;
}

/**
 * Every `@example` in the `.d.ts` files of a built package (each text once): what users read in
 * their editor, so what must compile.
 */
export function tsdocExamples(dist: string): TsdocExample[] {
  const found = new Map<string, TsdocExample>();
  for (const file of readdirSync(dist).filter((f) => f.endsWith('.d.ts'))) {
    const source = ts.createSourceFile(file, readFileSync(join(dist, file), 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node, owner: string): void => {
      const name = (node as { name?: ts.Node }).name;
      const symbol = name && ts.isIdentifier(name) ? (owner ? `${owner}.${name.text}` : name.text) : owner;
      for (const tag of ts.getJSDocTags(node)) {
        if (tag.tagName.text !== 'example') continue;
        const code = ts.getTextOfJSDocComment(tag.comment)?.trim() ?? '';
        if (code && !found.has(code)) found.set(code, { symbol: symbol || '(unnamed)', file, code });
      }
      ts.forEachChild(node, (child) => visit(child, symbol));
    };
    visit(source, '');
  }
  return [...found.values()];
}

/** The names every entry point exports, each with the entry point that exports it first. */
export function publicNames(dist: string): Map<string, string> {
  const entries = ['index', 'emulator', 'queue', 'relay', 'protocol'];
  const files = entries.map((entry) => join(dist, `${entry}.d.ts`));
  // One program for the five, with no lib beyond ES: only the names each exports are read.
  const program = ts.createProgram(files, { noEmit: true, skipLibCheck: true, types: [], lib: ['lib.es2023.d.ts'] });
  const checker = program.getTypeChecker();
  const names = new Map<string, string>();
  entries.forEach((entry, i) => {
    const module = checker.getSymbolAtLocation(program.getSourceFile(files[i]!)!)!;
    for (const symbol of checker.getExportsOfModule(module)) {
      if (!names.has(symbol.name))
        names.set(symbol.name, entry === 'index' ? 'nodemailer-eml-api' : `nodemailer-eml-api/${entry}`);
    }
  });
  return names;
}

/**
 * The names examples use without making them, as a reader of the documented symbol has them at hand:
 * the objects the package makes, the usual variables of an app, and a test framework's `expect`.
 */
const GIVEN = (queueSide: boolean): Record<string, string> => ({
  apiKey: 'string',
  baseUrl: 'string',
  connection: 'string',
  eml: 'Buffer',
  raw: 'string',
  html: 'string',
  text: 'string',
  from: 'string',
  to: 'string',
  subject: 'string',
  textContent: '{ html: string; text: string }',
  pngBase64: 'string',
  url: 'string',
  request: '{ headers: Record<string, string | undefined> }',
  order: '{ id: number }',
  members: 'MemberInput[]',
  newsletter: 'GroupEmailInput',
  message: 'import("nodemailer").SendMailOptions',
  options: queueSide ? 'OutboxWorkerOptions' : 'EmlApiClientOptions',
  client: 'EmlApiClient',
  transport: queueSide ? 'EmlApiQueueTransport' : 'EmlApiTransport',
  transporter: queueSide
    ? 'import("nodemailer").Transporter<OutboxQueuedMessageInfo>'
    : 'import("nodemailer").Transporter<EmlApiSentMessageInfo>',
  info: 'OutboxQueuedMessageInfo',
  mail: 'NodemailerMail',
  job: 'OutboxJob',
  status: 'OutboxStatus',
  skipped: '{ queueId: string; reason: string }[]',
  admin: 'OutboxQueue',
  outbox: 'OutboxWorker',
  queue: 'OutboxQueue["queue"]',
  relay: 'EmlApiRelay',
  emu: 'Emulator',
  registry: 'MetricsRegistry',
  err: 'unknown',
  log: '{ info(...args: unknown[]): void; warn(...args: unknown[]): void; error(...args: unknown[]): void }',
  metrics: '{ increment(name: string): void }',
  alert: '(message: string) => void',
  retryLater: '() => void',
  resolve: '(info: EmlApiSentMessageInfo) => void',
  reject: '(err: Error) => void',
  pino: '() => EmlApiLogger',
  expect: 'any',
});

/**
 * A module for one example: the package's public names and the {@link GIVEN} ones it does not
 * import itself, its own imports, and its code in an async function (examples use `await`, and
 * may name what the module declares).
 */
export function exampleModule(example: TsdocExample, names: Map<string, string>): string {
  const lines = example.code.split('\n');
  const imports = lines.filter((line) => /^import\b/.test(line));
  const body = lines.filter((line) => !/^import\b/.test(line));
  const imported = new Set(
    imports.flatMap((line) => [...line.matchAll(/\b(\w+)\b(?=[^'"]*\bfrom\b)/g)].map((m) => m[1]!)),
  );
  const byEntry = new Map<string, string[]>();
  for (const [name, entry] of names) {
    if (imported.has(name)) continue;
    byEntry.set(entry, [...(byEntry.get(entry) ?? []), name]);
  }
  const given = GIVEN(/queue/.test(example.file) || /^(Outbox|OutboxWorker|EmlApiQueue)/.test(example.symbol));
  const head = [
    ...imports,
    ...[...byEntry].map(([entry, list]) => `import { ${list.join(', ')} } from '${entry}';`),
    ...Object.entries({ nodemailer: 'nodemailer', fs: 'node:fs', os: 'node:os' })
      .filter(([name]) => !imported.has(name))
      .map(([name, from]) => `import ${name} from '${from}';`),
    ...Object.entries(given)
      .filter(([name]) => !imported.has(name))
      .map(([name, type]) => `declare const ${name}: ${type};`),
  ];
  return `// ${example.symbol} (${example.file})\n${head.join('\n')}\nexport async function example(): Promise<void> {\n${body.join('\n')}\n}\n`;
}
