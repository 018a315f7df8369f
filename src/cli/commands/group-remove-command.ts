import type { CliIo } from '../cli-io.js';
import { parseGroupAddressArguments } from '../lib/address-arguments.js';
import { createServiceClient, SERVICE_OPTIONS_HELP } from '../lib/service-config.js';
import { EXIT } from '../lib/usage-error.js';

/** Help of `eml-api group remove`. */
export const GROUP_REMOVE_HELP = `Usage: eml-api group remove <group> <address...> [options]

Removes each address from a group (DELETE /v1/group/{group}) and prints one
line per address: "<address>: removed" or "<address>: not a member".

Options:
${SERVICE_OPTIONS_HELP}
Exit codes: 0 done (also for addresses that were not members), 1 failed, 2 wrong usage.
`;

/** `eml-api group remove`: removes addresses from a group, one request each. */
export async function groupRemoveCommand(args: string[], io: CliIo): Promise<number> {
  const parsed = parseGroupAddressArguments('remove', args, GROUP_REMOVE_HELP, io);
  if (parsed.help) return EXIT.ok;
  const client = createServiceClient(parsed.flags, io.env);
  try {
    for (const email of parsed.emails) {
      const removed = await client.removeFromGroup(parsed.groupId, email);
      io.stdout.write(`${email}: ${removed ? 'removed' : 'not a member'}\n`);
    }
    return EXIT.ok;
  } finally {
    await client.close();
  }
}
