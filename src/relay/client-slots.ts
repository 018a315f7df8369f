import type { Socket } from 'node:net';
import type { EmlApiLogger } from '../shared/options-kit.js';
import { ClientAddressList, clientKey, unmapIpv4 } from './client-address-list.js';
import type { SmtpReply } from './smtp-replies.js';
import { LocalClientCounts, type ClientCounts } from './shared-limits.js';
import type {
  ConnectionObserver,
  SMTPServerDataStream,
  SMTPServerSession,
  SmtpConnection,
  SmtpServerAdapter,
} from './smtp-server-adapter.js';

/** The share of `maxClients` from which idle clients get `stressIdleTimeout`: before every slot is taken, unlike Postfix. */
const STRESS_SHARE = 0.8;

/** The share of `maxClients` below which stress ends: well below, so one closed client does not end it. */
const STRESS_END_SHARE = 0.6;

interface ClientSlotSettings {
  maxClients: number;
  maxClientsPerAddress: number;
  trustedNetworks: ClientAddressList;
  idleTimeout: number;
  stressIdleTimeout: number;
  dataTimeout: number;
  minDataRate: number;
  /** The proxies (`proxyProtocol`): their sockets stand for many clients, counted by the address in the header. */
  proxyProtocol: readonly string[];
  logger: EmlApiLogger;
}

/**
 * The connection slots of the relay, so that no client can starve the others (Postfix's smtpd and anvil protections):
 * `maxClientsPerAddress` counted from the socket's accept (smtp-server keeps sockets in their handshake in one
 * `maxClients` pool that one address could fill), `stressIdleTimeout` from {@link STRESS_SHARE} of `maxClients` on,
 * DATA's `minDataRate` and `dataTimeout`, and the {@link ConnectionDeadlines}.
 */
export class ClientSlots {
  readonly #settings: ClientSlotSettings;
  readonly #stressFrom: number;
  readonly #stressEndsBelow: number;
  /** Sockets open (`socket`) and sessions admitted (`session`) per client key, in this process or across processes. */
  readonly #counts: ClientCounts;
  /** How to give back the count of a socket not yet tied to its session, by {@link peerName}. */
  readonly #unclaimed = new Map<string, () => void>();
  /** The same once admitted: smtp-server's STARTTLS removes the raw socket's `close` listener; `onClose` always comes. */
  readonly #socketCounts = new WeakMap<SMTPServerSession, () => void>();
  /** The sessions admitted, with the key they count under (null on trustedNetworks: not counted). */
  readonly #admitted = new WeakMap<SMTPServerSession, string | null>();
  /** Sessions that closed before they were admitted (while the count was asked elsewhere). */
  readonly #left = new WeakSet<SMTPServerSession>();
  /** The reply that cut a session's message off for its time or rate. */
  readonly #dataCuts = new WeakMap<SMTPServerSession, SmtpReply>();
  #open = 0;
  #stressed = false;
  #server: SmtpServerAdapter | undefined;
  readonly #deadlines: ConnectionDeadlines;

  /** @param counts where the per-address counts are kept: in this process unless the processes share them */
  constructor(settings: ClientSlotSettings, counts: ClientCounts = new LocalClientCounts()) {
    this.#settings = settings;
    this.#counts = counts;
    this.#stressFrom = Math.max(1, Math.ceil(settings.maxClients * STRESS_SHARE));
    this.#stressEndsBelow = Math.min(this.#stressFrom, Math.ceil(settings.maxClients * STRESS_END_SHARE));
    this.#deadlines = new ConnectionDeadlines({
      idleTimeout: () => this.idleTimeout,
      stressed: () => this.#stressed,
      recheckEvery: settings.stressIdleTimeout,
    });
  }

  /** Whether the relay is under stress now (idle clients get `stressIdleTimeout`). */
  get stressed(): boolean {
    return this.#stressed;
  }

  /** Connections admitted and still open. */
  get open(): number {
    return this.#open;
  }

  get idleTimeout(): number {
    return this.#stressed ? this.#settings.stressIdleTimeout : this.#settings.idleTimeout;
  }

  /** The server whose connections the slots time; before it, sessions are counted but not timed. */
  attach(server: SmtpServerAdapter): void {
    this.#server = server;
    this.#deadlines.attach(server);
    this.#guardAccept(server);
  }

  /**
   * Admits a new session (from `onConnect`), or says why not.
   * @returns undefined when admitted, else the `421` reply; a promise of it when the processes share the counts
   */
  admit(session: SMTPServerSession): SmtpReply | undefined | Promise<SmtpReply | undefined> {
    const address = session.remoteAddress;
    const name = peerName(address, session.remotePort);
    const socketCount = this.#unclaimed.get(name);
    if (socketCount) {
      this.#unclaimed.delete(name);
      this.#socketCounts.set(session, socketCount);
    }
    if (this.#settings.trustedNetworks.includes(address)) return this.#enter(session, null, true);
    const key = clientKey(address);
    const taken = this.#counts.take('session', key, this.#settings.maxClientsPerAddress);
    return typeof taken === 'boolean'
      ? this.#enter(session, key, taken)
      : taken.then((ok) => this.#enter(session, key, ok));
  }

  #enter(session: SMTPServerSession, key: string | null, taken: boolean): SmtpReply | undefined {
    if (!taken) return this.#tooMany();
    if (this.#left.has(session)) {
      if (key !== null) this.#counts.give('session', key);
      return this.#tooMany();
    }
    this.#admitted.set(session, key);
    this.#open++;
    this.#checkStress();
    // A session admitted under stress starts with the short timeout too.
    if (this.#stressed) this.#server?.connectionOf(session)?.setIdleTimeout(this.#settings.stressIdleTimeout);
    return undefined;
  }

  /** Frees the slot of a session that closed (from `onClose`); sessions never admitted are ignored. */
  leave(session: SMTPServerSession): void {
    this.#deadlines.leave(session);
    this.#socketCounts.get(session)?.();
    this.#socketCounts.delete(session);
    const key = this.#admitted.get(session);
    if (key === undefined) {
      this.#left.add(session);
      return;
    }
    this.#admitted.delete(session);
    if (key !== null) this.#counts.give('session', key);
    this.#open--;
    this.#checkStress();
  }

  /**
   * Times a message while it arrives against `minDataRate` and `dataTimeout` (`421 4.4.2` past them).
   * @returns stops the timer (call it once the message is in, or failed)
   */
  watchData(session: SMTPServerSession, stream: SMTPServerDataStream): () => void {
    const { dataTimeout, minDataRate } = this.#settings;
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const allowed = () => Math.min(dataTimeout, this.idleTimeout + (stream.byteLength / minDataRate) * 1000);
    const check = () => {
      const left = allowed() - (Date.now() - started);
      if (left > 0) {
        timer = setTimeout(check, left);
        timer.unref();
        return;
      }
      timer = undefined;
      const cut: SmtpReply = {
        code: 421,
        text: `4.4.2 The message did not arrive in time (at least ${minDataRate} bytes a second, all of it within ${seconds(dataTimeout)}), closing the connection`,
      };
      this.#dataCuts.set(session, cut);
      this.#server?.connectionOf(session)?.reply(cut.code, cut.text);
      // The message ends with the reply: smtp-server would end its stream only once the client closes its side too.
      stream.destroy();
    };
    timer = setTimeout(check, allowed());
    timer.unref();
    const stop = () => {
      if (timer) clearTimeout(timer);
      timer = undefined;
      stream.off('end', stop);
      stream.off('close', stop);
    };
    stream.once('end', stop);
    stream.once('close', stop);
    return stop;
  }

  /** The reply {@link watchData} cut the session's message off with, if it did. */
  dataCut(session: SMTPServerSession): SmtpReply | undefined {
    return this.#dataCuts.get(session);
  }

  /** The per-address cap before smtp-server's accept: `421 4.7.0`, or closed on implicit TLS (nothing can be said yet). */
  #guardAccept(server: SmtpServerAdapter): void {
    const handshake = server.implicitTls;
    const proxies = new ClientAddressList(this.#settings.proxyProtocol, 'proxyProtocol');
    server.gateAccept((socket, hand) => {
      const address = socket.remoteAddress ?? '';
      // A proxy's sockets are counted by the address its header gives, in onConnect.
      if (this.#settings.trustedNetworks.includes(address) || proxies.includes(address)) return hand(socket);
      const key = clientKey(address);
      const taken = this.#counts.take('socket', key, this.#settings.maxClientsPerAddress);
      if (typeof taken === 'boolean') return taken ? hand(this.#counted(socket, key)) : this.#refuse(socket, handshake);
      // Asked across processes: what the client sends meanwhile is buffered, and it may close.
      const ignore = () => undefined;
      socket.on('error', ignore);
      void taken.then((ok) => {
        socket.off('error', ignore);
        if (!ok) return this.#refuse(socket, handshake);
        if (socket.destroyed) return this.#counts.give('socket', key);
        hand(this.#counted(socket, key));
      });
    });
  }

  /** Gives the socket's slot back when it closes, or when its session does (whichever tells first). */
  #counted(socket: Socket, key: string): Socket {
    const name = peerName(socket.remoteAddress ?? '', socket.remotePort);
    let counted = true;
    const uncount = () => {
      if (!counted) return;
      counted = false;
      if (this.#unclaimed.get(name) === uncount) this.#unclaimed.delete(name);
      this.#counts.give('socket', key);
    };
    this.#unclaimed.set(name, uncount);
    socket.once('close', uncount);
    return socket;
  }

  #refuse(socket: Socket, handshake: boolean): void {
    this.#settings.logger.warn({ client: socket.remoteAddress }, 'Connection refused: too many from the address');
    socket.on('error', () => undefined);
    if (handshake) {
      socket.destroy();
      return;
    }
    socket.end(`421 ${this.#tooMany().text}\r\n`);
    // A client that never closes its side is not waited for.
    setTimeout(() => socket.destroy(), 1_000).unref();
  }

  #tooMany(): SmtpReply {
    return {
      code: 421,
      text: `4.7.0 Too many connections from your address (at most ${this.#settings.maxClientsPerAddress}), try again later`,
    };
  }

  /** Enters or leaves stress, giving every connection the idle timeout in force. */
  #checkStress(): void {
    const stressed = this.#stressed ? this.#open >= this.#stressEndsBelow : this.#open >= this.#stressFrom;
    if (stressed === this.#stressed) return;
    this.#stressed = stressed;
    this.#server?.setIdleTimeout(this.idleTimeout);
  }
}

/** A connected peer's address and port: names its socket among those open, as its session reports them. */
function peerName(address: string, port: number | undefined): string {
  return `${unmapIpv4(address)} ${port ?? 0}`;
}

interface ConnectionDeadlineSettings {
  idleTimeout(): number;
  /** Whether the relay is under stress now: only then is a session that makes no progress closed. */
  stressed(): boolean;
  /** A deadline is checked again this often at least, so that stress shortens one armed before it. */
  recheckEvery: number;
  now?: () => number;
}

interface Watched {
  connection: SmtpConnection;
  /** When the first byte of the command line not yet complete arrived, if one is arriving. */
  lineSince: number | undefined;
  /** The shortest idle timeout in force while that line arrived: it is its deadline. */
  lineLimit: number;
  lineTimer: NodeJS.Timeout | undefined;
  /** When the session last made progress (see {@link ConnectionDeadlines}). */
  progressSince: number;
  commandsSince: boolean;
  /** When it sent its last command: a client silent for the idle timeout in force is left to the idle timeout. */
  lastCommandAt: number;
  progressTimer: NodeJS.Timeout | undefined;
  /** The command being answered (its first word), to tell which replies are progress. */
  verb: string;
}

/**
 * Deadlines beyond the idle timeout, which any byte resets (a byte or a NOOP every few seconds would hold a slot for
 * ever); past one, `421 4.4.2`. A command line must be whole within the idle timeout in force at its first byte
 * (Postfix's `smtpd_per_request_deadline`, always on since it times command lines alone). Under stress, the session
 * must make progress (`235`, `250` to MAIL or RCPT, a message answered) within the stress idle timeout; NOOP, RSET
 * and refused commands are not progress. Time the relay takes is not the client's: such a deadline gets another period.
 */
export class ConnectionDeadlines {
  readonly #settings: ConnectionDeadlineSettings;
  readonly #now: () => number;
  readonly #watched = new WeakMap<SMTPServerSession, Watched>();

  constructor(settings: ConnectionDeadlineSettings) {
    this.#settings = settings;
    this.#now = settings.now ?? Date.now;
  }

  attach(server: SmtpServerAdapter): void {
    server.watchConnections((connection) => this.#watch(connection));
  }

  leave(session: SMTPServerSession): void {
    const watched = this.#watched.get(session);
    if (!watched) return;
    clearTimeout(watched.lineTimer);
    clearTimeout(watched.progressTimer);
    watched.lineTimer = watched.progressTimer = undefined;
    this.#watched.delete(session);
  }

  #watch(connection: SmtpConnection): ConnectionObserver {
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
    // Armed before the greeting: a client that has sent no command is never closed by it.
    this.#armProgress(watched);
    return {
      // The first byte of a command line starts its deadline.
      commandBytes: () => {
        if (watched.lineSince !== undefined) return;
        watched.lineSince = this.#now();
        watched.lineLimit = this.#settings.idleTimeout();
        this.#armLine(watched);
      },
      command: (line) => {
        watched.lineSince = undefined;
        clearTimeout(watched.lineTimer);
        watched.lineTimer = undefined;
        watched.verb = firstWord(line);
        watched.commandsSince = true;
        watched.lastCommandAt = this.#now();
      },
      reply: (code) => {
        if (code === 220 && watched.verb === '') {
          // The time before the greeting is smtp-server's and onConnect's.
          watched.progressSince = this.#now();
        } else if (isProgress(watched.verb, code)) {
          watched.progressSince = this.#now();
          watched.commandsSince = false;
          if (watched.verb === 'DATA') watched.verb = '';
        }
      },
    };
  }

  #armLine(watched: Watched): void {
    clearTimeout(watched.lineTimer);
    const wait = Math.min(watched.lineSince! + watched.lineLimit - this.#now(), this.#settings.recheckEvery);
    watched.lineTimer = this.#timer(wait, () => {
      watched.lineTimer = undefined;
      const { connection } = watched;
      if (watched.lineSince === undefined || connection.gone) return;
      if (connection.relayTurn) {
        // The relay's turn, or a message: what is left of the line is timed afresh afterwards.
        watched.lineSince = undefined;
        return;
      }
      // A line begun under stress keeps the stress deadline: closing the first dribblers ends the
      // stress, which would give the others minutes again.
      watched.lineLimit = Math.min(watched.lineLimit, this.#settings.idleTimeout());
      if (watched.lineSince + watched.lineLimit > this.#now()) return this.#armLine(watched);
      connection.reply(
        421,
        `4.4.2 The command line was not complete within ${seconds(watched.lineLimit)} of its first byte, closing the connection`,
      );
    });
  }

  #armProgress(watched: Watched): void {
    clearTimeout(watched.progressTimer);
    const wait = this.#settings.stressed()
      ? Math.min(this.#left(watched.progressSince), this.#settings.recheckEvery)
      : this.#settings.recheckEvery;
    watched.progressTimer = this.#timer(wait, () => {
      watched.progressTimer = undefined;
      const { connection } = watched;
      if (connection.gone) return;
      if (connection.relayTurn) {
        watched.progressSince = this.#now();
        return this.#armProgress(watched);
      }
      // A silent client is the idle timeout's to close.
      const busy = watched.commandsSince && this.#now() - watched.lastCommandAt < this.#settings.idleTimeout();
      const overdue = busy && this.#left(watched.progressSince) <= 0;
      if (!this.#settings.stressed() || !overdue) return this.#armProgress(watched);
      connection.reply(
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

function seconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}
