const MEMBERSHIP_FIELDS = ['member', 'isMember', 'is_member', 'inGroup', 'in_group', 'exists', 'found', 'result'];

/** Reads membership from a 2xx answer of any common shape; a 2xx without a boolean means "member". */
export function readMembership(data: unknown): boolean {
  if (typeof data === 'boolean') return data;
  if (typeof data === 'object' && data !== null) {
    for (const field of MEMBERSHIP_FIELDS) {
      const value = (data as Record<string, unknown>)[field];
      if (typeof value === 'boolean') return value;
    }
  }
  return true;
}
