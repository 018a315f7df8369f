import { parseArgs } from 'node:util';
import type { CliIo } from '../cli-io.js';
import { membersFromArguments } from './member-rows.js';
import { SERVICE_ARG_OPTIONS, type ServiceFlags } from './service-config.js';
import { UsageError } from './usage-error.js';

/** Parsed `<group> <address...>` command line of `group remove` and `group check`. */
export interface GroupAddressArguments {
  /** `--help` was given: the help has been written. */
  help: boolean;
  groupId: string;
  /** Plain addresses, in the order given. */
  emails: string[];
  flags: ServiceFlags;
}

/**
 * Parses `<group> <address...>` plus the service options, writing `help` on
 * `--help`. Every address is checked before any request.
 *
 * @param command `remove` or `check`, for messages
 * @throws {UsageError} for a missing group or address, or an invalid address
 */
export function parseGroupAddressArguments(
  command: string,
  args: string[],
  help: string,
  io: CliIo,
): GroupAddressArguments {
  const { values, positionals } = parseArgs({
    args,
    options: SERVICE_ARG_OPTIONS,
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.stdout.write(help);
    return { help: true, groupId: '', emails: [], flags: values };
  }
  const [groupId, ...addresses] = positionals;
  if (!groupId || addresses.length === 0)
    throw new UsageError(`group ${command} needs a group id and at least one address`);
  const { members, rejected } = membersFromArguments(addresses);
  if (rejected.length > 0) throw new UsageError(rejected[0]!.reason);
  return { help: false, groupId, emails: members.map((m) => m.email), flags: values };
}
