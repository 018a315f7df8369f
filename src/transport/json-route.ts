import { inputError } from '../client/input-error.js';
import type { SendKind } from '../protocol/api-paths.js';

/**
 * Where a `sendMail` call goes, from its `group` and `tracking` fields: a
 * group send, a tracked JSON email, or (neither) the built message as EML.
 */
export type SendRoute =
  | { kind: Extract<SendKind, 'group'>; groupId: string; tracking: boolean | undefined }
  | { kind: Extract<SendKind, 'email'> }
  | { kind: Extract<SendKind, 'eml'> };

/** The routes that post JSON fields instead of the built message. */
export type JsonRoute = Exclude<SendRoute, { kind: 'eml' }>;

/**
 * Reads `group` and `tracking` from the message data.
 * @throws {EmlApiError} `EMESSAGE` when they have the wrong type
 */
export function sendRouteOf(data: Record<string, unknown>): SendRoute {
  const { group, tracking } = data;
  if (tracking !== undefined && typeof tracking !== 'boolean') {
    throw inputError('The tracking option must be true or false');
  }
  if (group !== undefined) {
    if (typeof group !== 'string' || group.length === 0)
      throw inputError('The group option must be a non-empty group id');
    return { kind: 'group', groupId: group, tracking };
  }
  return tracking === true ? { kind: 'email' } : { kind: 'eml' };
}
