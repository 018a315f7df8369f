import { BlockList, isIP } from 'node:net';
import { configError } from '../shared/options-kit.js';

const RECENT_ADDRESSES = 1024;

/** The clients on the relay's own machine. */
export const LOOPBACK_NETWORKS: readonly string[] = Object.freeze(['127.0.0.0/8', '::1/128']);

/**
 * Client addresses and networks, matched family by family: an IPv4-mapped client or entry is IPv4. Node's `BlockList`
 * alone matches IPv4 against IPv6 rules through the mapped form, so `--allow ::/0` would admit every IPv4 client.
 */
export class ClientAddressList {
  readonly entries: readonly string[];
  readonly #ipv4 = new BlockList();
  readonly #ipv6 = new BlockList();

  /** @throws {EmlApiError} `ECONFIG` naming the option and the entry that is not an address or network */
  constructor(entries: readonly string[], option: string) {
    if (!Array.isArray(entries)) {
      throw configError(option, 'expected an array of addresses or networks');
    }
    for (const entry of entries) this.#add(entry, option);
    this.entries = Object.freeze([...entries]);
  }

  /** The relay asks about a client several times a session, and each BlockList check builds a SocketAddress. */
  readonly #recent = new Map<string, boolean>();

  includes(address: string): boolean {
    const known = this.#recent.get(address);
    if (known !== undefined) return known;
    const plain = unmapIpv4(address);
    const family = isIP(plain);
    const found =
      family === 4 ? this.#ipv4.check(plain, 'ipv4') : family === 6 ? this.#ipv6.check(plain, 'ipv6') : false;
    if (this.#recent.size >= RECENT_ADDRESSES) this.#recent.clear();
    this.#recent.set(address, found);
    return found;
  }

  #add(entry: unknown, option: string): void {
    const bad = () =>
      configError(option, `${JSON.stringify(entry)} is not an IP address or network (e.g. 10.0.0.0/8, fd00::/8)`);
    if (typeof entry !== 'string') throw bad();
    const [written = '', prefix, extra] = entry.trim().split('/');
    if (isIP(written) === 0 || extra !== undefined) throw bad();
    let bits = prefix === undefined ? undefined : Number(prefix);
    if (prefix !== undefined && (!/^\d{1,3}$/.test(prefix) || bits! > (isIP(written) === 4 ? 32 : 128))) throw bad();
    // Only within the mapped range.
    const mapped = unmapIpv4(written);
    const address = isIP(mapped) === 4 && (bits === undefined || bits >= 96) ? mapped : written;
    if (address !== written && bits !== undefined) bits -= 96;
    const [list, type] = isIP(address) === 4 ? [this.#ipv4, 'ipv4' as const] : [this.#ipv6, 'ipv6' as const];
    if (bits === undefined) list.addAddress(address, type);
    else list.addSubnet(address, bits, type);
  }
}

const loopback = new ClientAddressList(LOOPBACK_NETWORKS, 'loopback');

export function isLoopbackAddress(address: string): boolean {
  return loopback.includes(address);
}

/** Its IPv4 address, or its IPv6 /64: a host usually owns a whole /64 and could take a new address per connection. */
export function clientKey(address: string): string {
  const plain = unmapIpv4(address);
  if (isIP(plain) !== 6) return plain;
  const groups = ipv6Groups(plain) ?? [];
  return `${groups
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(':')}::/64`;
}

/** The IPv4 address an IPv4-mapped IPv6 address holds (`::ffff:10.1.2.3`, `::ffff:a01:203`), or the address as given. */
export function unmapIpv4(address: string): string {
  const dotted = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (dotted) return dotted[1]!;
  if (isIP(address) !== 6) return address;
  const groups = ipv6Groups(address);
  if (!groups || groups.slice(0, 5).some((g) => g !== 0) || groups[5] !== 0xffff) return address;
  return [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join('.');
}

/** A zone dropped, an embedded IPv4 tail read; undefined when not IPv6. */
function ipv6Groups(address: string): number[] | undefined {
  const bare = address.split('%')[0]!.toLowerCase();
  const [head = '', tail] = bare.split('::');
  const groups = (part: string) =>
    part === ''
      ? []
      : part.split(':').flatMap((g) => {
          if (!g.includes('.')) return [parseInt(g, 16)];
          const [a = 0, b = 0, c = 0, d = 0] = g.split('.').map(Number);
          return [(a << 8) | b, (c << 8) | d];
        });
  const front = groups(head);
  const back = tail === undefined ? [] : groups(tail);
  const all =
    tail === undefined ? front : [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back];
  return all.length === 8 && all.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? all : undefined;
}
