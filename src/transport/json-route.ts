import { inputError } from '../client/input-error.js';

/** Which JSON endpoint a `sendMail` call goes to, from its `group` and `tracking` fields. */
export type JsonRoute = { kind: 'group'; groupId: string; tracking: boolean | undefined } | { kind: 'email' };

/**
 * Reads `group` and `tracking` from the message data.
 * @returns the JSON route, or undefined for a plain EML send
 * @throws {EmlApiError} `EMESSAGE` when they have the wrong type
 */
export function jsonRouteOf(data: Record<string, unknown>): JsonRoute | undefined {
  const { group, tracking } = data;
  if (tracking !== undefined && typeof tracking !== 'boolean') {
    throw inputError('The tracking option must be true or false');
  }
  if (group !== undefined) {
    if (typeof group !== 'string' || group.length === 0)
      throw inputError('The group option must be a non-empty group id');
    return { kind: 'group', groupId: group, tracking };
  }
  return tracking === true ? { kind: 'email' } : undefined;
}
