import type { ServiceResponse } from '../http/service-response.js';

/** Boolean fields a membership answer may state its answer in. */
const MEMBERSHIP_FIELDS = ['member', 'isMember', 'is_member', 'inGroup', 'in_group', 'exists', 'found'];

/**
 * Reads the membership a 2xx answer states, in the shapes services use: the
 * contract's `{ "member": true }` and its common spellings, a bare JSON
 * boolean, the same inside a `data` envelope, or a 204 (services that answer
 * 204 for a member and 404 for anyone else).
 *
 * @returns the stated membership, or undefined when the answer states none
 *   this client recognises: never a guess, since a wrong "yes" mails non-members
 */
export function readMembership(res: ServiceResponse): boolean | undefined {
  if (res.statusCode === 204) return true;
  const { data } = res;
  if (typeof data === 'boolean') return data;
  const envelope = isObject(data) && isObject(data.data) ? data.data : undefined;
  for (const candidate of [data, envelope]) {
    if (!isObject(candidate)) continue;
    for (const field of MEMBERSHIP_FIELDS) {
      if (typeof candidate[field] === 'boolean') return candidate[field];
    }
  }
  return undefined;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
