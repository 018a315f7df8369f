import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { addressKey } from './address-key.js';

/** One entry of Nodemailer's address parser: an address, or a group of them. */
interface ParsedEntry {
  name?: string;
  address?: string;
  group?: ParsedEntry[];
}

type AddressParser = (text: string) => ParsedEntry[];

/** One address parser the relay checks its reading against. */
export interface ServiceAddressReader {
  /** Where it was loaded from, e.g. `nodemailer 10.0.12 (mailparser's)`. */
  readonly name: string;
  /** The addresses of an address list, groups flattened, in order; '' for an entry without one. */
  read(value: string): string[];
}

/**
 * Nodemailer releases before 7 parse an address list in time quadratic in its
 * length (ten seconds for a header section of 1 MiB, which the relay takes):
 * they are not run as a cross-check.
 */
const FIRST_LINEAR_MAJOR = 7;

let loaded: readonly ServiceAddressReader[] | undefined;

/**
 * The address parsers the service's side reads To, Cc and Bcc with, as far
 * as this machine has them: Nodemailer's `addressparser` as mailparser (the
 * emulator's MIME parser, and that of services built on it) loads it, from
 * mailparser's own dependencies (mailparser 3.9.31 bundles Nodemailer
 * 10.0.12, whose parser reads comments and groups otherwise than 10.6's), and
 * the copy of the `nodemailer` peer dependency when it is another. Both are
 * optional here: mailparser is an optional peer, and a reader that cannot be
 * loaded is left out (the relay's own strict reading stays the rule).
 *
 * Loaded once, on first use.
 */
export function serviceAddressReaders(): readonly ServiceAddressReader[] {
  loaded ??= loadReaders();
  return loaded;
}

/**
 * Whether every service address reader reads `value` as the relay read it:
 * the same addresses, in the same order, each spelled the same way (ASCII
 * case aside, as {@link addressKey} compares them).
 *
 * @returns undefined when they agree, else the first reader that does not and what it read
 */
export function disagreeingReader(
  value: string,
  relayRead: readonly string[],
): { reader: string; read: string[] } | undefined {
  for (const reader of serviceAddressReaders()) {
    const read = reader.read(value);
    const same = read.length === relayRead.length && read.every((a, i) => addressKey(a) === addressKey(relayRead[i]!));
    if (!same) return { reader: reader.name, read };
  }
  return undefined;
}

function loadReaders(): ServiceAddressReader[] {
  const here = createRequire(import.meta.url);
  const readers: ServiceAddressReader[] = [];
  const seen = new Set<string>();
  const add = (from: NodeRequire, owner: string) => {
    let path: string;
    let version: string;
    try {
      path = from.resolve('nodemailer/lib/addressparser');
      version = (from('nodemailer/package.json') as { version: string }).version;
    } catch {
      return;
    }
    if (seen.has(path) || Number(version.split('.')[0]) < FIRST_LINEAR_MAJOR) return;
    seen.add(path);
    const module = from('nodemailer/lib/addressparser') as AddressParser | { default: AddressParser };
    const parse = typeof module === 'function' ? module : module.default;
    readers.push({ name: `nodemailer ${version} (${owner})`, read: (value) => flatten(parse(value)) });
  };
  try {
    // Resolved from mailparser's own folder: npm nests the Nodemailer it depends on there when versions differ.
    add(createRequire(join(dirname(here.resolve('mailparser')), 'index.js')), "mailparser's");
  } catch {
    // mailparser is not installed: only the peer's copy is run.
  }
  add(here, 'the nodemailer peer');
  return readers;
}

function flatten(entries: ParsedEntry[]): string[] {
  const out: string[] = [];
  const walk = (list: ParsedEntry[]) => {
    for (const entry of list) {
      if (entry.group) walk(entry.group);
      else out.push(entry.address ?? '');
    }
  };
  walk(entries);
  return out;
}
