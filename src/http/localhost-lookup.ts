import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOptions } from 'node:dns';
import { isIP } from 'node:net';

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
type Lookup = (hostname: string, options: LookupOptions, callback: LookupCallback) => void;

/**
 * A `lookup` for the connections the client opens: names resolve as usual,
 * except `localhost`, which may only resolve to loopback addresses. Plain
 * `http://` is allowed to `localhost` because it is this machine; a resolver
 * (or a hosts file) that says otherwise must not get the API key in clear text.
 *
 * @param resolve the resolver to ask (`dns.lookup`; a test passes its own)
 */
export function localhostOnlyLoopback(resolve: typeof dnsLookup = dnsLookup): Lookup {
  return (hostname, options, callback) => {
    if (hostname.toLowerCase() !== 'localhost') {
      resolve(hostname, options as LookupAllOptions, callback as never);
      return;
    }
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '');
      const loopback = addresses.filter((a) => isLoopbackAddress(a.address));
      if (loopback.length === 0) {
        const refused: NodeJS.ErrnoException = new Error(
          `localhost resolved to ${addresses.map((a) => a.address).join(', ') || 'nothing'}, not to a loopback address; refusing to connect`,
        );
        refused.code = 'ENOTFOUND';
        return callback(refused, '');
      }
      if (options.all) return callback(null, loopback);
      callback(null, loopback[0]!.address, loopback[0]!.family);
    });
  };
}

/** 127.0.0.0/8, ::1, and IPv4-mapped 127.0.0.0/8. */
export function isLoopbackAddress(address: string): boolean {
  if (isIP(address) === 4) return address.startsWith('127.');
  const lower = address.toLowerCase();
  return lower === '::1' || lower.startsWith('::ffff:127.');
}
