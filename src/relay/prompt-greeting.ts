import type { SMTPServer } from 'smtp-server';

/**
 * What the relay uses of an smtp-server connection to greet it. None of it is
 * smtp-server's public API: it reads the same in 3.13.0 (the oldest release
 * the peer range allows) and 3.21.6, and test/relay/greeting.test.ts pins it
 * for the installed release:
 *
 * - `connect(socket)` adds the connection, whose `_socket` is that socket, last
 *   to `server.connections`, and calls its `init()`, which arms a 100 ms timer that calls
 *   `this.connectionReady()`, looked up on the connection when it fires (a
 *   connection over `maxClients` is answered `421` and removed instead);
 * - `connectionReady()` runs `onConnect`, sets `_ready` and sends the `220`
 *   greeting; before it the session holds only its `id` (no `envelope`);
 * - a command that arrives while `_ready` is false is answered
 *   `421 <name> You talk too soon` and the connection is closed.
 */
interface GreetingConnection {
  _socket?: unknown;
  connectionReady?: (next?: () => void) => void;
  _ready?: boolean;
  _closing?: boolean;
  _closed?: boolean;
  session?: { envelope?: unknown };
}

/**
 * Greets each client as soon as the bytes that came with its connection have
 * been read, instead of after smtp-server's fixed 100 ms pause.
 *
 * smtp-server waits 100 ms before its greeting to catch early talkers
 * (spam software that sends its commands without waiting for the greeting:
 * `421 You talk too soon`). That pause caps a client that opens a connection
 * per message, as cron, PHP's `mail()` and most scripts do, at 10 messages a
 * second per connection, with the relay idle meanwhile; Postfix's smtpd greets at once
 * (early-talker tests live in postscreen, in front of an MX). The relay greets
 * once the event loop has read what the client sent along with its connection,
 * so a client whose commands were already there when the connection was accepted (the
 * early talker that blasts its whole dialog at once) still gets smtp-server's
 * `421 ... You talk too soon`; one that starts talking within the next 100 ms
 * but after the greeting left is no longer caught. A relay open to the
 * Internet should sit behind a firewall or connection rate limit anyway (see
 * "Hostile clients" in docs/relay.md).
 *
 * The 100 ms timer smtp-server armed still fires, and finds the greeting
 * already done. A connection whose internals are not as pinned above is left
 * to smtp-server's own timer: greeted 100 ms later, as before.
 */
export function greetPromptly(server: SMTPServer): void {
  const connect = server.connect.bind(server);
  server.connect = (socket, options) => {
    connect(socket, options);
    // connect() adds the new connection last.
    let newest: GreetingConnection | undefined;
    for (const connection of server.connections as Set<unknown> as Set<GreetingConnection>) newest = connection;
    const connection = newest;
    const ready = connection?.connectionReady;
    // This socket's connection (one refused for maxClients in init() has already left the set),
    // not greeted yet.
    if (
      !connection ||
      connection._socket !== socket ||
      typeof ready !== 'function' ||
      connection._ready !== false ||
      connection.session?.envelope !== undefined ||
      connection._closing ||
      connection._closed
    ) {
      return;
    }
    let greeted = false;
    const greetOnce = (next?: () => void) => {
      if (greeted) return;
      greeted = true;
      ready.call(connection, next);
    };
    // smtp-server's timer calls connection.connectionReady(): it now finds the greeting done.
    connection.connectionReady = greetOnce;
    // Bytes the client sent along with its connection (before it could have seen a greeting) are
    // read in the event loop's next poll phase, and reach smtp-server's parser while `_ready` is
    // still false: its "You talk too soon". The greeting waits for that phase: two turns of the
    // loop (connect() runs from a setImmediate for a plain connection, from the handshake's
    // callback with implicit TLS; the second turn covers both), microseconds on an idle relay.
    setImmediate(() => setImmediate(() => greetOnce()));
  };
}
