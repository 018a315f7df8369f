import type { SMTPServer, SMTPServerSession } from 'smtp-server';

/** What the deadlines are given: the idle timeout in force now (shorter under stress), and how often to look again. */
export interface ConnectionDeadlineSettings {
  /** The idle timeout in force now, in milliseconds (`stressIdleTimeout` under stress). */
  idleTimeout(): number;
  /** Whether the relay is under stress now: only then is a session that makes no progress closed. */
  stressed(): boolean;
  /**
   * A deadline is checked again at least this often (the stress idle timeout),
   * so that one armed before the relay came under stress is shortened with it.
   */
  recheckEvery: number;
  /** The clock. @default Date.now */
  now?: () => number;
}

/** smtp-server's command parser (an `SMTPStream`): not its public API, pinned by the relay's tests. */
interface CommandParser {
  /** True while the parser passes a message (DATA) on instead of reading command lines. */
  _dataMode?: boolean;
  isClosed?: boolean;
  _write?: (chunk: Buffer, encoding: BufferEncoding, next: (err?: Error | null) => void) => void;
}

/**
 * What the deadlines use of an smtp-server connection. `session` and `send`
 * are its public API; the rest is not, and is pinned by the relay's tests:
 * `_parser` (replaced after STARTTLS, by `_createParser`), `_onCommand` (each
 * command line, once whole), `_handlerPending` (a handler of the relay's has
 * not answered yet), `_dataStream` (a message is arriving), `_closing` and
 * `_closed`.
 */
interface DeadlineConnection {
  session: SMTPServerSession;
  _parser?: CommandParser | false;
  _createParser?: () => CommandParser;
  _onCommand?: (command: Buffer | string, callback?: () => void) => unknown;
  _handlerPending?: boolean;
  _dataStream?: unknown;
  _closing?: boolean;
  _closed?: boolean;
  send(code: number, data?: string | string[] | null, context?: string | false): void;
}

/** One connection's deadlines. */
interface Watched {
  connection: DeadlineConnection;
  /** When the first byte of the command line not yet complete arrived, if one is arriving. */
  lineSince: number | undefined;
  /** The shortest idle timeout in force while that line arrived: it is its deadline. */
  lineLimit: number;
  lineTimer: NodeJS.Timeout | undefined;
  /** When the session last made progress (see {@link ConnectionDeadlines}). */
  progressSince: number;
  /** Whether the client sent a command since. */
  commandsSince: boolean;
  /** When it sent its last command: a client silent for the idle timeout in force is left to the idle timeout. */
  lastCommandAt: number;
  progressTimer: NodeJS.Timeout | undefined;
  /** The command being answered (its first word), to tell which replies are progress. */
  verb: string;
}

/**
 * Deadlines on what a client owes the relay, beyond the idle timeout (which
 * any byte resets, so that a client sending one byte every few seconds, or a
 * NOOP every few seconds, would hold its connection slot for ever):
 *
 * - **a command line** must be whole within the idle timeout in force
 *   (`stressIdleTimeout` under stress) of its first byte, as Postfix's
 *   `smtpd_per_request_deadline` makes `smtpd_timeout` a deadline for a whole
 *   request. Postfix turns that on under stress only, as it also times
 *   message content over slow links; here it times command lines alone (a
 *   message is timed by `minDataRate` and `dataTimeout`), which no client
 *   takes minutes to write, so it is always on. A line that arrives while
 *   the relay is under stress keeps the stress deadline when the stress ends
 *   (closing the first dribblers ends it, which would give the rest minutes);
 * - **under stress, the session** must make progress within the stress
 *   idle timeout: authenticate (`235`), start a transaction or add a
 *   recipient (`250` to MAIL or RCPT), or send a message (the reply to its
 *   final dot). NOOP, RSET, EHLO, HELP, VRFY and refused commands are none,
 *   so they no longer keep a connection that sends no mail when others wait
 *   for a slot. Postfix bounds such commands by count
 *   (`smtpd_junk_command_limit`, 100), which leaves a slot held for many
 *   minutes; like Postfix's stress-dependent timeouts, this applies only
 *   when slots run short. A client that has been silent for the idle
 *   timeout in force is the idle timeout's to close, not this one's.
 *
 * Time the relay takes (a handler of its own not answered yet: an AUTH
 * checked with the service, a message being handed on) is not the client's:
 * a deadline that falls then is given another period. Past a deadline the
 * connection is closed with `421 4.4.2`.
 *
 * The hooks are smtp-server's connection internals (see
 * {@link DeadlineConnection}), wrapped per connection as it is made.
 */
export class ConnectionDeadlines {
  readonly #settings: ConnectionDeadlineSettings;
  readonly #now: () => number;
  readonly #watched = new WeakMap<SMTPServerSession, Watched>();

  constructor(settings: ConnectionDeadlineSettings) {
    this.#settings = settings;
    this.#now = settings.now ?? Date.now;
  }

  /** Watches every connection the server makes from now on. */
  attach(server: SMTPServer): void {
    const connect = server.connect.bind(server);
    server.connect = (socket, options) => {
      connect(socket, options);
      // connect() adds the new connection last.
      let newest: DeadlineConnection | undefined;
      for (const connection of server.connections as Set<unknown> as Set<DeadlineConnection>) newest = connection;
      if (newest) this.#watch(newest);
    };
  }

  /** Stops the deadlines of a session that closed (from `onClose`). */
  leave(session: SMTPServerSession): void {
    const watched = this.#watched.get(session);
    if (!watched) return;
    clearTimeout(watched.lineTimer);
    clearTimeout(watched.progressTimer);
    watched.lineTimer = watched.progressTimer = undefined;
    this.#watched.delete(session);
  }

  #watch(connection: DeadlineConnection): void {
    const watched: Watched = {
      connection,
      lineSince: undefined,
      lineLimit: Infinity,
      lineTimer: undefined,
      progressSince: this.#now(),
      commandsSince: false,
      lastCommandAt: 0,
      progressTimer: undefined,
      verb: '',
    };
    this.#watched.set(connection.session, watched);
    if (connection._parser) this.#watchParser(watched, connection._parser);
    const createParser = connection._createParser;
    if (typeof createParser === 'function') {
      // STARTTLS gives the TLS session a parser of its own.
      connection._createParser = () => {
        const parser = createParser.call(connection);
        this.#watchParser(watched, parser);
        return parser;
      };
    }
    const onCommand = connection._onCommand;
    if (typeof onCommand === 'function') {
      connection._onCommand = (command, callback) => {
        // A whole line arrived: its deadline is met.
        watched.lineSince = undefined;
        clearTimeout(watched.lineTimer);
        watched.lineTimer = undefined;
        watched.verb = firstWord(command);
        watched.commandsSince = true;
        watched.lastCommandAt = this.#now();
        return onCommand.call(connection, command, callback);
      };
    }
    const send = connection.send.bind(connection);
    connection.send = (code, data, context) => {
      if (code === 220 && watched.verb === '') {
        // The greeting: the session starts (the time before it is smtp-server's and onConnect's).
        watched.progressSince = this.#now();
      } else if (isProgress(watched.verb, code)) {
        watched.progressSince = this.#now();
        watched.commandsSince = false;
        // The final reply to a message is progress once: what follows is another command.
        if (watched.verb === 'DATA') watched.verb = '';
      }
      send(code, data, context);
    };
    // Armed now, whether or not the greeting is still to come (smtp-server holds it a moment, and may
    // not): a client that has sent no command is never closed by it.
    this.#armProgress(watched);
  }

  /** Times the command lines a parser reads: the first byte of a line starts its deadline. */
  #watchParser(watched: Watched, parser: CommandParser): void {
    const write = parser._write;
    if (typeof write !== 'function') return;
    parser._write = (chunk, encoding, next) => {
      if (!parser._dataMode && !parser.isClosed && watched.lineSince === undefined) {
        watched.lineSince = this.#now();
        watched.lineLimit = this.#settings.idleTimeout();
        this.#armLine(watched);
      }
      write.call(parser, chunk, encoding, next);
    };
  }

  #armLine(watched: Watched): void {
    clearTimeout(watched.lineTimer);
    const wait = Math.min(watched.lineSince! + watched.lineLimit - this.#now(), this.#settings.recheckEvery);
    watched.lineTimer = this.#timer(wait, () => {
      watched.lineTimer = undefined;
      const { connection } = watched;
      if (watched.lineSince === undefined || gone(connection)) return;
      if (connection._handlerPending || connection._dataStream) {
        // The relay's turn, or a message: the line (what is left of it) is timed afresh afterwards.
        watched.lineSince = undefined;
        return;
      }
      // A line that arrived while the relay was under stress keeps the stress deadline when the stress
      // ends: closing the first dribblers would otherwise end it, and give the others minutes again.
      watched.lineLimit = Math.min(watched.lineLimit, this.#settings.idleTimeout());
      if (watched.lineSince + watched.lineLimit > this.#now()) return this.#armLine(watched);
      connection.send(
        421,
        `4.4.2 The command line was not complete within ${seconds(watched.lineLimit)} of its first byte, closing the connection`,
      );
    });
  }

  #armProgress(watched: Watched): void {
    clearTimeout(watched.progressTimer);
    // Checked every recheckEvery at least: stress may come at any time.
    const wait = this.#settings.stressed()
      ? Math.min(this.#left(watched.progressSince), this.#settings.recheckEvery)
      : this.#settings.recheckEvery;
    watched.progressTimer = this.#timer(wait, () => {
      watched.progressTimer = undefined;
      const { connection } = watched;
      if (gone(connection)) return;
      if (connection._handlerPending || connection._dataStream) {
        // Not the client's time: another period from now.
        watched.progressSince = this.#now();
        return this.#armProgress(watched);
      }
      // A client silent since, or for the idle timeout in force, is idle: the idle timeout's business, not this one's.
      const busy = watched.commandsSince && this.#now() - watched.lastCommandAt < this.#settings.idleTimeout();
      const overdue = busy && this.#left(watched.progressSince) <= 0;
      if (!this.#settings.stressed() || !overdue) return this.#armProgress(watched);
      connection.send(
        421,
        `4.4.2 No mail sent within ${seconds(this.#settings.idleTimeout())} (no AUTH, MAIL, RCPT or message), closing the connection`,
      );
    });
  }

  /** Milliseconds left of a deadline that started at `since`, with the idle timeout in force now. */
  #left(since: number): number {
    return since + this.#settings.idleTimeout() - this.#now();
  }

  #timer(wait: number, check: () => void): NodeJS.Timeout {
    const timer = setTimeout(check, Math.max(1, wait));
    timer.unref();
    return timer;
  }
}

/** Whether a reply to `verb` shows the session moving on: AUTH accepted, MAIL or RCPT accepted, a message answered. */
function isProgress(verb: string, code: number): boolean {
  if (code === 235) return true;
  if (verb === 'MAIL' || verb === 'RCPT') return code === 250;
  return verb === 'DATA' && code !== 354 && code < 500;
}

function firstWord(command: Buffer | string): string {
  const text = typeof command === 'string' ? command : command.toString('latin1', 0, Math.min(command.length, 16));
  return text.split(' ', 1)[0]!.toUpperCase();
}

function gone(connection: DeadlineConnection): boolean {
  return Boolean(connection._closing || connection._closed);
}

function seconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}
