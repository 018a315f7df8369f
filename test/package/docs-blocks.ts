import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import ts from 'typescript';
import { ROOT, runIn } from './packed.js';

/**
 * The code blocks of README.md and docs/ as the docs-blocks test runs them against the packed
 * package. Each block runs in a project holding the packages of every `npm install` line before it
 * in a section that encloses it (a reader installs what the part they read names), the packed
 * package and Nodemailer always. The emulator stands in for `https://api.mail.example.com` and keys
 * written `...`, a Redis of the test for `redis://` URLs, port 0 for fixed ports.
 *
 * A block the checker cannot run says so, and why, in an HTML comment just before it (invisible on
 * GitHub):
 *
 * - `<!-- docs-check: skip: REASON -->`: not run (configuration of other systems, a diagram...);
 * - `<!-- docs-check: file NAME -->`: not run; its text is the file NAME the doc's commands use.
 *
 * What runs is checked: TypeScript must end without an error and print what its comments show
 * (`console.log(x); // 'Hi'`, `x; // '250 Queued as ...'`); every command must succeed (a long-running
 * one must start, then stop cleanly on SIGTERM); a `$ command` session must print lines of the shape
 * shown (numbers may differ).
 */
export interface DocBlock {
  /** The document, relative to the repository, e.g. `docs/cli.md`. */
  file: string;
  /** The line of the opening fence. */
  line: number;
  /** Its language, '' when none. */
  lang: string;
  code: string;
  marker?: { kind: 'skip'; reason: string } | { kind: 'file'; name: string };
  /** What the project it runs in installs (besides the package and Nodemailer). */
  installs: string[];
}

/** The languages the checker runs. */
const RUNS = new Set(['ts', 'typescript', 'js', 'javascript', 'sh', 'bash', 'shell', 'console']);

/** A block's kind of run, or undefined when it is not runnable and must be marked. */
export function kindOf(block: DocBlock): 'ts' | 'sh' | 'console' | undefined {
  if (!RUNS.has(block.lang) && !(block.lang === '' && /^\$ /m.test(block.code))) return undefined;
  if (block.lang === 'console' || (block.lang === '' && /^\$ /m.test(block.code))) return 'console';
  return ['sh', 'bash', 'shell'].includes(block.lang) ? 'sh' : 'ts';
}

/** The fenced blocks of a Markdown document, with their markers and the packages installed before them. */
export function docBlocks(file: string, text: string): DocBlock[] {
  const lines = text.split('\n');
  const blocks: DocBlock[] = [];
  // Enclosing sections, outermost first, with what their npm install lines installed so far.
  const sections: { level: number; installs: string[] }[] = [{ level: 0, installs: [] }];
  for (let i = 0; i < lines.length; i++) {
    const heading = /^(#{1,6}) /.exec(lines[i]!);
    if (heading) {
      const level = heading[1]!.length;
      while (sections.length > 1 && sections.at(-1)!.level >= level) sections.pop();
      sections.push({ level, installs: [] });
      continue;
    }
    const fence = /^(```|~~~)\s*([\w-]*)\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith(fence[1]!); i++) body.push(lines[i]!);
    const code = body.join('\n');
    let before = start - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const comment = /^<!-- docs-check: (.*?) -->$/.exec(lines[before]?.trim() ?? '')?.[1];
    const marker = comment === undefined ? undefined : parseMarker(comment, `${file}:${before + 1}`);
    const lang = fence[2]!.toLowerCase();
    if (['sh', 'bash', 'shell'].includes(lang)) {
      for (const command of code.split('\n')) {
        const installed = /^\s*npm (?:install|i) (.*?)(?:\s+#.*)?$/.exec(command)?.[1];
        if (installed === undefined) continue;
        const names = installed.split(/\s+/).filter((p) => p && !p.startsWith('-') && p !== 'nodemailer-eml-api');
        sections.at(-1)!.installs.push(...names);
      }
    }
    blocks.push({
      file,
      line: start + 1,
      lang,
      code,
      ...(marker ? { marker } : {}),
      installs: [...new Set(sections.flatMap((s) => s.installs))].sort(),
    });
  }
  return blocks;
}

function parseMarker(text: string, where: string): NonNullable<DocBlock['marker']> {
  const skip = /^skip: (.+)$/.exec(text);
  if (skip) return { kind: 'skip', reason: skip[1]! };
  const file = /^file (\S+)$/.exec(text);
  if (file) return { kind: 'file', name: file[1]! };
  throw new Error(`${where}: a docs-check marker is "skip: <reason>" or "file <name>", not "${text}"`);
}

/** What the blocks of one document share while they run, in order: a reader's shell session. */
export interface DocSession {
  /** The project of the block running. */
  project: string;
  /** The emulator standing in for the service. */
  service: { url: string; apiKey: string };
  /** A Redis of the test, when there is one. */
  redisUrl?: string;
  /** Exported variables, kept from block to block. */
  env: Record<string, string>;
  /** The key an `eml-api serve` of the document printed. */
  servedKey?: string;
  /** What `eml-api relay --hash-password` printed last. */
  passwordHash?: string;
}

/** The files commands of the docs name, made in each project before its blocks run. */
export async function writeFixtures(project: string, files: ReadonlyMap<string, string>): Promise<void> {
  const fixtures = join(ROOT, 'test', 'fixtures');
  await copyFile(join(fixtures, 'cli', 'message.eml'), join(project, 'message.eml'));
  await copyFile(join(fixtures, 'logo.png'), join(project, 'logo.png'));
  await copyFile(join(fixtures, 'relay', 'test-cert.pem'), join(project, 'relay.crt'));
  await copyFile(join(fixtures, 'relay', 'test-key.pem'), join(project, 'relay.key'));
  await writeFile(join(project, 'invoice.pdf'), '%PDF-1.4\n%\u00e2\u00e3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n');
  await writeFile(join(project, 'people.csv'), 'email,name,first_name\nann@example.com,Ann,Ann\n');
  const big = ['email,name,first_name', ...Array.from({ length: 30 }, (_, i) => `m${i}@example.com,M ${i},M`)];
  await writeFile(join(project, 'big.csv'), `${big.join('\n')}\nnot-an-address,Bad,Row\n`);
  for (const [name, text] of files) await writeFile(join(project, name), text);
}

/** Placeholders of the docs, as they read in a command or in code, and what stands in for them. */
function substitute(text: string, session: DocSession, ports: ReadonlyMap<string, string>): string {
  let out = text
    .replaceAll('https://api.mail.example.com', session.service.url)
    .replace(/\bEML_API_KEY=emu_\.\.\./g, `EML_API_KEY=${session.servedKey ?? session.service.apiKey}`)
    .replace(/\bEML_API_KEY=\.\.\./g, `EML_API_KEY=${session.service.apiKey}`)
    .replaceAll('$scrypt$ln=14,r=8,p=1$...', session.passwordHash ?? '$scrypt$ln=14,r=8,p=1$...')
    .replace(/(^|\s)\/etc\//g, '$1etc/')
    .replace(/<job>\.\.\./g, 'order-1042-confirmation');
  if (session.redisUrl) out = out.replace(/redis:\/\/[^\s'",]+/g, session.redisUrl);
  for (const [from, to] of ports) out = out.replace(new RegExp(`(?<=:)${from}\\b`, 'g'), to);
  return out;
}

/** Commands that run until stopped, and the line that says each is ready. */
function longRunning(command: string): RegExp | undefined {
  const cli = /(?:^|[\s;|&])(?:\S*\/)?(?:eml-api|nodemailer-eml-api) (serve|relay|worker|queue watch)\b/.exec(command);
  if (!cli) return undefined;
  if (/--help|--hash-password|--key-login|--count/.test(command)) return undefined;
  return {
    serve: /Try: /,
    relay: /SMTP relay listening on/,
    worker: /Worker sending from queue/,
    'queue watch': /\d{4}-\d\d-\d\dT[\d:]+Z\s|"queue":/,
  }[cli[1] as 'serve' | 'relay' | 'worker' | 'queue watch'];
}

/** The shell commands of a block: lines joined at `\`, without their comments, blank lines left out. */
function commandsOf(code: string): string[] {
  return code
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .map((line) => withoutComment(line).trim())
    .filter((line) => line !== '');
}

/** A shell line without its comment: from a `#` outside quotes that starts a word. */
function withoutComment(line: string): string {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]!))) {
      return line.slice(0, i);
    }
  }
  return line;
}

/** Environment of a command: the session's variables over this process's, without the service's and Redis's. */
function environment(session: DocSession): Record<string, string | undefined> {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !/^(EML_API_|REDIS_)/.test(name)),
  );
  return {
    ...inherited,
    ...session.env,
    PATH: `${join(session.project, 'node_modules', '.bin')}:${process.env.PATH}`,
    npm_config_yes: 'false',
  };
}

/** A command started to run until stopped. */
interface Background {
  command: string;
  child: ReturnType<typeof spawn>;
  output: () => string;
  closed: Promise<[number | null, NodeJS.Signals | null]>;
  /** Resolves once `done(output)` holds, the command ended, or `ms` passed. */
  settled(done: (output: string) => boolean, ms: number): Promise<void>;
}

function startInBackground(command: string, session: DocSession): Background {
  // Its own process group: npx, the shell and the command stop together. Variables set before the
  // command (EML_API_KEY=... eml-api relay) stay before exec.
  const [, assignments, rest] = /^((?:\w+=\S*\s+)*)(.*)$/s.exec(command)!;
  const child = spawn('bash', ['-c', `${assignments}exec ${rest}`], {
    cwd: session.project,
    env: environment(session),
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (output += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (output += s));
  const closed = once(child, 'close') as Background['closed'];
  return {
    command,
    child,
    output: () => output,
    closed,
    async settled(done, ms) {
      let timer: NodeJS.Timeout | undefined;
      let check = (): void => undefined;
      const seen = new Promise<void>((resolve) => {
        check = () => {
          if (done(output)) resolve();
        };
        child.stdout.on('data', check);
        child.stderr.on('data', check);
        check();
      });
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
      await Promise.race([seen, closed, late]);
      clearTimeout(timer);
      child.stdout.off('data', check);
      child.stderr.off('data', check);
    },
  };
}

/** Stops commands started in the background and says which did not end cleanly. */
async function stopAll(started: Background[]): Promise<string[]> {
  const problems: string[] = [];
  for (const job of started.reverse()) {
    if (job.child.exitCode === null && job.child.signalCode === null) process.kill(-job.child.pid!, 'SIGTERM');
    const [code, signal] = await job.closed;
    if (code !== 0) problems.push(`"${job.command}" ended with ${code ?? signal} on SIGTERM:\n${job.output()}`);
  }
  return problems;
}

/** Runs a shell block line by line; resolves with what went wrong ('' when nothing did). */
export async function runShell(block: DocBlock, session: DocSession): Promise<string> {
  const started: Background[] = [];
  const ports = new Map<string, string>();
  const problems: string[] = [];
  try {
    for (const written of commandsOf(block.code)) {
      if (/^(npm|npx) (install|i|ci|run|test)\b/.test(written)) continue;
      // npx runs the project's own bin, as npx does, without npm in between.
      let command = substitute(written, session, ports).replace(
        /(^|[\s|;&])npx (eml-api|nodemailer-eml-api)\b/g,
        '$1$2',
      );
      const exported = /^export (.*)$/.exec(command)?.[1];
      if (exported !== undefined) {
        for (const [, name, value] of exported.matchAll(/(\w+)=("[^"]*"|'[^']*'|\S*)/g)) {
          session.env[name!] = value!.replace(/^["']|["']$/g, '');
        }
        continue;
      }
      const background = command.endsWith('&');
      if (background) command = command.slice(0, -1).trim();
      const ready = longRunning(command);
      if (ready || background) {
        const asked = new Map<string, string>();
        command = command.replace(/--(port|http-port) (\d+)/g, (_all, flag: string, port: string) => {
          asked.set(flag, port);
          return `--${flag} 0`;
        });
        // Without --port, serve and relay take their default port, which may be taken.
        if (/\b(serve|relay)\b/.test(command) && !asked.has('port')) command += ' --port 0';
        const job = startInBackground(command, session);
        started.push(job);
        const wanted = ready ?? /./;
        const needsHttp = asked.has('http-port');
        await job.settled((out) => wanted.test(out) && (!needsHttp || /Health and metrics on/.test(out)), 30_000);
        const out = job.output();
        if (!wanted.test(out)) {
          problems.push(`"${written}" did not start:\n${out}`);
          started.pop();
          if (job.child.exitCode === null) process.kill(-job.child.pid!, 'SIGKILL');
          break;
        }
        const listening = /listening on (?:http:\/\/)?[^\s:]+:(\d+)/.exec(out)?.[1];
        if (listening && asked.has('port')) ports.set(asked.get('port')!, listening);
        const http = /Health and metrics on http:\/\/[^\s:]+:(\d+)/.exec(out)?.[1];
        if (http && needsHttp) ports.set(asked.get('http-port')!, http);
        const served = /API key \(all scopes, plus plan\): (\S+)/.exec(out)?.[1];
        if (served) session.servedKey = served;
        continue;
      }
      for (const target of command.matchAll(/>\s*(\S+)/g))
        await mkdir(dirname(join(session.project, target[1]!)), { recursive: true });
      const run = await runIn(session.project, 'bash', ['-c', command], { env: environment(session) });
      // group check exits 3 when an address is not a member: an answer, not a failure.
      const allowed = /\bgroup check\b/.test(command) ? [0, 3] : [0];
      if (!allowed.includes(run.code ?? -1)) {
        problems.push(
          `"${written}" (run as "${command}") exited ${run.code ?? run.signal}:\n${run.stdout}${run.stderr}`,
        );
        break;
      }
      if (/--hash-password/.test(command)) session.passwordHash = run.stdout.trim();
      // `# prints $scrypt$...`: what the command prints, in the shape shown.
      const shown = /#\s*prints (\$\S+)/.exec(written)?.[1];
      if (shown && !shapeOf(shown, false).test(run.stdout.trim())) {
        problems.push(`"${written}" printed ${JSON.stringify(run.stdout.trim())}, not of the shape ${shown}`);
        break;
      }
    }
  } finally {
    problems.push(...(await stopAll(started)));
  }
  return problems.join('\n');
}

/** Runs a `$ command` session: each command's first lines must have the shape of those shown. */
export async function runConsole(block: DocBlock, session: DocSession): Promise<string> {
  const steps: { command: string; shown: string[] }[] = [];
  for (const line of block.code.split('\n')) {
    if (line.startsWith('$ ')) steps.push({ command: line.slice(2), shown: [] });
    else if (line.trim() !== '') steps.at(-1)?.shown.push(line);
  }
  for (const { command: written, shown } of steps) {
    const command = substitute(written, session, new Map());
    const job = startInBackground(command, session);
    const lines = () => job.output().split('\n').filter(Boolean);
    await job.settled(() => lines().length >= shown.length, 30_000);
    const printed = lines();
    const problems = await stopAll([job]);
    const unlike = shown.filter((expected, i) => !shapeOf(expected, true).test(printed[i] ?? ''));
    if (unlike.length > 0)
      problems.push(`"${written}" printed:\n${printed.join('\n')}\nnot of the shape of:\n${unlike.join('\n')}`);
    if (problems.length > 0) return problems.join('\n');
  }
  return '';
}

/**
 * A line shown in the docs as a pattern: `...` and `…` stand for anything; with `anyNumbers`, its
 * numbers for any numbers (a sample of a live counter) and its spaces for any spaces.
 */
function shapeOf(shown: string, anyNumbers: boolean): RegExp {
  let pattern = shown
    .trim()
    .split(/\.\.\.|…/)
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  if (anyNumbers) pattern = pattern.replace(/\d+(?:\\\.\d+)?/g, '\\d+(?:\\.\\d+)?').replace(/ +/g, '\\s+');
  return new RegExp(`^${pattern}$`);
}

/**
 * What the docs' code uses without making it, as the text around a fragment gives it: the
 * service's URL and key, a message's fields, a transporter.
 */
const GIVEN: Record<string, string> = {
  apiKey: 'const apiKey = process.env.EML_API_KEY!;',
  baseUrl: 'const baseUrl = process.env.EML_API_URL!;',
  from: "const from = 'shop@example.com';",
  to: "const to = 'ann@example.net';",
  subject: "const subject = 'Hi';",
  html: "const html = '<p>Hi</p>';",
  text: "const text = 'Hi';",
  textContent: "const textContent = { html: '<p>Hi {{first_name}}</p>', text: 'Hi {{first_name}}' };",
  tracking: 'const tracking = true;',
  images: 'const images: { name: string; data: string; mimeType: string }[] = [];',
  rawEml: "const rawEml = 'From: shop@example.com\\r\\nTo: ann@example.net\\r\\nSubject: Hi\\r\\n\\r\\nHello\\r\\n';",
  order: 'const order = { id: 1042 };',
  log: 'const log = { info: (...a: unknown[]) => console.log(...a), error: (...a: unknown[]) => console.error(...a) };',
  EmlApiTransport: "import { EmlApiTransport } from 'nodemailer-eml-api';",
  EmlApiClient: "import { EmlApiClient } from 'nodemailer-eml-api';",
  EmlApiQueueTransport: "import { EmlApiQueueTransport } from 'nodemailer-eml-api/queue';",
  startEmulator: "import { startEmulator } from 'nodemailer-eml-api/emulator';",
  transporter: [
    "import __nodemailer from 'nodemailer';",
    "import { EmlApiTransport as __EmlApiTransport } from 'nodemailer-eml-api';",
    'const transporter = __nodemailer.createTransport(new __EmlApiTransport({ apiKey: process.env.EML_API_KEY!, baseUrl: process.env.EML_API_URL! }));',
  ].join('\n'),
};

/** The output a line's comment shows: `'a' 'b'` (what console.log prints of two strings), `true`, `42`. */
function shownOutput(comment: string): string | undefined {
  const c = comment.trim();
  if (/^(true|false|-?\d+(\.\d+)?)$/.test(c)) return c;
  const strings = [...c.matchAll(/'((?:[^'\\]|\\.)*)'/g)].map((m) => m[1]!);
  if (strings.length === 0 || c.replace(/'((?:[^'\\]|\\.)*)'/g, '').trim() !== '') return undefined;
  return strings.join(' ');
}

/** Names a TypeScript block declares at its top level. */
function declaredNames(code: string): Set<string> {
  const source = ts.createSourceFile('block.ts', code, ts.ScriptTarget.Latest, true);
  const names = new Set<string>();
  const bind = (name: ts.BindingName): void => {
    if (ts.isIdentifier(name)) names.add(name.text);
    else for (const element of name.elements) if (!ts.isOmittedExpression(element)) bind(element.name);
  };
  for (const statement of source.statements) {
    if (ts.isVariableStatement(statement)) statement.declarationList.declarations.forEach((d) => bind(d.name));
    else if ((ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement)) && statement.name)
      names.add(statement.name.text);
    else if (ts.isImportDeclaration(statement) && statement.importClause) {
      const clause = statement.importClause;
      if (clause.name) names.add(clause.name.text);
      const bindings = clause.namedBindings;
      if (bindings && ts.isNamespaceImport(bindings)) names.add(bindings.name.text);
      else if (bindings) bindings.elements.forEach((e) => names.add(e.name.text));
    }
  }
  return names;
}

/** Runs a TypeScript block; resolves with what went wrong ('' when nothing did). */
export async function runTypeScript(block: DocBlock, session: DocSession): Promise<string> {
  const expected: string[] = [];
  const code = substitute(block.code, session, new Map())
    .replace(/\bport: \d+/g, 'port: 0')
    .split('\n')
    .map((line) => {
      const commented = /^(\s*)(.*?);\s*\/\/(.*)$/.exec(line);
      const shown = commented ? shownOutput(commented[3]!) : undefined;
      if (!commented || shown === undefined || /^(const|let|var|import|export)\b/.test(commented[2]!)) return line;
      expected.push(shown);
      // An expression whose value the comment shows is printed to be compared.
      const statement = commented[2]!;
      return `${commented[1]}${statement.startsWith('console.log(') ? statement : `console.log(${statement})`};`;
    })
    .join('\n');
  const declared = declaredNames(code);
  const given = Object.entries(GIVEN)
    .filter(([name]) => !declared.has(name) && new RegExp(`\\b${name}\\b`).test(code))
    .map(([, declaration]) => declaration);
  // Imports go to the top of the module, the rest in a block under the names given.
  const source = ts.createSourceFile('block.ts', code, ts.ScriptTarget.Latest, true);
  const importNodes = source.statements.filter(ts.isImportDeclaration);
  const imports = importNodes.map((node) => node.getText(source));
  let body = code;
  for (const node of [...importNodes].reverse())
    body = body.slice(0, node.getStart(source)) + body.slice(node.getEnd());
  const DONE = '<<docs-check: the block ran to its end>>';
  const module = [...imports, ...given, '{', body, '}', `console.log(${JSON.stringify(DONE)});`, ''].join('\n');
  const name = `${block.file.replace(/\W+/g, '-')}-${block.line}.mts`;
  await mkdir(join(session.project, 'docs-check'), { recursive: true });
  await writeFile(join(session.project, 'docs-check', name), module);
  // TypeScript's own transpiler makes the module Node runs (what tsx or tsc would give it, without a loader to start).
  const { outputText } = ts.transpileModule(module, {
    fileName: name,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const js = name.replace(/\.mts$/, '.mjs');
  await writeFile(join(session.project, 'docs-check', js), outputText);

  // Code reads the service and Redis from the environment (process.env.EML_API_KEY!), set for it.
  const job = startInBackground(`node docs-check/${js}`, {
    ...session,
    env: {
      EML_API_URL: session.service.url,
      EML_API_KEY: session.service.apiKey,
      ...(session.redisUrl ? { REDIS_URL: session.redisUrl } : {}),
      ...session.env,
    },
  });
  await job.settled((out) => out.includes(DONE), 60_000);
  const ranToEnd = job.output().includes(DONE);
  // What it left running (a worker, a relay, a server) is stopped as a reader would stop it: SIGTERM.
  if (job.child.exitCode === null) process.kill(-job.child.pid!, 'SIGTERM');
  const [exitCode, signal] = await job.closed;
  const output = job.output();
  const problems: string[] = [];
  if (!ranToEnd || !(exitCode === 0 || (exitCode === null && signal === 'SIGTERM'))) {
    problems.push(`it ended with ${exitCode ?? signal}${ranToEnd ? ' after its end' : ' before its end'}`);
  }
  let from = 0;
  const printed = output.split('\n');
  for (const line of expected) {
    const at = printed.findIndex((p, i) => i >= from && shapeOf(line, false).test(p));
    if (at === -1) problems.push(`it did not print ${JSON.stringify(line)} (after line ${from + 1})`);
    else from = at + 1;
  }
  return problems.length === 0 ? '' : `${problems.join('\n')}\n--- ${name}:\n${module}\n--- output:\n${output}`;
}
