import type { AddressInfo, Socket } from 'node:net';
import type * as SmtpServerModule from 'smtp-server';
import type { SMTPServer, SMTPServerOptions, SMTPServerSession } from 'smtp-server';
import { requirePeer, type EmlApiLogger } from '../shared/options-kit.js';
import type { SmtpReply } from './smtp-replies.js';

export type { SMTPServerAddress, SMTPServerAuthentication, SMTPServerDataStream, SMTPServerSession } from 'smtp-server';

/** The smtp-server releases whose internals test/relay/smtp-server-adapter.test.ts checks; the peer range too. */
export const SUPPORTED_SMTP_SERVER = '^3.21.1';

type SmtpServerPeer = typeof SmtpServerModule;

let loaded: SmtpServerPeer | undefined;

/**
 * Loads the optional peer `smtp-server` when the relay first needs it, so the CLI works without it.
 * @throws {EmlApiError} `ECONFIG` saying what to install when it is missing
 */
export function loadSmtpServer(): SmtpServerPeer {
  loaded ??= requirePeer<SmtpServerPeer>(
    'smtp-server',
    'smtp-server',
    'The SMTP relay (nodemailer-eml-api/relay, eml-api relay)',
  );
  return loaded;
}

export type SessionHandlers = Required<
  Pick<SMTPServerOptions, 'onConnect' | 'onSecure' | 'onAuth' | 'onMailFrom' | 'onRcptTo' | 'onData' | 'onClose'>
>;

/** One client connection, as the relay drives it. */
export interface SmtpConnection {
  readonly session: SMTPServerSession;
  /** Sends a reply; `421` closes the connection. */
  reply(code: number, text: string): void;
  setIdleTimeout(ms: number): void;
  /** Whether the client waits for the relay: a handler has not answered, or a message is arriving or being decided. */
  readonly relayTurn: boolean;
  /** Closing or closed. */
  readonly gone: boolean;
}

/** What the relay is told of a connection's traffic, before smtp-server acts on it. */
export interface ConnectionObserver {
  /** Bytes arrived while smtp-server reads command lines (not a message's). */
  commandBytes(): void;
  /** A whole command line, about to be dispatched. */
  command(line: Buffer | string): void;
  /** A reply about to be sent, with the code it was sent with. */
  reply(code: number): void;
}

/** Hands a socket on to smtp-server (`accept`), or closes it. */
type AcceptGate = (socket: Socket, accept: (socket: Socket) => void) => void;

interface SmtpServerAdapterOptions {
  /** Milliseconds a socket has for its implicit TLS handshake or its PROXY header. */
  handshakeTimeout: number;
  /** The reply to AUTH where the session disabled it (smtp-server answers `500` "command not recognized"). */
  authDisabledReply: SmtpReply;
  /** Told once of each internal smtp-server lacks. */
  logger: EmlApiLogger;
}

/** smtp-server's command parser (`SMTPStream`). */
interface CommandParser {
  _dataMode?: boolean;
  isClosed?: boolean;
  _write?: (chunk: Buffer, encoding: BufferEncoding, next: (err?: Error | null) => void) => void;
}

/** `SMTPConnection` as the adapter uses it: `session` and `send` are public, the internals optional (a release without one loses that patch alone). */
interface Connection {
  session: SMTPServerSession;
  send(code: number, data?: string | string[] | null, context?: string | false): void;
  connectionReady?: (next?: () => void) => void;
  _socket?: Socket;
  _parser?: CommandParser | false;
  _createParser?: () => CommandParser;
  _onCommand?: (command: Buffer | string, callback?: () => void) => unknown;
  _ready?: boolean;
  _handlerPending?: boolean;
  _dataStream?: unknown;
  _closing?: boolean;
  _closed?: boolean;
}

/** A reply text that starts with its own enhanced status code (RFC 3463), e.g. `4.4.1 ...`. */
const OWN_CODE = /^[245]\.\d{1,3}\.\d{1,3} /;

/** The command line smtp-server answers, per session: its handlers get the parsed address only. */
const commandLines = new WeakMap<SMTPServerSession, Buffer | string>();

/** The command line smtp-server is answering for the session (in MAIL and RCPT handlers), as the client sent it. */
export function commandLineOf(session: SMTPServerSession): Buffer | string | undefined {
  return commandLines.get(session);
}

/**
 * An smtp-server with what the relay needs beyond its options; the only module that touches its
 * internals (docs/relay.md, "What the relay changes in smtp-server"). Each patch keeps smtp-server's
 * behaviour where its internal is missing, and says so once.
 */
export class SmtpServerAdapter {
  readonly #server: SMTPServer;
  readonly #options: SmtpServerAdapterOptions;
  readonly #connections = new WeakMap<SMTPServerSession, { raw: Connection; handle: SmtpConnection }>();
  #watch: ((connection: SmtpConnection) => ConnectionObserver) | undefined;
  #gate: AcceptGate = (socket, accept) => accept(socket);
  readonly #missing = new Set<string>();
  #listening = false;

  /** @throws {EmlApiError} `ECONFIG` when smtp-server is not installed */
  constructor(options: SMTPServerOptions, adapter: SmtpServerAdapterOptions) {
    const { SMTPServer: Server } = loadSmtpServer();
    this.#server = new Server(options);
    this.#options = adapter;
    this.#patchConnect();
    this.#patchAccept();
  }

  /** Whether the listener starts with a TLS handshake (nothing can be written to a socket before it). */
  get implicitTls(): boolean {
    return Boolean(this.#server.options.secure && !this.#server.options.needsUpgrade);
  }

  get connectionCount(): number {
    return this.#server.connections.size;
  }

  /** Makes `watch` observe every connection from now on, from before its greeting. */
  watchConnections(watch: (connection: SmtpConnection) => ConnectionObserver): void {
    this.#watch = watch;
  }

  gateAccept(gate: AcceptGate): void {
    this.#gate = gate;
  }

  connectionOf(session: SMTPServerSession): SmtpConnection | undefined {
    const entry = this.#connections.get(session);
    return entry && this.#server.connections.has(entry.raw as never) ? entry.handle : undefined;
  }

  /** Sets the idle timeout of every connection, open or to come. */
  setIdleTimeout(ms: number): void {
    // smtp-server reads it each time it arms a connection's timeout.
    this.#server.options.socketTimeout = ms;
    for (const connection of this.#server.connections as Set<unknown> as Set<Connection>) {
      connection._socket?.setTimeout(ms);
    }
  }

  /** Listens, or rejects with the listener's error (which {@link onError} is not told of). */
  listen(port: number, host: string): Promise<void> {
    const listener = this.#server.server;
    this.#listening = true;
    return new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      this.#server.listen(port, host, () => {
        listener.off('error', reject);
        resolve();
      });
    }).finally(() => (this.#listening = false));
  }

  address(): AddressInfo {
    return this.#server.server.address() as AddressInfo;
  }

  /** Receives the errors of connections and of the listener once it listens. */
  onError(listener: (err: Error) => void): void {
    this.#server.on('error', (err: Error) => {
      if (!this.#listening) listener(err);
    });
  }

  /** Accepts no more connections; those open go on. */
  stopAccepting(): void {
    this.#server.server.close();
  }

  /** Closes the listener and every connection still open (`421`, after the server's `closeTimeout`). */
  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  #patchConnect(): void {
    const server = this.#server;
    const connect = server.connect.bind(server);
    server.connect = (socket, options) => {
      connect(socket, options);
      // connect() adds the new connection last; one refused for maxClients has left the set already.
      let newest: Connection | undefined;
      for (const connection of server.connections as Set<unknown> as Set<Connection>) newest = connection;
      if (newest && !this.#connections.has(newest.session)) this.#adopt(newest, socket);
    };
  }

  #adopt(connection: Connection, socket: Socket): void {
    const handle: SmtpConnection = {
      session: connection.session,
      reply: (code, text) => connection.send(code, text),
      setIdleTimeout: (ms) => connection._socket?.setTimeout(ms),
      get relayTurn() {
        return Boolean(connection._handlerPending || connection._dataStream);
      },
      get gone() {
        return Boolean(connection._closing || connection._closed);
      },
    };
    this.#connections.set(connection.session, { raw: connection, handle });
    const observer = this.#watch?.(handle);
    const { authDisabledReply } = this.#options;
    const send = connection.send.bind(connection);
    connection.send = (code, data, context) => {
      observer?.reply(code);
      if (typeof data === 'string' && OWN_CODE.test(data)) return send(code, data, false);
      if (code === 500 && context === 'AUTH') return send(authDisabledReply.code, authDisabledReply.text, false);
      send(code, data, context);
    };
    const onCommand = connection._onCommand;
    if (typeof onCommand === 'function') {
      connection._onCommand = (command, callback) => {
        observer?.command(command);
        commandLines.set(connection.session, command);
        return onCommand.call(connection, command, callback);
      };
    }
    if (observer) {
      if (connection._parser) watchParser(connection._parser, observer);
      const createParser = connection._createParser;
      if (typeof createParser === 'function') {
        // STARTTLS gives the TLS session a parser of its own.
        connection._createParser = () => watchParser(createParser.call(connection), observer);
      }
    }
    this.#report([
      typeof onCommand === 'function' ? '' : '_onCommand (MAIL and RCPT as written, command deadlines)',
      connection._parser && typeof connection._parser._write === 'function'
        ? ''
        : '_parser._write (command-line deadline)',
      typeof connection._createParser === 'function' ? '' : '_createParser (deadlines after STARTTLS)',
      typeof connection._handlerPending === 'boolean' && connection._dataStream === false
        ? ''
        : "_handlerPending, _dataStream (the relay's turn)",
      greetPromptly(connection, socket) ? '' : 'connectionReady, _ready, _socket (prompt greeting)',
    ]);
  }

  /** Warns once of each internal missing: the relay then keeps smtp-server's own behaviour there. */
  #report(missing: string[]): void {
    const fresh = missing.filter((name) => name !== '' && !this.#missing.has(name));
    if (fresh.length === 0) return;
    for (const name of fresh) this.#missing.add(name);
    this.#options.logger.warn(
      { missing: fresh.join('; '), supported: SUPPORTED_SMTP_SERVER },
      "smtp-server lacks internals the relay patches: it keeps smtp-server's own behaviour there",
    );
  }

  #patchAccept(): void {
    const listener = this.#server.server;
    const accept = listener.listeners('connection') as ((socket: Socket) => void)[];
    listener.removeAllListeners('connection');
    const hand = (socket: Socket) => {
      for (const onConnection of accept) onConnection.call(listener, socket);
      this.#handshakeDeadline(socket);
    };
    listener.on('connection', (socket: Socket) => this.#gate(socket, hand));
    const pending = (this.#server as unknown as { _pendingSockets?: unknown })._pendingSockets;
    this.#report([
      accept.length === 1 ? '' : "one 'connection' listener on server.server (per-address cap from accept)",
      pending instanceof Map ? '' : '_pendingSockets (tlsHandshake timeout)',
    ]);
  }

  /**
   * Closes a socket still in its TLS handshake or PROXY header after `handshakeTimeout` (smtp-server
   * gives it the idle timeout). `_pendingSockets` maps it to the TLS socket, the one to destroy.
   */
  #handshakeDeadline(socket: Socket): void {
    const pending = (this.#server as unknown as { _pendingSockets?: unknown })._pendingSockets;
    if (!(pending instanceof Map) || !pending.has(socket)) return;
    const timer = setTimeout(() => {
      const top = pending.get(socket) as Socket | undefined;
      if (top) top.destroy();
    }, this.#options.handshakeTimeout);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  }
}

/** Tells the observer of the bytes a parser reads while it reads command lines. */
function watchParser(parser: CommandParser, observer: ConnectionObserver): CommandParser {
  const write = parser._write;
  if (typeof write !== 'function') return parser;
  parser._write = (chunk, encoding, next) => {
    if (!parser._dataMode && !parser.isClosed) observer.commandBytes();
    write.call(parser, chunk, encoding, next);
  };
  return parser;
}

/**
 * Greets the client once the bytes sent with its connection have been read, instead of after smtp-server's fixed 100
 * ms early-talker pause, which caps a client that connects per message (cron, PHP's `mail()`) at 10 messages a
 * second. A client that sends its dialog with the connection still gets `421 You talk too soon`: a command arriving
 * while `_ready` is false gets it, and `connectionReady()` (timed by `init()`) sets `_ready` and sends the `220`.
 */
function greetPromptly(connection: Connection, socket: Socket): boolean {
  const ready = connection.connectionReady;
  if (
    connection._socket !== socket ||
    typeof ready !== 'function' ||
    connection._ready !== false ||
    connection.session.envelope !== undefined ||
    connection._closing ||
    connection._closed
  ) {
    return false;
  }
  let greeted = false;
  const greetOnce = (next?: () => void) => {
    if (greeted) return;
    greeted = true;
    ready.call(connection, next);
  };
  // smtp-server's timer looks this up when it fires, and finds the greeting done.
  connection.connectionReady = greetOnce;
  // Bytes sent with the connection are read in the next poll phase and must reach the parser while
  // `_ready` is false. Two turns: connect() runs from a setImmediate (plain) or the handshake callback (TLS).
  setImmediate(() => setImmediate(() => greetOnce()));
  return true;
}
