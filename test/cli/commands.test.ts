import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type CliIo, EXIT } from '../../src/cli/cli-io.js';
import { renderProgressBar } from '../../src/cli/commands/group-command.js';
import { runCli } from '../../src/cli/run-cli.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { nodeArgs } from '../helpers/compiled.js';

/**
 * The `eml-api` CLI run in-process through runCli() with captured streams,
 * against a real emulator; one test runs the entry point as a child process.
 */

const fixture = (name: string) => fileURLToPath(new URL(`../fixtures/cli/${name}`, import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

interface RunOptions {
  env?: Record<string, string | undefined>;
  stdin?: string | Buffer;
  stderrIsTTY?: boolean;
  signal?: AbortSignal;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
}

async function run(argv: string[], options: RunOptions = {}): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    stdout: {
      write: (s: string) => {
        stdout += s;
        options.onStdout?.(stdout);
        return true;
      },
    },
    stderr: {
      write: (s: string) => {
        stderr += s;
        options.onStderr?.(s);
        return true;
      },
      ...(options.stderrIsTTY ? { isTTY: true } : {}),
    },
    stdin: Readable.from(options.stdin === undefined ? [] : [Buffer.from(options.stdin)]),
    env: options.env ?? {},
    ...(options.signal ? { signal: options.signal } : {}),
  };
  const code = await runCli(argv, io);
  return { code, stdout, stderr };
}

/** Output lines without the final newline. */
const lines = (text: string) => text.split('\n').filter((l) => l !== '');

let emu: Emulator;
let env: Record<string, string>;

beforeAll(async () => {
  emu = await startEmulator({ groups: ['newsletter'] });
  env = { EML_API_URL: emu.url, EML_API_KEY: emu.apiKey };
});

afterAll(async () => {
  await emu.close();
});

beforeEach(() => {
  emu.reset();
});

describe('group add', () => {
  it('imports a CSV file with a BOM, CRLF, quoted names with commas and a substitution column', async () => {
    const r = await run(['group', 'add', 'newsletter', fixture('members.csv')], { env });
    expect(r).toEqual({ code: 0, stdout: 'added 3, skipped 0 (1 batch) to group "newsletter"\n', stderr: '' });
    expect(emu.members('newsletter')).toEqual([
      { email: 'ann@example.test', name: 'Doe, Ann', substitutions: { '{{first_name}}': 'Ann' } },
      { email: 'bob@example.test', name: 'Smith, Robert "Bob"', substitutions: { '{{first_name}}': 'Bob' } },
      { email: 'carol@example.test', name: undefined, substitutions: { '{{first_name}}': 'Carol' } },
    ]);
  });

  it('adds addresses given as arguments, in any Nodemailer form', async () => {
    const r = await run(['group', 'add', 'newsletter', 'ann@example.test', 'Bob Smith <bob@example.test>'], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('added 2, skipped 0 (1 batch) to group "newsletter"\n');
    expect(emu.members('newsletter')).toEqual([
      { email: 'ann@example.test', name: undefined, substitutions: {} },
      { email: 'bob@example.test', name: 'Bob Smith', substitutions: {} },
    ]);
  });

  it('reads CSV from standard input with "-"', async () => {
    const csv =
      'Email,Name,{{city}}\n\ndan@example.test,"Dan ""the man""",Paris\n"eve@example.test",Eve,"Berlin\nMitte"';
    const r = await run(['group', 'add', 'newsletter', '-'], { env, stdin: csv });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('added 2, skipped 0 (1 batch) to group "newsletter"\n');
    expect(emu.members('newsletter')).toEqual([
      { email: 'dan@example.test', name: 'Dan "the man"', substitutions: { '{{city}}': 'Paris' } },
      { email: 'eve@example.test', name: 'Eve', substitutions: { '{{city}}': 'Berlin\nMitte' } },
    ]);
  });

  it('sends a member given on several rows once, the last row, and lists the rows it replaced', async () => {
    const csv = 'email,name\nann@example.test,Ann\nbob@example.test,Bob\nANN@example.test,Ann Doe\n';
    const r = await run(['group', 'add', 'newsletter', '-'], { env, stdin: csv });
    expect(r.code).toBe(0);
    expect(lines(r.stdout)).toEqual([
      'duplicate stdin line 4 (ANN@example.test) replaces stdin line 2',
      'added 2, skipped 0 (1 batch) to group "newsletter"',
    ]);
    expect(emu.members('newsletter').map((m) => m.name)).toEqual(['Bob', 'Ann Doe']);
  });

  it('skips a row with an empty email cell, naming its line', async () => {
    const csv = 'email,name\n,Nobody\nann@example.test,Ann\n';
    const r = await run(['group', 'add', 'newsletter', '-', '--on-failure', 'SKIP'], { env, stdin: csv });
    expect(r.code).toBe(0);
    expect(lines(r.stdout)).toEqual([
      'skipped stdin line 2: the email cell is empty',
      'added 1, skipped 1 (1 batch) to group "newsletter"',
    ]);
  });

  it('reports skipped rows with their line, one per line, with --on-failure skip', async () => {
    const file = fixture('with-bad-row.csv');
    const r = await run(['group', 'add', 'newsletter', file, '--on-failure', 'skip'], { env });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(lines(r.stdout)).toEqual([
      `skipped ${file} line 3: "not-an-email" is not a valid email address`,
      'added 2, skipped 1 (1 batch) to group "newsletter"',
    ]);
    expect(emu.members('newsletter').map((m) => [m.email, m.name, m.substitutions])).toEqual([
      ['dan@example.test', 'Dan', { '{{city}}': 'Paris' }],
      ['eve@example.test', 'Eve, Jr.', { '{{city}}': 'Berlin' }],
    ]);
  });

  it('adds nothing and exits 1 when a row is bad in abort mode (the default)', async () => {
    const file = fixture('with-bad-row.csv');
    const r = await run(['group', 'add', 'newsletter', file], { env });
    expect(r.code).toBe(EXIT.failed);
    expect(r.stdout).toBe('');
    expect(lines(r.stderr)).toEqual([
      `eml-api: ${file} line 3: "not-an-email" is not a valid email address; nothing was added (--on-failure abort; --on-failure skip adds the valid rows)`,
    ]);
    expect(emu.members('newsletter')).toEqual([]);
  });

  it('rejects a row with more cells than the header (an unquoted comma)', async () => {
    const csv = 'email,name\nann@example.test,Doe, Ann\nbob@example.test,Bob\n';
    const r = await run(['group', 'add', 'newsletter', '-', '--on-failure', 'skip'], { env, stdin: csv });
    expect(r.code).toBe(0);
    expect(lines(r.stdout)).toEqual([
      'skipped stdin line 2: 3 cells but the header has 2 (put a value that contains commas in double quotes)',
      'added 1, skipped 1 (1 batch) to group "newsletter"',
    ]);
  });

  it('imports 1,200 rows in 3 batches of at most 500, without drawing on a non-terminal stderr', async () => {
    const csv = ['email,first_name', ...Array.from({ length: 1200 }, (_, i) => `m${i}@example.test,M${i}`)].join('\n');
    const r = await run(['group', 'add', 'newsletter', '-', '--batch-size', '500'], { env, stdin: csv });
    expect(r).toEqual({ code: 0, stdout: 'added 1200, skipped 0 (3 batches) to group "newsletter"\n', stderr: '' });
    const members = emu.members('newsletter');
    expect(members).toHaveLength(1200);
    expect(members[1199]).toEqual({
      email: 'm1199@example.test',
      name: undefined,
      substitutions: { '{{first_name}}': 'M1199' },
    });
  });

  it('draws the progress bar on a terminal stderr, and not in CI', async () => {
    const csv = ['email', ...Array.from({ length: 30 }, (_, i) => `p${i}@example.test`)].join('\n');
    const args = ['group', 'add', 'newsletter', '-', '--batch-size', '10'];
    const tty = await run(args, { env, stdin: csv, stderrIsTTY: true });
    expect(tty.code).toBe(0);
    expect(tty.stderr).toBe(
      `\r${renderProgressBar(0, 30)}\r${renderProgressBar(10, 30)}\r${renderProgressBar(20, 30)}\r${renderProgressBar(30, 30)}\n`,
    );
    expect(tty.stderr).toContain('[##############################] 30/30');
    expect(tty.stdout).toBe('added 30, skipped 0 (3 batches) to group "newsletter"\n');

    const ci = await run(args, { env: { ...env, CI: 'true' }, stdin: csv, stderrIsTTY: true });
    expect(ci.code).toBe(0);
    expect(ci.stderr).toBe('');
    // One batch needs no bar, even on a terminal.
    const short = await run(['group', 'add', 'newsletter', 'a@example.test'], { env, stderrIsTTY: true });
    expect(short.stderr).toBe('');
  });

  it('fails in one line for an unknown group, a CSV without an email column, or a missing file', async () => {
    const unknown = await run(['group', 'add', 'nope', 'ann@example.test'], { env });
    expect(unknown.code).toBe(1);
    expect(lines(unknown.stderr)).toHaveLength(1);
    expect(unknown.stderr).toMatch(/^eml-api: .*404 group_not_found.*\[EAPI\]\n$/);

    const noEmail = await run(['group', 'add', 'newsletter', '-'], { env, stdin: 'mail;name\nann@example.test;Ann\n' });
    expect(noEmail.code).toBe(1);
    expect(noEmail.stderr).toBe(
      'eml-api: stdin: no "email" column in the header row (found "mail;name"); columns must be separated by commas\n',
    );

    const badColumn = await run(['group', 'add', 'newsletter', '-'], {
      env,
      stdin: 'email,First Name\na@example.test,A\n',
    });
    expect(badColumn.code).toBe(1);
    expect(badColumn.stderr).toBe(
      'eml-api: stdin: column "First Name" is not a valid substitution key (letters, digits, "_", "-" or "." only)\n',
    );

    const missing = await run(['group', 'add', 'newsletter', 'no-such-file.csv'], { env });
    expect(missing).toEqual({ code: 1, stdout: '', stderr: 'eml-api: cannot read "no-such-file.csv": no such file\n' });
    expect(emu.members('newsletter')).toEqual([]);
  });

  it('refuses wrong options with exit code 2', async () => {
    for (const args of [
      ['group', 'add', 'newsletter', 'a@example.test', '--batch-size', '0'],
      ['group', 'add', 'newsletter', 'a@example.test', '--on-failure', 'maybe'],
      ['group', 'add', 'newsletter'],
      ['group', 'add', 'newsletter', 'people.csv', 'a@example.test'],
      ['group', 'add', 'newsletter', 'a@example.test', '--bogus'],
    ]) {
      const r = await run(args, { env });
      expect(r.code, args.join(' ')).toBe(EXIT.usage);
      expect(lines(r.stderr), args.join(' ')).toHaveLength(1);
      expect(r.stderr).toContain('(see "eml-api group add --help")');
    }
  });
});

describe('group check and remove', () => {
  beforeEach(async () => {
    await run(['group', 'add', 'newsletter', 'ann@example.test', 'bob@example.test'], { env });
  });

  it('check exits 0 when every address is a member and 3 when one is not', async () => {
    const all = await run(['group', 'check', 'newsletter', 'ann@example.test', 'Bob <bob@example.test>'], { env });
    expect(all).toEqual({ code: 0, stdout: 'ann@example.test: member\nbob@example.test: member\n', stderr: '' });

    const some = await run(['group', 'check', 'newsletter', 'ann@example.test', 'zoe@example.test'], { env });
    expect(some).toEqual({
      code: EXIT.notMember,
      stdout: 'ann@example.test: member\nzoe@example.test: not a member\n',
      stderr: '',
    });
    expect(EXIT.notMember).toBe(3);
  });

  it('remove prints removed or not a member per address', async () => {
    const r = await run(['group', 'remove', 'newsletter', 'ann@example.test', 'zoe@example.test'], { env });
    expect(r).toEqual({ code: 0, stdout: 'ann@example.test: removed\nzoe@example.test: not a member\n', stderr: '' });
    expect(emu.members('newsletter').map((m) => m.email)).toEqual(['bob@example.test']);
  });

  it('refuses an invalid address before any request (exit 2)', async () => {
    const r = await run(['group', 'remove', 'newsletter', 'bob@example.test', 'not-an-address'], { env });
    expect(r.code).toBe(EXIT.usage);
    expect(r.stderr).toBe(
      'eml-api: argument 2: "not-an-address" is not a valid email address (see "eml-api group remove --help")\n',
    );
    expect(emu.members('newsletter')).toHaveLength(2);
  });
});

describe('send', () => {
  it('sends an EML file', async () => {
    const r = await run(['send', fixture('message.eml')], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^202 Accepted id=\S+ messageId=<order-1@example\.test>\n$/);
    expect(emu.messages()).toHaveLength(1);
    expect(emu.mailbox('ann@example.test')).toHaveLength(1);
    expect(emu.mailbox('audit@example.test')).toHaveLength(1);
  });

  it('sends standard input with "-", configured by --url and --key', async () => {
    const eml = readFileSync(fixture('message.eml'));
    // Flags override the environment.
    const wrongEnv = { EML_API_URL: 'http://127.0.0.1:9', EML_API_KEY: 'wrong-key' };
    const r = await run(['send', '-', '--url', emu.url, '--key', emu.apiKey], { env: wrongEnv, stdin: eml });
    expect(r.code).toBe(0);
    expect(emu.messages()[0]?.subject).toBe('Your order');
  });
  it('says how to end standard input when it is a terminal', async () => {
    const eml = readFileSync(fixture('message.eml'));
    const tty = Object.assign(Readable.from([eml]), { isTTY: true });
    let stderr = '';
    const code = await runCli(['send', '-'], {
      stdout: { write: () => true },
      stderr: { write: (s: string) => ((stderr += s), true) },
      stdin: tty,
      env,
    });
    expect(code).toBe(0);
    expect(stderr).toBe('eml-api: reading the message from the terminal; end it with Ctrl-D on a line of its own\n');
    const piped = await run(['send', '-'], { env, stdin: eml });
    expect(piped).toMatchObject({ code: 0, stderr: '' });
  });

  it('sends a file an editor saved with a byte order mark, without it', async () => {
    const eml = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), readFileSync(fixture('message.eml'))]);
    const r = await run(['send', '-'], { env, stdin: eml });
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(emu.messages()[0]).toMatchObject({ subject: 'Your order', from: expect.stringContaining('@example.test') });
  });
});

describe('configuration, errors and exit codes', () => {
  it('exits 2 with one line when the URL or the key is missing', async () => {
    const noUrl = await run(['send', fixture('message.eml')], { env: { EML_API_KEY: emu.apiKey } });
    expect(noUrl).toEqual({
      code: 2,
      stdout: '',
      stderr: 'eml-api: no service URL: pass --url or set EML_API_URL (see "eml-api send --help")\n',
    });
    const noKey = await run(['group', 'check', 'newsletter', 'a@example.test'], { env: { EML_API_URL: emu.url } });
    expect(noKey.code).toBe(2);
    expect(lines(noKey.stderr)).toEqual([
      'eml-api: no API key: set EML_API_KEY (or pass --key) (see "eml-api group check --help")',
    ]);
    const badUrl = await run(['send', fixture('message.eml'), '--url', 'http://mail.example.com'], { env });
    expect(badUrl.code).toBe(2);
    expect(lines(badUrl.stderr)).toHaveLength(1);
    expect(badUrl.stderr).toContain('clear text');
  });

  it('exits 2 for an unknown command, subcommand or option', async () => {
    for (const args of [['launch'], ['group', 'list'], ['group'], ['send', '--nope', 'x.eml'], []]) {
      const r = await run(args, { env });
      expect(r.code, args.join(' ')).toBe(EXIT.usage);
    }
    const r = await run(['launch'], { env });
    expect(r.stderr).toBe('eml-api: unknown command "launch" (see "eml-api --help")\n');
  });

  it('exits 1 with one line naming the code when the key is refused, with no stack trace', async () => {
    const r = await run(['send', fixture('message.eml')], { env: { ...env, EML_API_KEY: 'wrong-key' } });
    expect(r.code).toBe(EXIT.failed);
    expect(r.stdout).toBe('');
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/^eml-api: .*refused the API key.*401.*\[EAUTH\]\n$/);
    expect(r.stderr).not.toContain('wrong-key');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('shows the stack trace with --debug', async () => {
    const r = await run(['--debug', 'group', 'check', 'newsletter', 'a@example.test'], {
      env: { ...env, EML_API_KEY: 'wrong-key' },
    });
    expect(r.code).toBe(EXIT.failed);
    expect(lines(r.stderr)[0]).toMatch(/^eml-api: .*\[EAUTH\]$/);
    expect(r.stderr).toMatch(/\n\s+at /);
    expect(r.stderr).toContain('EmlApiError');
  });

  it('prints help for every command and subcommand with exit code 0', async () => {
    const cases: [string[], string][] = [
      [['--help'], 'Usage: eml-api <command>'],
      [['help'], 'Usage: eml-api <command>'],
      [['serve', '--help'], 'Usage: eml-api serve'],
      [['send', '--help'], 'Usage: eml-api send'],
      [['send', '-h'], 'Usage: eml-api send'],
      [['group', '--help'], 'Usage: eml-api group <subcommand>'],
      [['group', 'add', '--help'], 'Usage: eml-api group add'],
      [['group', 'remove', '--help'], 'Usage: eml-api group remove'],
      [['group', 'check', '--help'], 'Usage: eml-api group check'],
      [['help', 'group', 'add'], 'Usage: eml-api group add'],
    ];
    for (const [args, start] of cases) {
      const r = await run(args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.stdout.startsWith(start), args.join(' ')).toBe(true);
      expect(r.stderr).toBe('');
    }
    const check = await run(['group', 'check', '--help']);
    expect(check.stdout).toContain('3 at least one is not');
    const version = await run(['--version']);
    expect(version.stdout).toMatch(/^\d+\.\d+\.\d+\n$/);
  });

  it('runs as a process through its entry point', { timeout: 90_000 }, () => {
    const child = spawnSync(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', 'group', '--help']), {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, EML_API_URL: '', EML_API_KEY: '' },
      timeout: 40_000,
    });
    expect(child.status).toBe(0);
    expect(child.stdout).toContain('Usage: eml-api group <subcommand>');

    const usage = spawnSync(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', 'launch']), {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 40_000,
    });
    expect(usage.status).toBe(2);
    expect(usage.stderr).toBe('eml-api: unknown command "launch" (see "eml-api --help")\n');
  });
});

describe('serve', () => {
  it('runs an emulator, prints its URL and a key that works, and stops on the signal', async () => {
    const stop = new AbortController();
    let announced!: (text: string) => void;
    const ready = new Promise<string>((resolve) => (announced = resolve));
    const serving = run(['serve', '--port', '0', '--group', 'team'], {
      signal: stop.signal,
      onStdout: (text) => {
        if (text.includes('Try:')) announced(text);
      },
    });
    const text = await ready;
    const url = /listening on (\S+)/.exec(text)?.[1];
    const key = /API key \(all scopes, plus plan\): (\S+)/.exec(text)?.[1];
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const serveEnv = { EML_API_URL: url, EML_API_KEY: key };
    expect((await run(['group', 'add', 'team', 'ann@example.test'], { env: serveEnv })).code).toBe(0);
    expect((await run(['group', 'check', 'team', 'ann@example.test'], { env: serveEnv })).code).toBe(0);
    stop.abort();
    expect((await serving).code).toBe(0);
  });

  it('on --host 0.0.0.0 warns that it is reachable from the network and prints a URL that works', async () => {
    const stop = new AbortController();
    let announced!: (text: string) => void;
    const ready = new Promise<string>((resolve) => (announced = resolve));
    let stderr = '';
    const serving = run(['serve', '--port', '0', '--host', '0.0.0.0'], {
      signal: stop.signal,
      onStdout: (text) => {
        if (text.includes('Try:')) announced(text);
      },
      onStderr: (text) => (stderr += text),
    });
    const text = await ready;
    expect(text).not.toContain('0.0.0.0');
    const url = /listening on (\S+)/.exec(text)?.[1];
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(stderr).toMatch(/warning: .*every network interface/i);
    expect(stderr).toContain('--allow-host');
    expect(stderr).toContain('--public-url');
    stop.abort();
    expect((await serving).code).toBe(0);
  });

  it('refuses a bad port with exit code 2', async () => {
    const r = await run(['serve', '--port', '70000']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('eml-api: --port: expected 0-65535, got "70000" (see "eml-api serve --help")\n');
  });
});

describe('text the service sent', () => {
  const HOSTILE = 'bad\x1b]0;pwned\x07 \x1b[2J\x1b[1;1H\rforged: all good\u202egnp.exe\x9b31m';
  let service: FakeService;
  beforeAll(async () => {
    service = await startFakeService();
  });
  afterAll(() => service.close());

  // eslint-disable-next-line no-control-regex -- the test looks for control characters
  const controls = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]/;

  it('is printed without its escape sequences, control and bidi characters, in errors', async () => {
    service.answer({ status: 400, body: { error: { code: 'invalid_eml', message: HOSTILE } } });
    const r = await run(['send', '-'], {
      env: { EML_API_URL: service.url, EML_API_KEY: 'k' },
      stdin: 'From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n',
    });
    expect(r.code).toBe(1);
    expect(r.stderr).not.toMatch(controls);
    // The window-title sequence is gone whole; the forged line stays on this one.
    expect(r.stderr).not.toContain('pwned');
    expect(r.stderr).toMatch(/bad .*forged: all good/);
    expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
  });

  it('is printed without its escape sequences, control and bidi characters, in skip reasons and sent ids', async () => {
    service.answer({ status: 200, body: { added: [], skipped: [{ email: 'a@x.test', reason: HOSTILE }] } });
    const added = await run(['group', 'add', 'news', 'a@x.test', '--on-failure', 'skip'], {
      env: { EML_API_URL: service.url, EML_API_KEY: 'k' },
    });
    expect(added.code).toBe(0);
    expect(added.stdout).not.toMatch(controls);
    expect(added.stdout.split('\n').filter(Boolean)).toHaveLength(2);
    service.answer({ status: 202, body: { id: HOSTILE, messageId: HOSTILE, recipients: 1 } });
    const sent = await run(['send', '-'], {
      env: { EML_API_URL: service.url, EML_API_KEY: 'k' },
      stdin: 'From: a@x.test\r\nTo: b@x.test\r\n\r\nhi\r\n',
    });
    expect(sent.code).toBe(0);
    expect(sent.stdout).not.toMatch(controls);
    expect(sent.stdout.split('\n').filter(Boolean)).toHaveLength(1);
  });
});

describe('inbox pointed at something that is not an emulator', () => {
  let service: FakeService;
  beforeAll(async () => {
    service = await startFakeService();
  });
  afterAll(() => service.close());

  it('says so, and clear deletes nothing there', async () => {
    const answers = [
      { status: 200, text: '<!doctype html><div id="app"></div>', headers: { 'content-type': 'text/html' } },
      { status: 200, body: { ok: true } },
    ];
    for (const answer of answers) {
      service.answer(answer);
      for (const action of ['list', 'clear']) {
        const before = service.requests.length;
        const r = await run(['inbox', action], { env: { EML_API_URL: service.url } });
        expect(r, action).toMatchObject({ code: 1, stdout: '' });
        expect(r.stderr, action).toMatch(
          /^eml-api: GET \/api\/v1\/(messages|info) answered 200 with .*, not the emulator's inspection API \(Mailpit's API v1\): is --url \(or EML_API_URL\) the URL eml-api serve printed\?\n$/,
        );
        expect(service.requests.slice(before).map((q) => q.method)).toEqual(['GET']);
      }
    }
  });

  it('at an https:// URL where it answers plain HTTP, says to use http://', async () => {
    const r = await run(['inbox', 'list'], { env: { EML_API_URL: service.url.replace(/^http:/, 'https:') } });
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expect(r.stderr).toMatch(
      /^eml-api: cannot reach the emulator at https:\/\/127\.0\.0\.1:\d+: it answered without TLS: use http:\/\/ \(ERR_SSL_\w+\)\n$/,
    );
  });
});
