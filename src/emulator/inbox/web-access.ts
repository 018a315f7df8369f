import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import type { PageAnswer } from '../pages/public-pages.js';

/**
 * Who may read the captured mail (the web inbox, its feed, the groups page and the inspection API): requests for a
 * loopback Host or an allowed one (against DNS rebinding), from no other origin than the inbox's own (against pages
 * that post to it, as Mailpit refuses them), with the inbox login when one is set (against anyone else on the network,
 * whatever Host they claim).
 */

/** The login of the web inbox and the inspection API. */
export interface InboxLogin {
  username: string;
  password: string;
}

/**
 * The gate in front of the captured mail.
 * @param allowedHosts lower-cased host names allowed besides the loopback ones
 */
export class WebAccess {
  readonly #allowed: ReadonlySet<string>;
  readonly #login: Buffer | undefined;

  constructor(allowedHosts: readonly string[], login: InboxLogin | undefined) {
    this.#allowed = new Set(allowedHosts);
    this.#login = login === undefined ? undefined : digest(`${login.username}:${login.password}`);
  }

  /** The refusal for a request that may not read the mail, or undefined when it may. */
  refusal(req: IncomingMessage): PageAnswer | undefined {
    if (!isAllowedHost(req.headers.host, this.#allowed)) return refusedHost(req.headers.host);
    const origin = req.headers.origin;
    if (origin !== undefined && !isOwnOrigin(origin, req.headers.host!, this.#allowed)) return refusedOrigin(origin);
    if (this.#login && !this.#loggedIn(req.headers.authorization)) return LOGIN_REQUIRED;
    return undefined;
  }

  #loggedIn(header: string | undefined): boolean {
    const m = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i.exec(header ?? '');
    if (!m) return false;
    return timingSafeEqual(digest(Buffer.from(m[1]!, 'base64').toString('utf8')), this.#login!);
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

const LOGIN_REQUIRED: PageAnswer = {
  status: 401,
  contentType: 'text/plain; charset=utf-8',
  body: 'This inbox needs its login (HTTP Basic authentication): the user name and password eml-api serve printed, or the inboxLogin option.\n',
  headers: { 'www-authenticate': 'Basic realm="eml-api emulator inbox", charset="UTF-8"', 'cache-control': 'no-store' },
};

/** The answer to a request for a host the inbox does not answer. */
function refusedHost(host: string | undefined): PageAnswer {
  return {
    status: 403,
    contentType: 'text/plain; charset=utf-8',
    body: `This web inbox shows every captured message, so it answers only requests for localhost or a loopback address (this one was for ${JSON.stringify((host ?? '').slice(0, 100))}). To open it under another name, start the emulator with allowedHosts (eml-api serve --allow-host NAME).\n`,
    headers: { 'cache-control': 'no-store' },
  };
}

/** The answer to a request a page of another origin made. */
function refusedOrigin(origin: string): PageAnswer {
  return {
    status: 403,
    contentType: 'text/plain; charset=utf-8',
    body: `Blocked: a page of another origin (${JSON.stringify(origin.slice(0, 100))}) may not read or change the captured mail.\n`,
    headers: { 'cache-control': 'no-store' },
  };
}

/**
 * Whether a request's `Origin` is the inbox itself: the same host and port as its `Host`, or a name the user allowed
 * (behind a proxy that rewrites Host).
 */
function isOwnOrigin(origin: string, hostHeader: string, allowed: ReadonlySet<string>): boolean {
  let from: URL;
  let to: URL;
  try {
    from = new URL(origin);
    to = new URL(`http://${hostHeader}`);
  } catch {
    return false;
  }
  if (from.protocol !== 'http:' && from.protocol !== 'https:') return false;
  return from.host === to.host || allowed.has(from.hostname);
}

/**
 * Whether a request's `Host` is one the web inbox answers: `localhost` (and `*.localhost`, which browsers resolve to
 * loopback themselves), a loopback address, or a name the user allowed. Anything else (a DNS-rebinding page's own name,
 * a missing Host) is refused.
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
    // An IPv6 literal, then nothing or a port.
    const end = value.indexOf(']');
    if (end === -1 || !/^(?::\d+)?$/.test(value.slice(end + 1))) return undefined;
    return value.slice(0, end + 1);
  }
  const colon = value.lastIndexOf(':');
  const name = colon !== -1 && /^\d+$/.test(value.slice(colon + 1)) ? value.slice(0, colon) : value;
  return name.replace(/\.$/, '') || undefined;
}
