import type { CliIo } from '../cli-io.js';
import { groupAddCommand } from './group-add-command.js';
import { groupCheckCommand } from './group-check-command.js';
import { groupRemoveCommand } from './group-remove-command.js';
import { EXIT, UsageError } from '../lib/usage-error.js';

/** Help of `eml-api group`. */
export const GROUP_HELP = `Usage: eml-api group <subcommand> <group> ... [options]

Manages the members of a group (groups themselves are created in the
service's dashboard, or with "eml-api serve --group <id>" for the emulator).

Subcommands:
  add <group> <file.csv | - | address...>   add or update members (CSV with email, name, substitutions)
  remove <group> <address...>               remove members
  check <group> <address...>                check membership (exit code 3 when any is not a member)

Run "eml-api group <subcommand> --help" for its options.
Environment: EML_API_URL (base URL), EML_API_KEY (API key).
`;

/** The subcommands of `eml-api group`. */
export const GROUP_SUBCOMMANDS = {
  add: groupAddCommand,
  remove: groupRemoveCommand,
  check: groupCheckCommand,
} as const;

/** `eml-api group`: dispatches to add, remove or check. */
export async function groupCommand(args: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === '--help' || sub === '-h' || sub === 'help') {
    io.stdout.write(GROUP_HELP);
    return EXIT.ok;
  }
  if (sub === undefined) throw new UsageError('group needs a subcommand: add, remove or check');
  if (!Object.hasOwn(GROUP_SUBCOMMANDS, sub))
    throw new UsageError(`unknown group subcommand "${sub}"; expected add, remove or check`);
  return GROUP_SUBCOMMANDS[sub as keyof typeof GROUP_SUBCOMMANDS](rest, io);
}
