import type { SMTPServer } from 'smtp-server';

/** A reply text that starts with its own enhanced status code (RFC 3463), e.g. `4.4.1 ...`. */
const OWN_CODE = /^[245]\.\d{1,3}\.\d{1,3} /;

/** The reply to AUTH on a connection where it is not offered (plain text, not from `trustedNetworks`). */
const AUTH_NEEDS_TLS =
  '5.7.11 Encryption required: AUTH is accepted over TLS (STARTTLS first), or from trusted networks only';

type Send = (code: number, data?: string | string[] | null, context?: string | false) => void;

/**
 * Makes the server's replies carry the enhanced status codes the relay
 * chose. smtp-server advertises ENHANCEDSTATUSCODES and adds a code to each
 * reply from a fixed table (`550` is always `5.1.1`, `552` always `5.2.2`);
 * the relay's replies name a precise one (`550 5.7.1`, `552 5.3.4`,
 * `250 2.0.0 Ok: <id>`), so a reply text that starts with its own code is
 * sent as it is. And AUTH on a connection where it is not offered (it is
 * hidden from EHLO on plain-text connections from hosts outside `trustedNetworks`, so that a
 * client never sends the key in clear) is answered `538 5.7.11`, as RFC 4954
 * says, instead of "command not recognized".
 */
export function keepOwnStatusCodes(server: SMTPServer): void {
  const connect = server.connect.bind(server);
  server.connect = (socket, options) => {
    connect(socket, options);
    // connect() adds the new connection last; the greeting is sent later (see prompt-greeting.ts).
    let newest: (typeof server.connections extends Set<infer C> ? C : never) | undefined;
    for (const connection of server.connections) newest = connection;
    if (!newest) return;
    const original: Send = newest.send.bind(newest);
    newest.send = (code, data, context) => {
      if (typeof data === 'string' && OWN_CODE.test(data)) return original(code, data, false);
      if (code === 500 && context === 'AUTH') return original(538, AUTH_NEEDS_TLS, false);
      return original(code, data, context);
    };
  };
}
