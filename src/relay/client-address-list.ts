import { BlockList, isIP } from 'node:net';
import { EmlApiError } from '../shared/eml-api-error.js';

/** Addresses a {@link ClientAddressList} remembers its answer for. */
const RECENT_ADDRESSES = 1024;

/** The loopback networks: the clients on the relay's own machine. */
export const LOOPBACK_NETWORKS: readonly string[] = Object.freeze(['127.0.0.0/8', '::1/128']);

/**
 * A list of client addresses and networks (`203.0.113.7`, `10.0.0.0/8`,
 * `fd00::/8`). IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`) match the IPv4
 * entries, as a dual-stack listener reports IPv4 clients that way.
 */
export class ClientAddressList {
  /** The entries as given. */
  readonly entries: readonly string[];
  readonly #list = new BlockList();

  /**
   * @param option names the option in errors, e.g. `allowUnauthenticatedFrom`
   * @throws {EmlApiError} `ECONFIG` naming the option and the entry that is not an address or network
   */
  constructor(entries: readonly string[], option: string) {
    if (!Array.isArray(entries)) {
      throw new EmlApiError('ECONFIG', `Invalid option ${option}: expected an array of addresses or networks`, {
        permanent: true,
      });
    }
    for (const entry of entries) this.#add(entry, option);
    this.entries = Object.freeze([...entries]);
  }

  /**
   * The answers for the addresses asked last. The relay asks about the same
   * client several times a session (admission, EHLO, MAIL) and BlockList's
   * check builds a SocketAddress each time: about 1% of the relay's CPU with
   * a connection per message. The list never changes, so an answer stays true.
   */
  readonly #recent = new Map<string, boolean>();

  /** Whether a client address is on the list. */
  includes(address: string): boolean {
    const known = this.#recent.get(address);
    if (known !== undefined) return known;
    const plain = unmapIpv4(address);
    const family = isIP(plain);
    const found = family !== 0 && this.#list.check(plain, family === 4 ? 'ipv4' : 'ipv6');
    // Bounded: clients spread over many addresses cannot grow it.
    if (this.#recent.size >= RECENT_ADDRESSES) this.#recent.clear();
    this.#recent.set(address, found);
    return found;
  }

  #add(entry: unknown, option: string): void {
    const bad = () =>
      new EmlApiError(
        'ECONFIG',
        `Invalid option ${option}: ${JSON.stringify(entry)} is not an IP address or network (e.g. 10.0.0.0/8, fd00::/8)`,
        { permanent: true },
      );
    if (typeof entry !== 'string') throw bad();
    const [address = '', prefix, extra] = entry.trim().split('/');
    const family = isIP(address);
    if (family === 0 || extra !== undefined) throw bad();
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (prefix === undefined) {
      this.#list.addAddress(address, type);
      return;
    }
    const bits = Number(prefix);
    if (!/^\d{1,3}$/.test(prefix) || bits > (family === 4 ? 32 : 128)) throw bad();
    this.#list.addSubnet(address, bits, type);
  }
}

const loopback = new ClientAddressList(LOOPBACK_NETWORKS, 'loopback');

/** Whether a client address is a loopback address (127.0.0.0/8, ::1, or IPv4-mapped loopback). */
export function isLoopbackAddress(address: string): boolean {
  return loopback.includes(address);
}

/**
 * What the per-address limits count a client as: its IPv4 address, or the
 * /64 of its IPv6 address (one host, or one site, is usually given a whole
 * /64, and could otherwise take a new address for every connection).
 *
 * @example
 * clientKey('::ffff:192.0.2.7') // '192.0.2.7'
 * clientKey('2001:db8:1:2:a:b:c:d') // '2001:db8:1:2::/64'
 */
export function clientKey(address: string): string {
  const plain = unmapIpv4(address);
  if (isIP(plain) !== 6) return plain;
  const bare = plain.split('%')[0]!.toLowerCase();
  const [head = '', tail] = bare.split('::');
  const groups = (part: string) =>
    part === '' ? [] : part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g]));
  const front = groups(head);
  const all =
    tail === undefined
      ? front
      : [...front, ...Array(8 - front.length - groups(tail).length).fill('0'), ...groups(tail)];
  return `${all
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

function unmapIpv4(address: string): string {
  const match = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  return match ? match[1]! : address;
}
