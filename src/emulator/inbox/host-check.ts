import { isIP } from 'node:net';

/**
 * Whether a request's `Host` is one the web inbox answers: `localhost` (and
 * `*.localhost`, which browsers resolve to loopback themselves), a loopback
 * address, or a name the user allowed. Anything else (a DNS-rebinding page's
 * own name, a missing Host) is refused.
 *
 * @param allowed lower-cased host names allowed besides the loopback ones
 */
export function isAllowedHost(hostHeader: string | undefined, allowed: ReadonlySet<string>): boolean {
  const host = hostName(hostHeader);
  if (host === undefined) return false;
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (host === '::1' || host === '[::1]') return true;
  return allowed.has(host);
}

/** The host name of a Host header, lower-cased, without port or trailing dot. */
function hostName(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const value = header.trim().toLowerCase();
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    return end === -1 ? undefined : value.slice(0, end + 1);
  }
  const colon = value.lastIndexOf(':');
  const name = colon !== -1 && /^\d+$/.test(value.slice(colon + 1)) ? value.slice(0, colon) : value;
  return name.replace(/\.$/, '') || undefined;
}
