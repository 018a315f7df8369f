import type { ClientAddressList } from './client-address-list.js';
import type { SmtpReply } from './smtp-replies.js';

/** What the relay knows of a connection when it decides what the client may do. */
export interface ConnectionFacts {
  remoteAddress: string;
  /** TLS is up (implicit TLS, or after STARTTLS). */
  secure: boolean;
  /** The client authenticated with an API key the service accepted. */
  authenticated: boolean;
}

/** The relay's configuration that the decisions depend on. */
export interface RelayPolicy {
  /** The relay holds its own API key. */
  hasOwnKey: boolean;
  /** The relay offers STARTTLS (or listens with implicit TLS). */
  hasTls: boolean;
  allowUnauthenticatedFrom: ClientAddressList;
  /** Where AUTH is offered on plain text, and who is exempt from the per-address limits (`trustedNetworks`). */
  trustedNetworks: ClientAddressList;
}

/**
 * Whether AUTH is offered: over TLS, or from `trustedNetworks` (loopback by
 * default). The password is an API key, so it never crosses the network in
 * clear; AUTH is not even advertised on a plain-text connection from another
 * host (RFC 4954 section 4: a mechanism not permitted on a connection is not
 * advertised), so a client never sends the key before the refusal.
 */
export function authOffered(
  facts: Pick<ConnectionFacts, 'remoteAddress' | 'secure'>,
  policy: Pick<RelayPolicy, 'trustedNetworks'>,
): boolean {
  return facts.secure || policy.trustedNetworks.includes(facts.remoteAddress);
}

/**
 * Whether a client may start a mail transaction (MAIL FROM): when it
 * authenticated (it sends with its own key), or, when the relay holds a key,
 * when its address is on `allowUnauthenticatedFrom`.
 *
 * @returns undefined when it may, else the `530` reply saying what it must do
 */
export function mailRefusal(facts: ConnectionFacts, policy: RelayPolicy): SmtpReply | undefined {
  if (facts.authenticated) return undefined;
  if (policy.hasOwnKey && policy.allowUnauthenticatedFrom.includes(facts.remoteAddress)) return undefined;
  if (authOffered(facts, policy)) {
    return { code: 530, text: '5.7.0 Authentication required: AUTH with your API key as the password' };
  }
  return policy.hasTls
    ? { code: 530, text: '5.7.0 Must issue a STARTTLS command first, then AUTH with your API key as the password' }
    : {
        code: 530,
        text: '5.7.0 Authentication required, and this relay accepts AUTH only from its trusted networks (it has no TLS certificate)',
      };
}
