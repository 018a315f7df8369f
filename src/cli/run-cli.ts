import { VERSION } from '../shared/version.js';
import {
  resolveCliIo,
  type CliIo,
  didYouMean,
  formatErrorDetails,
  formatErrorLine,
  inFlagWords,
  EXIT,
  isUsageError,
  stopListeningForSignals,
  UsageError,
} from './cli-io.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/** Help of `eml-api` itself. */
export const CLI_HELP = `Usage: eml-api <command> [options]

Commands:
  serve                                   run the local emulator of the email service
  inbox list | clear [--query search]     read or empty a running emulator's inbox
  relay                                   run an SMTP relay that forwards mail to the service
  send <file.eml | ->                     send an EML file (or standard input)
  group add <group> <file.csv | - | address...>
                                          add members (CSV with email, name, substitution columns)
  group remove <group> <address...>       remove members
  group check <group> <address...>        check membership
  worker                                  send the messages queued in Redis (the outbox) until stopped
  queue status                            the outbox: counts by state, failed messages and their errors
  queue retry [job...]                    put failed messages back in the outbox
  queue watch                             the outbox live: counts, send rate, oldest waiting job's age
  queue purge <job...> | --all            remove queued messages from Redis now (jobs and content)

Run "eml-api <command> --help" (or "eml-api group <subcommand> --help") for options.
Environment: EML_API_URL (base URL), EML_API_KEY (API key); --url and --key override them.
REDIS_URL (the outbox's Redis, for worker and queue, and relay --outbox; comma-separated URLs for a
Redis Cluster's nodes), REDIS_CLUSTER, REDIS_PASSWORD; --redis overrides REDIS_URL.

Exit codes:
  0  success
  1  the operation failed (service error, refused key, unreachable service, bad input file)
  2  wrong usage (unknown command or option, missing argument, URL or key)
  3  group check: at least one address is not a member
  4  relay or worker stopped when --grace ran out (messages handed back or given up: they are retried)

Errors print in one line on standard error; add --debug for the stack trace.
Options: -h, --help   show this help; -v, --version   print the version
`;

type Command = (args: string[], io: CliIo) => Promise<number>;

// Each command's module is loaded when it runs: `eml-api send` loads neither the relay nor the emulator.
const COMMANDS: Readonly<Record<string, () => Promise<Command>>> = {
  serve: async () => (await import('./commands/serve-command.js')).serveCommand,
  inbox: async () => (await import('./commands/inbox-command.js')).inboxCommand,
  relay: async () => (await import('./commands/relay-command.js')).relayCommand,
  send: async () => (await import('./commands/send-command.js')).sendCommand,
  group: async () => (await import('./commands/group-command.js')).groupCommand,
  worker: async () => (await import('./commands/worker-command.js')).workerCommand,
  queue: async () => (await import('./commands/queue-command.js')).queueCommand,
};

/** The subcommands of the commands that have them, for "did you mean" without loading the command's module. */
export const SUBCOMMANDS: Readonly<Record<string, readonly string[]>> = {
  group: ['add', 'remove', 'check'],
  inbox: ['list', 'clear'],
  queue: ['status', 'retry', 'watch', 'purge'],
};

/**
 * Runs the `eml-api` command line and returns its exit code (see {@link EXIT}); it never throws and never exits the
 * process. Streams and environment come from `io`, defaulting to the process's, so tests can run it in-process.
 *
 * @param argv the arguments after the program name, e.g. `['group', 'add', 'news', 'people.csv']`
 */
export async function runCli(argv: readonly string[], io: Partial<CliIo> = {}): Promise<number> {
  const cli = resolveCliIo(io);
  const { args, debug } = takeDebugFlag(argv);
  const [command, ...rest] = args;
  try {
    switch (command) {
      case undefined:
        cli.stderr.write(CLI_HELP);
        return EXIT.usage;
      case '--help':
      case '-h':
        cli.stdout.write(CLI_HELP);
        return EXIT.ok;
      case 'help':
        // "eml-api help group add" is "eml-api group add --help".
        if (rest.length === 0) {
          cli.stdout.write(CLI_HELP);
          return EXIT.ok;
        }
        return await runCli([...rest, '--help'], cli);
      case '--version':
      case '-v':
      case 'version':
        cli.stdout.write(`${VERSION}\n`);
        return EXIT.ok;
      default: {
        if (!Object.hasOwn(COMMANDS, command)) {
          throw new UsageError(
            `unknown command "${command}"${didYouMean(command, [...Object.keys(COMMANDS), 'help', 'version'])}`,
          );
        }
        const sub = rest[0];
        const subcommands = SUBCOMMANDS[command];
        if (subcommands && sub !== undefined && !sub.startsWith('-') && !subcommands.includes(sub)) {
          const near = didYouMean(sub, subcommands);
          if (near) throw new UsageError(`unknown ${command} subcommand "${sub}"${near}`);
        }
        const run = await COMMANDS[command]!();
        try {
          return await run(rest, cli);
        } finally {
          stopListeningForSignals();
        }
      }
    }
  } catch (err) {
    const usage = isUsageError(err);
    const topic = helpTopic(command, rest);
    // Usage and configuration errors speak of the command's flags (read from its help).
    const flags = usage || (err instanceof EmlApiError && err.code === 'ECONFIG') ? await flagsOf(topic) : [];
    const line = unknownOption(err, flags) ?? inFlagWords(formatErrorLine(err), flags);
    const hint = usage ? ` (see "eml-api ${topic.map((t) => `${t} `).join('')}--help")` : '';
    cli.stderr.write(`eml-api: ${line}${hint}\n`);
    if (debug) cli.stderr.write(`${formatErrorDetails(err)}\n`);
    return usage ? EXIT.usage : EXIT.failed;
  }
}

/** parseArgs's refusal of an unknown flag, with the nearest flag of the command. */
function unknownOption(err: unknown, flags: readonly string[]): string | undefined {
  if ((err as { code?: unknown } | null)?.code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return undefined;
  const flag = /'(-[^']*)'/.exec((err as Error).message)?.[1];
  return flag === undefined ? undefined : `unknown option ${flag}${didYouMean(flag, flags, '')}`;
}

/** The flags a command's help lists (`--port`, `-h`...). */
async function flagsOf(topic: readonly string[]): Promise<string[]> {
  let help = '';
  const capture = { write: (text: string) => (help += text) };
  await runCli([...topic, '--help'], { stdout: capture, stderr: capture, env: {} });
  return [...new Set(help.match(/(?<![\w-])--?[a-zA-Z][\w-]*/g) ?? [])];
}

/** Removes `--debug` wherever it appears before `--`. */
function takeDebugFlag(argv: readonly string[]): { args: string[]; debug: boolean } {
  const end = argv.indexOf('--');
  const head = end < 0 ? argv : argv.slice(0, end);
  const tail = end < 0 ? [] : argv.slice(end);
  const args = [...head.filter((a) => a !== '--debug'), ...tail];
  return { args, debug: args.length !== argv.length };
}

/** `['group', 'add']` for a group subcommand, `['send']` for a command, `[]` otherwise. */
function helpTopic(command: string | undefined, rest: string[]): string[] {
  if (command === undefined || !Object.hasOwn(COMMANDS, command)) return [];
  const subcommands = SUBCOMMANDS[command];
  if (subcommands && rest[0] !== undefined && subcommands.includes(rest[0])) return [command, rest[0]];
  return [command];
}
