import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { EmlApiClient } from '../../src/index.js';
import { thrownBy } from '../helpers/async.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { SUBCOMMANDS } from '../../src/cli/run-cli.js';
import { GROUP_SUBCOMMANDS } from '../../src/cli/commands/group-command.js';
import { QUEUE_SUBCOMMANDS } from '../../src/cli/commands/queue-command.js';

// What a newcomer's first mistakes on the command line get: the nearest command, subcommand or flag,
// and errors that name the flag to change, never an option of the code.

const message = fileURLToPath(new URL('../fixtures/cli/message.eml', import.meta.url));
const env = { EML_API_URL: 'https://api.example.test', EML_API_KEY: 'k' };

async function usageError(argv: string[], withEnv: Record<string, string> = env): Promise<string> {
  const run = await runCliCapturing(argv, { env: withEnv });
  expect(run, argv.join(' ')).toMatchObject({ code: 2, stdout: '' });
  expect(run.stderr.split('\n'), argv.join(' ')).toHaveLength(2);
  return run.stderr.trimEnd();
}

describe('mistakes on the command line', () => {
  it('are checked against the subcommands the commands have', () => {
    expect(SUBCOMMANDS).toEqual({
      group: Object.keys(GROUP_SUBCOMMANDS),
      inbox: ['list', 'clear'],
      queue: Object.keys(QUEUE_SUBCOMMANDS),
    });
  });

  it('suggest the command, subcommand or flag meant', async () => {
    expect(await usageError(['sned', message])).toBe(
      'eml-api: unknown command "sned"; did you mean "send"? (see "eml-api --help")',
    );
    expect(await usageError(['group', 'ad', 'newsletter', 'ann@example.test'])).toBe(
      'eml-api: unknown group subcommand "ad"; did you mean "add"? (see "eml-api group --help")',
    );
    expect(await usageError(['queue', 'stats'])).toBe(
      'eml-api: unknown queue subcommand "stats"; did you mean "status"? (see "eml-api queue --help")',
    );
    expect(await usageError(['serve', '--prot', '8025'])).toBe(
      'eml-api: unknown option --prot; did you mean --port? (see "eml-api serve --help")',
    );
    expect(await usageError(['group', 'add', 'newsletter', 'people.csv', '--batchsize', '10'])).toBe(
      'eml-api: unknown option --batchsize; did you mean --batch-size? (see "eml-api group add --help")',
    );
    expect(await usageError(['relay', '--allow-insecure'])).toBe(
      'eml-api: unknown option --allow-insecure; did you mean --allow-insecure-http? (see "eml-api relay --help")',
    );
    expect(await usageError(['queue', 'status', '--redis-url', 'redis://127.0.0.1:6379'])).toBe(
      'eml-api: unknown option --redis-url; did you mean --redis? (see "eml-api queue status --help")',
    );
    expect(await usageError(['send', message, '--key-file', 'key.txt'])).toBe(
      'eml-api: unknown option --key-file; did you mean --key? (see "eml-api send --help")',
    );
    // Nothing near: the list is in the help.
    expect(await usageError(['launch'])).toBe('eml-api: unknown command "launch" (see "eml-api --help")');
    expect(await usageError(['send', '--zzzzzz', message])).toBe(
      'eml-api: unknown option --zzzzzz (see "eml-api send --help")',
    );
  });

  it('name the flag (or variable) to change, not the option of the code', async () => {
    const remote = { ...env, EML_API_URL: 'http://mail.example.test' };
    const insecure =
      '--url (or EML_API_URL): http:// to the non-loopback host mail.example.test would send the API key in clear text; use https://, or pass --allow-insecure-http for a trusted network';
    expect(await usageError(['send', message], remote)).toBe(`eml-api: ${insecure} (see "eml-api send --help")`);
    const listening = process.listenerCount('SIGTERM');
    expect(await usageError(['relay', '--port', '0'], remote)).toBe(
      `eml-api: ${insecure} (see "eml-api relay --help")`,
    );
    // It listened for SIGTERM before starting, and stopped listening when it could not start.
    expect(process.listenerCount('SIGTERM')).toBe(listening);
    expect(await usageError(['worker', '--redis', 'redis://127.0.0.1:1'], remote)).toBe(
      `eml-api: ${insecure} (see "eml-api worker --help")`,
    );
    const withKey = await usageError(['send', message, '--url', 'https://user:pw@api.example.test']);
    expect(withKey).toContain('--url (or EML_API_URL): it must not contain credentials; the API key goes in --key');
    expect(withKey).not.toContain('pw');
    expect(await usageError(['send', message], { ...env, EML_API_KEY: 'k\u00e9y' })).toMatch(
      /^eml-api: --key \(or EML_API_KEY\): it contains /,
    );
    for (const [argv, redisEnv] of [
      [['queue', 'status'], { REDIS_URL: 'http://127.0.0.1:6379' }],
      [['queue', 'retry', '--redis', 'localhost:6379'], {}],
    ] as const) {
      expect(await usageError([...argv], redisEnv)).toMatch(
        /^eml-api: --redis \(or REDIS_URL\): expected a redis:\/\/ or rediss:\/\/ URL/,
      );
    }
  });

  it('refuse a base URL that ends in /v1, saying to drop it', async () => {
    const err = thrownBy(() => new EmlApiClient({ apiKey: 'k', baseUrl: 'https://api.example.test/v1/' }));
    expect(err.code).toBe('ECONFIG');
    expect(err.message).toBe(
      'Invalid option baseUrl: it ends in /v1, which the client adds itself ({baseUrl}/v1/send/eml); drop it: https://api.example.test',
    );
    // A service under a path of its own is fine.
    expect(new EmlApiClient({ apiKey: 'k', baseUrl: 'https://example.test/mail/' }).settings.baseUrl.pathname).toBe(
      '/mail/',
    );
    expect(await usageError(['send', message, '--url', 'https://example.test/mail/v1'])).toBe(
      'eml-api: --url (or EML_API_URL): it ends in /v1, which the client adds itself ({baseUrl}/v1/send/eml); drop it: https://example.test/mail (see "eml-api send --help")',
    );
  });
});
