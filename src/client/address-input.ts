import type { ApiAddress } from '../protocol/api-types.js';
import { isValidAddress } from '../protocol/address-rules.js';
import { EmlApiError } from '../shared/eml-api-error.js';

/**
 * An address in any of the forms Nodemailer accepts: `'ann@x.test'`,
 * `'Ann <ann@x.test>'`, `'"Doe, Jane" <jane@x.test>'`, `{ name, address }`, or
 * the service's own `{ email, name }`.
 *
 * @example
 * const to: AddressInput[] = ['Ann <ann@example.test>', { name: 'Bob', address: 'bob@example.test' }];
 */
export type AddressInput = string | { address: string; name?: string } | { email: string; name?: string };

/**
 * Converts one Nodemailer-style address to the service's `{ email, name }`.
 * @param where names the argument in errors, e.g. `sendEmail: to[1]`
 * @throws {EmlApiError} `EMESSAGE` when it is not one valid address
 */
export function toApiAddress(input: unknown, where: string): ApiAddress {
  let email: unknown;
  let name: unknown;
  if (typeof input === 'string') {
    const angle = /^\s*(.*?)\s*<([^<>]*)>\s*$/s.exec(input);
    if (angle) {
      name = angle[1]!.replace(/^"(.*)"$/s, '$1').replace(/\\(.)/g, '$1');
      email = angle[2]!.trim();
    } else {
      email = input.trim();
    }
  } else if (typeof input === 'object' && input !== null) {
    const o = input as Record<string, unknown>;
    email = o.email ?? o.address;
    name = o.name;
  }
  if (typeof email !== 'string' || !isValidAddress(email)) {
    throw new EmlApiError('EMESSAGE', `${where}: ${describeAddress(input)} is not a valid email address`, {
      permanent: true,
    });
  }
  if (name !== undefined && typeof name !== 'string') {
    throw new EmlApiError('EMESSAGE', `${where}: the name must be a string`, { permanent: true });
  }
  if (typeof name === 'string' && /[\r\n]/.test(name)) {
    throw new EmlApiError('EMESSAGE', `${where}: the name must not contain line breaks`, { permanent: true });
  }
  return name ? { email, name } : { email };
}

/** Converts one address or a list (also a comma-separated string) to `{ email, name }` objects. */
export function toApiAddressList(input: unknown, where: string): ApiAddress[] {
  const list = Array.isArray(input) ? input : typeof input === 'string' ? splitAddressList(input) : [input];
  return list.map((entry, i) =>
    toApiAddress(entry, list.length > 1 || Array.isArray(input) ? `${where}[${i}]` : where),
  );
}

/** Splits `'a@x, "Doe, Jane" <j@x>'` at commas outside quotes and angle brackets. */
function splitAddressList(value: string): string[] {
  const parts: string[] = [];
  let current = '';
  let quote = false;
  let angle = false;
  for (const ch of value) {
    if (ch === '"' && !angle) quote = !quote;
    else if (ch === '<' && !quote) angle = true;
    else if (ch === '>' && !quote) angle = false;
    if (ch === ',' && !quote && !angle) {
      if (current.trim()) parts.push(current);
      current = '';
    } else current += ch;
  }
  if (current.trim()) parts.push(current);
  return parts;
}

function describeAddress(input: unknown): string {
  if (typeof input === 'string') return JSON.stringify(input.slice(0, 100));
  if (input === null || input === undefined) return String(input);
  if (typeof input === 'object') return 'the object given';
  return typeof input;
}
