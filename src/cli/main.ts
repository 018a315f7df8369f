#!/usr/bin/env node
import { EmlApiError } from '../errors.js';
import { VERSION } from '../version.js';
import { sendCommand } from './send-command.js';
import { serveCommand } from './serve-command.js';
import { EXIT, UsageError } from './usage-error.js';

const HELP = `Usage: eml-api <command> [options]

Commands:
  serve     run the local emulator of the email service
  send      send an EML file (or standard input) through the service

Run "eml-api <command> --help" for a command's options.
Environment: EML_API_URL (base URL), EML_API_KEY (API key).
Exit codes: 0 success, 1 the operation failed, 2 wrong usage.
Add --debug to see stack traces.
`;

/** Runs the CLI and returns its exit code. */
export async function runCli(argv: string[]): Promise<number> {
  const debug = argv.includes('--debug');
  const args = argv.filter((a) => a !== '--debug');
  const [command, ...rest] = args;
  try {
    switch (command) {
      case 'serve':
        return await serveCommand(rest, process.stdout);
      case 'send':
        return await sendCommand(rest, process.stdout, process.env, process.stdin);
      case '--version':
      case '-v':
        process.stdout.write(`${VERSION}\n`);
        return EXIT.ok;
      case undefined:
      case '--help':
      case '-h':
      case 'help':
        process.stdout.write(HELP);
        return command === undefined ? EXIT.usage : EXIT.ok;
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } catch (err) {
    if (debug) console.error(err);
    const isUsage = err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS');
    const message = err instanceof Error ? err.message : String(err);
    const code = err instanceof EmlApiError ? ` [${err.code}${err.responseCode ? ` ${err.responseCode}` : ''}]` : '';
    process.stderr.write(`eml-api: ${message}${code}\n`);
    if (isUsage) {
      const sub = command === 'send' || command === 'serve' ? `${command} ` : '';
      process.stderr.write(`Run "eml-api ${sub}--help" for usage.\n`);
      return EXIT.usage;
    }
    return EXIT.failed;
  }
}

runCli(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err);
    process.exitCode = EXIT.failed;
  },
);
