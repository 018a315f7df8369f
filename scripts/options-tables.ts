// The options tables of docs/, written from the options interfaces' TSDoc (first sentence, @default) and, for a
// component on the options schema, each option's range from its rule,
// between `<!-- options:Interface -->` and `<!-- /options -->`, so that the docs follow the types.
//
//   npm run docs:options    rewrites the tables (commit them with the change)
//   test/repository/options-tables.test.ts fails when a table is stale
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import prettier from 'prettier';
import ts from 'typescript';
import { QUEUE_TRANSPORT_SCHEMA } from '../src/queue/queue-transport-options.js';
import { WORKER_SCHEMA } from '../src/queue/worker-options.js';
import { EMULATOR_SCHEMA } from '../src/emulator/emulator-options.js';
import { RELAY_SCHEMA } from '../src/relay/relay-options.js';
import { TRANSPORT_SCHEMA } from '../src/transport/eml-api-transport.js';
import type { OptionRule } from '../src/shared/option-schema.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The tables: the interface, where it is declared, and the docs page that shows it. */
export const OPTIONS_TABLES: {
  name: string;
  source: string;
  doc: string;
  schema?: Readonly<Record<string, OptionRule>>;
}[] = [
  {
    name: 'EmlApiTransportOptions',
    source: 'src/transport/eml-api-transport.ts',
    doc: 'docs/transport-and-client.md',
    schema: TRANSPORT_SCHEMA,
  },
  {
    name: 'EmlApiQueueTransportOptions',
    source: 'src/queue/queue-transport-options.ts',
    doc: 'docs/outbox.md',
    schema: QUEUE_TRANSPORT_SCHEMA,
  },
  { name: 'OutboxWorkerOptions', source: 'src/queue/worker-options.ts', doc: 'docs/outbox.md', schema: WORKER_SCHEMA },
  { name: 'EmlApiRelayOptions', source: 'src/relay/relay-options.ts', doc: 'docs/relay.md', schema: RELAY_SCHEMA },
  {
    name: 'EmulatorOptions',
    source: 'src/emulator/emulator-options.ts',
    doc: 'docs/emulator.md',
    schema: EMULATOR_SCHEMA,
  },
];

/** One program for every table: building it is most of the work. */
function program(): ts.Program {
  return ts.createProgram(
    OPTIONS_TABLES.map((t) => join(ROOT, t.source)),
    {
      strict: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      noEmit: true,
    },
  );
}

/** One row per option: own options first, then inherited ones, in declaration order. */
function rows(
  program: ts.Program,
  name: string,
  source: string,
  schema?: Readonly<Record<string, OptionRule>>,
): string[] {
  const checker = program.getTypeChecker();
  let declaration: ts.InterfaceDeclaration | undefined;
  ts.forEachChild(program.getSourceFile(join(ROOT, source))!, (node) => {
    if (ts.isInterfaceDeclaration(node) && node.name.text === name) declaration = node;
  });
  if (!declaration) throw new Error(`options-tables: no interface ${name} in ${source}`);
  return checker
    .getTypeAtLocation(declaration)
    .getProperties()
    .map((property) => {
      const doc = ts.displayPartsToString(property.getDocumentationComment(checker)).replace(/\s+/g, ' ').trim();
      const tag = property.getJsDocTags(checker).find((t) => t.name === 'default');
      const optional = (property.flags & ts.SymbolFlags.Optional) !== 0;
      const fallback = tag
        ? ts.displayPartsToString(tag.text).replace(/\s+/g, ' ').trim()
        : optional
          ? 'none'
          : 'required';
      const range = schema ? ` ${cell(schema[property.name]!.range)} |` : '';
      return `| \`${property.name}\` |${range} ${cell(literal(fallback))} | ${cell(firstSentence(doc))} |`;
    });
}

/** Up to the first full stop that ends a sentence (not the one of "e.g.", "i.e." or "..."). */
function firstSentence(text: string): string {
  const end = /(?<!\b(?:e\.g|i\.e))(?<!\.)\.(?=\s|$)/.exec(text);
  return end ? text.slice(0, end.index + 1) : text;
}

/** A default that starts with a literal (`5`, `'bull'`, `false`, `{ ... }`, `[ ... ]`) shows it as code. */
function literal(text: string): string {
  if (text.startsWith('{') || text.startsWith('[')) {
    let depth = 0;
    for (let i = 0; i < text.length; i++) {
      depth += '{['.includes(text[i]!) ? 1 : ']}'.includes(text[i]!) ? -1 : 0;
      if (depth === 0) return `\`${text.slice(0, i + 1)}\`${text.slice(i + 1)}`;
    }
  }
  return text.replace(/^('[^']*'|\d+|true|false|undefined)(?=\s|,|$)/, '`$1`');
}

function cell(text: string): string {
  return text.replace(/\{@link (\w+)\}/g, '`$1`').replace(/\|/g, '\\|');
}

/** Every docs page with its tables written anew, formatted as `npm run format` leaves it. */
export async function renderOptionsTables(): Promise<Map<string, { before: string; after: string }>> {
  const pages = new Map<string, { before: string; after: string }>();
  const shared = program();
  for (const { name, source, doc, schema } of OPTIONS_TABLES) {
    const path = join(ROOT, doc);
    const page = pages.get(path) ?? { before: await readFile(path, 'utf8'), after: '' };
    const text = page.after || page.before;
    const open = `<!-- options:${name} -->`;
    const start = text.indexOf(open);
    const end = text.indexOf('<!-- /options -->', start);
    if (start < 0 || end < 0) throw new Error(`options-tables: ${doc} has no ${open} ... <!-- /options --> markers`);
    const head = schema
      ? ['| option | range | default | meaning |', '| --- | --- | --- | --- |']
      : ['| option | default | meaning |', '| --- | --- | --- |'];
    const table = [...head, ...rows(shared, name, source, schema)].join('\n');
    page.after = `${text.slice(0, start + open.length)}\n\n${table}\n\n${text.slice(end)}`;
    pages.set(path, page);
  }
  const config = await prettier.resolveConfig(join(ROOT, 'docs', 'x.md'));
  for (const page of pages.values()) page.after = await prettier.format(page.after, { ...config, parser: 'markdown' });
  return pages;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const [path, { before, after }] of await renderOptionsTables()) {
    if (before !== after) await writeFile(path, after);
    console.log(`${path.slice(ROOT.length)}: ${before === after ? 'unchanged' : 'written'}`);
  }
}
