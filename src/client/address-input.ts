import type { ApiAddress } from '../protocol/api-types.js';
import { parseAddresses } from '../protocol/address-list.js';
import {
  findForbiddenCharacter,
  isValidAddress,
  MAX_ADDRESS_INPUT_LENGTH,
  MAX_ADDRESS_LENGTH,
} from '../protocol/address-rules.js';
import { inputError } from './input-error.js';

/**
 * An address in any of the forms Nodemailer accepts: `'ann@x.test'`,
 * `'Ann <ann@x.test>'`, `'"Doe, Jane" <jane@x.test>'`, `{ name, address }`, or
 * the service's own `{ email, name }`.
 *
 * @example
 * const to: AddressInput[] = ['Ann <ann@example.test>', { name: 'Bob', address: 'bob@example.test' }];
 */
export type AddressInput = string | { address: string; name?: string } | { email: string; name?: string };

/** Longest comma-separated list of addresses given as one string. */
const MAX_LIST_INPUT_LENGTH = 100 * MAX_ADDRESS_INPUT_LENGTH;

/**
 * Converts one Nodemailer-style address to the service's `{ email, name }`.
 * Strings are parsed with Nodemailer's own parser, after a length cap and a
 * check for control, bidirectional and zero-width characters.
 * @param where names the argument in errors, e.g. `sendEmail: to[1]`
 * @throws {EmlApiError} `EMESSAGE` when it is not one valid address
 */
export function toApiAddress(input: unknown, where: string): ApiAddress {
  let email: unknown;
  let name: unknown;
  if (typeof input === 'string') {
    checkText(input, MAX_ADDRESS_INPUT_LENGTH, where);
    const parsed = parseAddresses(input);
    if (parsed.length !== 1) throw invalid(input, where);
    email = parsed[0]!.address;
    name = parsed[0]!.name || undefined;
  } else if (typeof input === 'object' && input !== null) {
    const o = input as Record<string, unknown>;
    email = o.email ?? o.address;
    name = o.name;
    if (typeof email === 'string') checkText(email, MAX_ADDRESS_LENGTH, where);
  }
  if (typeof email !== 'string' || !isValidAddress(email)) throw invalid(input, where);
  if (name !== undefined && typeof name !== 'string') throw inputError(`${where}: the name must be a string`);
  if (typeof name === 'string') {
    if (/[\r\n]/.test(name)) throw inputError(`${where}: the name must not contain line breaks`);
    checkText(name, MAX_ADDRESS_INPUT_LENGTH, `${where}: the name`);
  }
  return name ? { email, name } : { email };
}

/** Converts one address or a list (also a comma-separated string) to `{ email, name }` objects. */
export function toApiAddressList(input: unknown, where: string): ApiAddress[] {
  let list: unknown[];
  if (Array.isArray(input)) list = input;
  else if (typeof input === 'string') {
    checkText(input, MAX_LIST_INPUT_LENGTH, where);
    list = parseAddresses(input).map(({ name, address }) => (name ? { name, address } : address));
    if (list.length === 0 && input.trim() !== '') throw invalid(input, where);
  } else list = [input];
  return list.map((entry, i) =>
    toApiAddress(entry, list.length > 1 || Array.isArray(input) ? `${where}[${i}]` : where),
  );
}

/** Refuses text that is too long to parse or holds a character no address may hold. */
function checkText(text: string, max: number, where: string): void {
  if (text.length > max)
    throw inputError(`${where}: ${text.length} characters, more than the ${max} an address may have`);
  const bad = findForbiddenCharacter(text, { allowTab: true });
  if (bad)
    throw inputError(`${where}: ${JSON.stringify(text.slice(0, 100))} contains ${bad.what} at position ${bad.index}`);
}

function invalid(input: unknown, where: string) {
  return inputError(`${where}: ${describeAddress(input)} is not a valid email address`);
}

function describeAddress(input: unknown): string {
  if (typeof input === 'string') return JSON.stringify(input.slice(0, 100));
  if (input === null || input === undefined) return String(input);
  if (typeof input === 'object') return 'the object given';
  return typeof input;
}
