import type { GroupMemberEntry } from '../protocol/api-types.js';
import { hasLoneSurrogate } from '../protocol/address-rules.js';
import { isValidIdempotencyKey } from '../protocol/idempotency-key.js';
import { toApiAddress } from './address-input.js';
import { toApiSubstitutions } from './content-input.js';
import { inputError } from './input-error.js';

/** @throws {EmlApiError} `EMESSAGE` unless `groupId` is a usable group id */
export function checkGroupId(groupId: unknown, method: string): asserts groupId is string {
  if (typeof groupId !== 'string' || groupId.length === 0)
    throw inputError(`${method}: groupId must be a non-empty string`);
  if (groupId.length > 256) throw inputError(`${method}: groupId is longer than 256 characters`);
  if (hasLoneSurrogate(groupId)) throw inputError(`${method}: groupId is not valid Unicode (a lone surrogate)`);
}

/**
 * The caller's idempotency key, checked, or undefined when none was given.
 * @throws {EmlApiError} `EMESSAGE` when it cannot be a header value
 */
export function checkIdempotencyKey(key: unknown): string | undefined {
  if (key === undefined) return undefined;
  if (!isValidIdempotencyKey(key))
    throw inputError('idempotencyKey must be 1 to 255 printable ASCII characters without spaces');
  return key;
}

/** @throws {EmlApiError} `EMESSAGE` unless `subject` is a non-empty single line */
export function checkSubject(subject: unknown, method: string): string {
  if (typeof subject !== 'string' || subject.length === 0)
    throw inputError(`${method}: subject must be a non-empty string`);
  if (/[\r\n]/.test(subject)) throw inputError(`${method}: subject must not contain line breaks`);
  return subject;
}

/** One member of an add request, in the wire form. */
export function toMemberEntry(member: unknown, where: string): GroupMemberEntry {
  const address = toApiAddress(member, where);
  const substitutions =
    typeof member === 'object' && member !== null
      ? toApiSubstitutions((member as { substitutions?: unknown }).substitutions, where)
      : undefined;
  return { ...address, ...(substitutions ? { substitutions } : {}) };
}
