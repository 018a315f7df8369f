import { createRequire } from 'node:module';

/** One entry of Nodemailer's address parser: an address, or a group of them. */
interface ParsedEntry {
  name: string;
  address?: string;
  group?: ParsedEntry[];
}

type AddressParser = (text: string) => ParsedEntry[];

// Nodemailer's own parser (a peer dependency), so addresses read here are the ones Nodemailer
// would read from the same text. Nodemailer 10 exports it as `default` too; 6.9 as the module.
const loaded = createRequire(import.meta.url)('nodemailer/lib/addressparser') as
  AddressParser | { default: AddressParser };
const addressparser: AddressParser = typeof loaded === 'function' ? loaded : loaded.default;

/** An address with its display name ('' when none). */
export interface NamedAddress {
  name: string;
  address: string;
}

/**
 * Parses an RFC 5322 address list with Nodemailer's parser: display names,
 * comments and group syntax (`Team: a@x, b@y;`) handled, group members
 * flattened in order. Entries without an address are dropped. Linear in
 * the input for Nodemailer 7 and later; callers cap the length first.
 *
 * @example
 * parseAddresses('"Doe, Jane" <jane@x.test>, Team: a@x.test;');
 * // [{ name: 'Doe, Jane', address: 'jane@x.test' }, { name: '', address: 'a@x.test' }]
 */
export function parseAddresses(value: string): NamedAddress[] {
  const out: NamedAddress[] = [];
  const walk = (entries: ParsedEntry[]): void => {
    for (const entry of entries) {
      if (entry.group) walk(entry.group);
      else if (entry.address) out.push({ name: entry.name ?? '', address: entry.address });
    }
  };
  walk(addressparser(value));
  return out;
}

/**
 * The addresses of an address list, without names; entries that hold no `@`
 * (`undisclosed-recipients:;`) are dropped.
 *
 * @example
 * parseAddressList('"Doe, Jane" <jane@x.test>, Team: a@x.test;') // ['jane@x.test', 'a@x.test']
 */
export function parseAddressList(value: string): string[] {
  return parseAddresses(value)
    .map((entry) => entry.address)
    .filter((address) => address.includes('@'));
}
