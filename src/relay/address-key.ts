import { domainToASCII } from 'node:url';

/**
 * The form in which two spellings of one mailbox compare equal: the local
 * part unquoted (`"ann"@x` is `ann@x`) and, like everywhere else in this
 * package, case-insensitive; the domain in its ASCII form, so an
 * internationalised domain written in Unicode (`bücher.example`) matches its
 * `xn--` form (`xn--bcher-kva.example`). Both parts are Unicode-normalised
 * (NFC), so SMTPUTF8 addresses written with composed or decomposed
 * characters match too.
 *
 * @example
 * addressKey('"Ann"@Bücher.Example') === addressKey('ann@xn--bcher-kva.example') // true
 */
export function addressKey(address: string): string {
  const at = address.lastIndexOf('@');
  if (at <= 0) return address.normalize('NFC').toLowerCase();
  let local = address.slice(0, at);
  const domain = address
    .slice(at + 1)
    .normalize('NFC')
    .toLowerCase();
  if (local.length >= 2 && local.startsWith('"') && local.endsWith('"')) {
    local = local.slice(1, -1).replace(/\\(.)/g, '$1');
  }
  // White space is kept: in a quoted local part it is part of the mailbox ("a b"@x is not ab@x), and the
  // relay reads no address with white space outside quotes (relay-headers.ts refuses it).
  local = local.normalize('NFC').toLowerCase();
  const ascii = domain.startsWith('[') ? domain : domainToASCII(domain);
  return `${local}@${ascii || domain}`;
}
