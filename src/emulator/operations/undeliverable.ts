/**
 * Whether delivery to an address fails. Domains ending in `.invalid` (reserved
 * by RFC 2606) are undeliverable, so tests can trigger failures on purpose.
 */
export function isUndeliverable(address: string): boolean {
  const domain = address.slice(address.lastIndexOf('@') + 1).toLowerCase();
  return domain === 'invalid' || domain.endsWith('.invalid');
}
