import type { CliIo } from '../cli-io.js';
import { parseGroupAddressArguments } from '../lib/address-arguments.js';
import { createServiceClient, SERVICE_OPTIONS_HELP } from '../lib/service-config.js';
import { EXIT } from '../lib/usage-error.js';

/** Help of `eml-api group check`. */
export const GROUP_CHECK_HELP = `Usage: eml-api group check <group> <address...> [options]

Checks whether each address is a member of a group
(GET /v1/group/{group}/check/{address}) and prints one line per address:
"<address>: member" or "<address>: not a member".

Options:
${SERVICE_OPTIONS_HELP}
Exit codes: 0 every address is a member, 3 at least one is not,
1 the check failed, 2 wrong usage.
`;

/** `eml-api group check`: membership of each address; exit code 3 when any is not a member. */
export async function groupCheckCommand(args: string[], io: CliIo): Promise<number> {
  const parsed = parseGroupAddressArguments('check', args, GROUP_CHECK_HELP, io);
  if (parsed.help) return EXIT.ok;
  const client = createServiceClient(parsed.flags, io.env);
  try {
    let allMembers = true;
    for (const email of parsed.emails) {
      const member = await client.isInGroup(parsed.groupId, email);
      if (!member) allMembers = false;
      io.stdout.write(`${email}: ${member ? 'member' : 'not a member'}\n`);
    }
    return allMembers ? EXIT.ok : EXIT.notMember;
  } finally {
    await client.close();
  }
}
