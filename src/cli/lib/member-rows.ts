import { toApiAddress } from '../../client/address-input.js';
import { isValidAddress } from '../../protocol/address-rules.js';

/** A member ready to add, with where it came from (for messages). */
export interface MemberRow {
  /** e.g. `people.csv line 4` or `argument 2` */
  where: string;
  email: string;
  name?: string;
  /** Keys without braces; the client writes them `{{key}}`. */
  substitutions?: Record<string, string>;
}

/** An input row that cannot be added, with the reason. */
export interface RejectedRow {
  where: string;
  /** The address as written (may be empty or invalid). */
  email: string;
  reason: string;
}

/** Rows read from an input: the valid ones and the rejected ones, in input order. */
export interface MemberRows {
  members: MemberRow[];
  rejected: RejectedRow[];
}

/**
 * Checks one member with the same rules as the client, so that a bad row is
 * found, and reported with its line, before anything is sent.
 *
 * @returns the member, or the reason it cannot be added
 */
export function checkMember(
  where: string,
  input: string | { email: string; name?: string | undefined },
  substitutions?: Record<string, string>,
): MemberRow | RejectedRow {
  const written = typeof input === 'string' ? input : input.email;
  if (typeof input !== 'string' && !isValidAddress(input.email)) {
    const reason =
      input.email === ''
        ? 'the email cell is empty'
        : `${JSON.stringify(input.email.slice(0, 100))} is not a valid email address`;
    return { where, email: written, reason: `${where}: ${reason}` };
  }
  try {
    const address = toApiAddress(input, where);
    return {
      where,
      email: address.email,
      ...(address.name ? { name: address.name } : {}),
      ...(substitutions ? { substitutions } : {}),
    };
  } catch (err) {
    return { where, email: written, reason: (err as Error).message };
  }
}

/** Whether {@link checkMember} rejected the row. */
export function isRejected(row: MemberRow | RejectedRow): row is RejectedRow {
  return 'reason' in row;
}

/**
 * Members given as command-line arguments, in any Nodemailer form
 * (`ann@x.test`, `Ann <ann@x.test>`).
 */
export function membersFromArguments(args: readonly string[]): MemberRows {
  const rows: MemberRows = { members: [], rejected: [] };
  args.forEach((arg, i) => {
    const row = checkMember(`argument ${i + 1}`, arg);
    if (isRejected(row)) rows.rejected.push(row);
    else rows.members.push(row);
  });
  return rows;
}
