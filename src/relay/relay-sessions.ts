import type { EmlApiClient } from '../client/eml-api-client.js';
import { findForbiddenCharacter, isValidAddress } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import {
  type KeyClient,
  type KeyClients,
  AuthFailureBudget,
  failureFingerprint,
  MAX_PASSWORD_LENGTH,
} from './relay-users.js';
import {
  withMessageLogFields,
  type MessageDestination,
  type MessageSender,
  type UploadShares,
} from './message-destination.js';
import { keepRcptSpelling, mailFromSpelling, mailParameterRefusal, rcptParameterRefusal } from './envelope-commands.js';
import { MessageIdentities } from './message-identities.js';
import { receiveMessage, type ReceiveOutcome } from './receive-message.js';
import type { RelaySettings } from './relay-options.js';
import { redact } from '../http/request-error.js';
import { SignalFanout } from '../http/requester.js';
import type { ClientSlots } from './client-slots.js';
import {
  acceptedReply,
  authFailureReply,
  isInternalError,
  relayFailureReply,
  replyError,
  SHUTTING_DOWN_TEXT,
  type SmtpReply,
} from './smtp-replies.js';
import { clientKey, type ClientAddressList } from './client-address-list.js';
import { asMailparserReads } from './relay-headers.js';
import {
  mailFromRefusal,
  senderRefusalOf,
  type SenderList,
  type SenderRefusal,
  type SenderRefusalReason,
} from './sender-lists.js';
import type { AuthBudget, ClientCounts } from './shared-limits.js';
import type {
  SessionHandlers,
  SmtpConnection,
  SMTPServerAuthentication,
  SMTPServerDataStream,
  SMTPServerSession,
} from './smtp-server-adapter.js';

/** Failed AUTHs after which a connection is closed (`421`): each one costs the service a request. */
const MAX_AUTH_FAILURES = 3;

const PASSWORD_TOO_LONG: SmtpReply = {
  code: 535,
  text: `5.7.8 Authentication credentials invalid: the password is too long to be an API key (over ${MAX_PASSWORD_LENGTH} characters)`,
};

/** What the session handlers share with the relay that runs them. */
export interface RelayState {
  readonly settings: RelaySettings;
  readonly keyClients: KeyClients;
  readonly relayClient: EmlApiClient | undefined;
  readonly relaySecret: Buffer | undefined;
  /** Whether a password is the relay's own key (compared in constant time; always false without one). */
  readonly isOwnKey: (password: string) => boolean;
  /** The login of a client that AUTHs with the relay's own key: its fingerprint (`key:...`). */
  readonly relayKeyLogin: string | undefined;
  readonly destination: MessageDestination;
  readonly shares: UploadShares;
  readonly slots: ClientSlots;
  /** Where the AUTH failure budgets are kept, when not in this process alone. */
  readonly counts?: ClientCounts;
  readonly identities?: MessageIdentities;
  /** Aborted by `close({ abort: true })`. */
  readonly signal: AbortSignal;
  /** Aborted by any close(): messages still arriving are given up. */
  readonly arriving: AbortSignal;
  /** The open connection of a session, to answer a client that is still sending its message. */
  connectionOf(session: SMTPServerSession): SmtpConnection | undefined;
  /** True once close() was called: new transactions are refused with `421`. */
  closing(): boolean;
  /** Registers a message in progress, resolving to how it ended, so close() waits for it and counts it. */
  track(work: Promise<MessageOutcome>): void;
  /** Counts a sender refused for not being the login's (the metrics), when the relay counts. */
  senderRefused?(reason: SenderRefusalReason, login: string | undefined): void;
}

/** How a message ended: `250`, refused, or refused as given up by the relay's stop ("the relay is shutting down"). */
export type MessageOutcome = 'accepted' | 'refused' | 'given-up';

/** What the relay keeps per connection (the session object lives as long as the connection). */
interface SessionState {
  held: KeyClient | undefined;
  authFailures: number;
  /** The connection has closed (an AUTH check may still answer after that). */
  closed: boolean;
}

/** The one reply to credentials refused, whatever was wrong with them (the log says what). */
const BAD_PASSWORD: SmtpReply = { code: 535, text: '5.7.8 Authentication credentials invalid' };

const WRONG_PASSWORD: SmtpReply = {
  code: 535,
  text: '5.7.8 Authentication credentials invalid: not the password of this relay user',
};

const NOT_A_RELAY_USER: SmtpReply = {
  code: 535,
  text: '5.7.8 Authentication credentials invalid: this relay stores mail for its own workers, and accepts only its users and its own key, not another API key',
};

const SHUTTING_DOWN: SmtpReply = { code: 421, text: SHUTTING_DOWN_TEXT };

/**
 * How a send is settled whose client left before reading its 250: an outcome the client does not
 * know. The message arrived whole, so not `ESTREAM`: the client's connection closed.
 */
const CLIENT_LEFT = new EmlApiError('ECONNECTION', 'the client left before the reply', { permanent: false });

/**
 * The smtp-server handlers of the relay: who may AUTH and send, the key a session sends with, and each message from
 * DATA to its destination, with the reply an MTA expects.
 */
export function relaySessionHandlers(relay: RelayState): SessionHandlers {
  const { settings, keyClients, logger } = { ...relay, logger: relay.settings.logger };
  const policy: RelayPolicy = {
    hasOwnKey: relay.relayClient !== undefined,
    hasTls: settings.tls !== undefined,
    hasUsers: settings.users !== undefined,
    storing: settings.queue !== undefined,
    allowUnauthenticatedFrom: settings.allowUnauthenticatedFrom,
    trustedNetworks: settings.trustedNetworks,
  };
  const sessions = new WeakMap<SMTPServerSession, SessionState>();
  const signals = new SignalFanout();
  const identities = relay.identities ?? new MessageIdentities();
  const stateOf = (session: SMTPServerSession): SessionState => {
    let state = sessions.get(session);
    if (!state) sessions.set(session, (state = { held: undefined, authFailures: 0, closed: false }));
    return state;
  };
  // The per-session command list also decides what EHLO advertises.
  const commandsFor = (session: SMTPServerSession): string[] => [
    ...(policy.hasTls ? [] : ['STARTTLS']),
    ...(authOffered(session, policy) ? [] : ['AUTH']),
  ];
  // Store-and-forward: every message leaves with the outbox workers' key, whoever AUTHed.
  const storing = settings.queue !== undefined;
  // A guessing storm from one address stops every AUTH of it; one user name's failures stop only its wrong passwords.
  const window = settings.authFailureWindow;
  const addressFailures: AuthBudget =
    relay.counts?.authBudget('address', { limit: settings.maxAuthFailuresPerAddress, window }) ??
    new AuthFailureBudget({ limit: settings.maxAuthFailuresPerAddress, window });
  const userFailures: AuthBudget =
    relay.counts?.authBudget('user', { limit: settings.maxAuthFailures, window }) ??
    new AuthFailureBudget({ limit: settings.maxAuthFailures, window });
  // A session's sender list: its login's, or without AUTH (on allowUnauthenticatedFrom) the allowed clients'.
  const sendersOf = (session: SMTPServerSession): SenderList | undefined => {
    const user = session.user as Partial<SessionUser> | undefined;
    return typeof user === 'object' && user !== null ? user.senders : settings.allowedSenders;
  };
  const refuseSender = (refusal: SenderRefusal, session: SMTPServerSession) => {
    const login = sessionLogin(session);
    relay.senderRefused?.(refusal.reason, login);
    logger.warn(
      {
        client: session.remoteAddress,
        session: session.id,
        ...(login === undefined ? {} : { login }),
        reason: refusal.reason,
        sender: refusal.address,
      },
      "Sender refused: not the login's",
    );
  };
  const release = (state: SessionState) => {
    if (state.held) keyClients.release(state.held);
    state.held = undefined;
  };

  return {
    async onConnect(session, callback) {
      if (relay.closing()) return callback(replyError(SHUTTING_DOWN));
      const refusal = await relay.slots.admit(session);
      if (refusal) {
        logger.warn(
          { client: session.remoteAddress, session: session.id },
          'Connection refused: too many from the address',
        );
        return callback(replyError(refusal));
      }
      session.disabledCommands = commandsFor(session);
      relay.shares.join(session, clientKey(session.remoteAddress));
      callback();
    },
    onSecure(_socket, session, callback) {
      // smtp-server forgets an AUTH made before STARTTLS (RFC 3207 4.2); so does the relay.
      const state = sessions.get(session);
      if (state) release(state);
      relay.shares.join(session, clientKey(session.remoteAddress));
      session.disabledCommands = commandsFor(session);
      callback();
    },
    async onAuth(auth: SMTPServerAuthentication, session, callback) {
      const state = stateOf(session);
      const refuse = (reply: SmtpReply) => callback(null, { message: reply.text, responseCode: reply.code });
      if (!authOffered(session, policy)) return refuse({ code: 538, text: '5.7.11 Encryption required for AUTH' });
      // RFC 4954 4: its MAIL FROM was checked against the sender list of the session before this AUTH.
      if (session.envelope.mailFrom) {
        return refuse({ code: 503, text: '5.5.1 AUTH is not permitted during a mail transaction (RSET first)' });
      }
      if (auth.method !== 'PLAIN' && auth.method !== 'LOGIN') {
        return refuse({ code: 504, text: '5.5.4 Unrecognized authentication type' });
      }
      const password = auth.password ?? '';
      const username = auth.username ?? '';
      const started = Date.now();
      // A proxy on trustedNetworks speaks for many clients: one guessing must not lock the others out
      // (Postfix exempts $mynetworks likewise).
      const budgeted = !settings.trustedNetworks.includes(session.remoteAddress);
      // Taken before the service is asked (see AuthFailureBudget).
      const address = clientKey(session.remoteAddress);
      const attempt = budgeted ? await addressFailures.begin(address) : undefined;
      // Names that are none of the relay's users (every name given with an API key) count as one, under the address.
      const userKey = `${address} ${settings.users?.has(username) ? username : ''}`;
      const failed = async (reply: SmtpReply, err?: unknown) => {
        // Wrong credentials count against the address and the name; a service that could not tell (454) does not.
        const wrong = reply.code === 535;
        const fingerprint = wrong ? failureFingerprint(username, password) : undefined;
        if (typeof attempt === 'object') attempt.end(fingerprint);
        const throttled = budgeted && wrong && (await userFailures.retryAfter(userKey));
        if (budgeted && fingerprint !== undefined) userFailures.record(userKey, fingerprint);
        state.authFailures++;
        // Every refusal reads the same: which names are users, and why a key was refused, are for the
        // operator's log, not for a guesser.
        const told = throttled
          ? {
              code: 454,
              text: `4.7.0 Too many failed authentications for this user name from your address, try again in ${Math.ceil(throttled / 60_000)} minute(s)`,
            }
          : wrong
            ? BAD_PASSWORD
            : reply;
        const final =
          state.authFailures >= MAX_AUTH_FAILURES
            ? { code: 421, text: '4.7.0 Too many failed authentications, closing the connection' }
            : told;
        const where = {
          client: session.remoteAddress,
          session: session.id,
          // A listed user's name only: a name that is no user may be a password typed in the wrong field.
          ...(settings.users?.has(username) ? { login: username } : {}),
          reply: `${final.code} ${final.text}`,
          ...(told.text === reply.text ? {} : { reason: reply.text }),
        };
        // The detail may quote the password it failed on.
        const detail = err === undefined ? {} : { err: redact(errorDetail(err), password) };
        if (err !== undefined && isInternalError(err)) {
          logger.error({ ...where, ...detail }, 'AUTH could not be checked: error inside the relay');
        } else {
          logger.warn({ ...where, ...detail }, 'AUTH refused');
        }
        // Dovecot's auth_failure_delay: smtp-server reads no further command meanwhile. Counted from the
        // AUTH, so that every refusal takes the same time whatever was checked.
        const wait = settings.authFailureDelay - (Date.now() - started);
        if (wait <= 0) return refuse(final);
        setTimeout(() => refuse(final), wait).unref();
      };
      if (typeof attempt === 'number') {
        return failed({
          code: 454,
          text: `4.7.0 Too many failed authentications from your address, try again in ${Math.ceil(attempt / 60_000)} minute(s)`,
        });
      }
      if (password.length > MAX_PASSWORD_LENGTH) return failed(PASSWORD_TOO_LONG);
      const asRelay = () => {
        // Sends with the relay's key: onData falls back to it when the session holds no key client.
        attempt?.end(undefined);
        release(state);
        const listed = settings.users?.has(username) === true;
        const login = listed ? username : relay.relayKeyLogin;
        const senders = listed
          ? settings.users!.sendersOf(username)
          : login === undefined
            ? undefined
            : settings.keySenders.get(login);
        const user: SessionUser = { username, key: 'relay', login, senders };
        logger.debug({ client: session.remoteAddress, session: session.id, key: 'relay', login }, 'AUTH accepted');
        // A client that left during the check has closed already: it is not counted again.
        if (login !== undefined && !state.closed) relay.shares.join(session, login);
        callback(null, { user });
      };
      const withKey = () =>
        keyClients.authenticate(password).then(
          (held) => {
            attempt?.end(undefined);
            release(state);
            state.held = held;
            // onClose has run already; a held client is never evicted, so the hold is released here.
            if (state.closed) release(state);
            const login = `key:${held.id}`;
            const user: SessionUser = { username, key: held.id, login, senders: settings.keySenders.get(login) };
            logger.debug(
              { client: session.remoteAddress, session: session.id, key: held.id, login: user.login },
              'AUTH accepted',
            );
            if (!state.closed) relay.shares.join(session, user.login!);
            callback(null, { user });
          },
          (err: unknown) => failed(authFailureReply(err), err),
        );
      if (settings.users?.has(username) || (storing && !relay.isOwnKey(password))) {
        // A listed name is never tried as an API key. Under `queue` the outbox sends with the workers' key,
        // so another API key proves nothing.
        const users = settings.users;
        (users ? users.verify(username, password) : Promise.resolve(false)).then(
          (ok) => (ok ? asRelay() : failed(storing && !users?.has(username) ? NOT_A_RELAY_USER : WRONG_PASSWORD)),
          (err: unknown) => failed(authFailureReply(err), err),
        );
        return;
      }
      if (storing) return asRelay();
      if (settings.users) {
        // An unlisted name costs a decoy hash, so that timing does not tell the relay's user names.
        settings.users.verify(username, password).then(
          () => withKey(),
          (err: unknown) => failed(authFailureReply(err), err),
        );
        return;
      }
      void withKey();
    },
    onMailFrom(address, session, callback) {
      let refusal = relay.closing()
        ? SHUTTING_DOWN
        : (mailParameterRefusal(address, session) ??
          mailRefusal(
            { remoteAddress: session.remoteAddress, secure: session.secure, authenticated: Boolean(session.user) },
            policy,
          ));
      const spellings = [mailFromSpelling(address, session), address.address];
      const hidden = spellings.map((spelling) => findForbiddenCharacter(spelling)).find(Boolean);
      // A control, bidirectional or zero-width character makes an address that reads as another (a recipient's
      // too is refused at RCPT).
      if (!refusal && hidden) refusal = { code: 553, text: `5.1.7 The sender address holds ${hidden.what}` };
      if (!refusal) {
        const login = sessionLogin(session);
        // Both spellings: smtp-server's reading of the command, and the address as the client wrote it.
        const list = sendersOf(session);
        const sender = mailFromRefusal(spellings[0]!, list, login) ?? mailFromRefusal(spellings[1]!, list, login);
        if (sender) {
          refuseSender(senderRefusalOf(sender)!, session);
          refusal = { code: 553, text: `5.7.1 ${sender.message}` };
        }
      }
      // Never answered synchronously: when a client pipelines the next transaction, message and all,
      // without waiting for replies, a synchronous MAIL lets smtp-server's parser run past the end of
      // the next message and forget to resume after it, and the session stalls.
      setImmediate(() => callback(refusal ? replyError(refusal) : undefined));
    },
    onRcptTo(address, session, callback) {
      const refusal = rcptParameterRefusal(address, session);
      if (refusal) return callback(replyError(refusal));
      // The spelling the relay passes on (into Bcc) must be one the service takes once mailparser decoded it too.
      if (isValidAddress(address.address) && isValidAddress(asMailparserReads(keepRcptSpelling(address, session)))) {
        return callback();
      }
      callback(replyError({ code: 553, text: '5.1.3 The email service accepts no such address' }));
    },
    onData(stream: SMTPServerDataStream, session, callback) {
      relay.slots.watchData(session, stream);
      const held = stateOf(session).held;
      const login = sessionLogin(session);
      const identity = login ?? clientKey(session.remoteAddress);
      const sender: MessageSender | undefined =
        session.user && held
          ? { client: held.client, owner: 'client', identitySecret: held.identitySecret, identity }
          : relay.relayClient && relay.relaySecret
            ? { client: relay.relayClient, owner: 'relay', identitySecret: relay.relaySecret, identity }
            : undefined;
      if (!sender) {
        stream.resume();
        return callback(replyError({ code: 530, text: '5.7.0 Authentication required' }));
      }
      const where = {
        client: session.remoteAddress,
        session: session.id,
        key: sender.owner === 'relay' ? 'relay' : held!.id,
        ...(login === undefined ? {} : { login }),
      };
      // Signals of its own per message: a listener per message on the relay's signals would pass
      // Node's MaxListeners.
      const aborted = new AbortController();
      const stopped = new AbortController();
      signals.follow(relay.signal, aborted);
      signals.follow(relay.arriving, stopped);
      const context = {
        spool: settings.spool,
        destination: relay.destination,
        signal: aborted.signal,
        arriving: stopped.signal,
        identities,
        maxRecipients: settings.maxRecipients,
        maxMessageSize: settings.maxMessageSize,
        certainFrom: storing,
        senders: sendersOf(session),
        login,
      };
      const refused = ({ stage, error: err }: Extract<ReceiveOutcome, { ok: false }>): MessageOutcome => {
        const senderRefused = senderRefusalOf(err);
        if (senderRefused) refuseSender(senderRefused, session);
        const cut = relay.slots.dataCut(session);
        if (cut) {
          logger.warn({ ...where, reply: `${cut.code} ${cut.text}` }, 'Message refused');
          callback(replyError(cut));
          return 'refused';
        }
        if (stage === 'client') {
          logger.warn(where, 'Message abandoned: the client disconnected before the end of DATA');
          callback(
            Object.assign(replyError({ code: 451, text: `4.4.2 ${(err as Error).message}` }), { clientGone: true }),
          );
          return 'refused';
        }
        if (relay.arriving.aborted && !stream.writableEnded) {
          // Given up while its client still sends it: smtp-server would answer only after the end of DATA, which
          // the client may never send before the relay closes, so the relay answers now and closes the connection.
          logger.warn({ ...where, reply: `${SHUTTING_DOWN.code} ${SHUTTING_DOWN.text}` }, 'Message refused');
          relay.connectionOf(session)?.reply(SHUTTING_DOWN.code, SHUTTING_DOWN.text);
          callback(replyError(SHUTTING_DOWN));
          return 'given-up';
        }
        const handedOn = stage === 'destination';
        const reply: SmtpReply = stream.sizeExceeded
          ? { code: 552, text: `5.3.4 The message is larger than ${settings.maxMessageSize} bytes` }
          : handedOn
            ? relay.destination.reply(err, sender.owner)
            : relayFailureReply(err);
        const internal = isInternalError(err) && !stream.sizeExceeded;
        // What only the operator can fix (its key, base URL, disk, outbox, a fault in the relay) is an error.
        const operators =
          internal ||
          (err instanceof EmlApiError && err.code === 'ESPOOL') ||
          (sender.owner === 'relay' && reply.text.startsWith('4.7.1')) ||
          reply.text.startsWith('4.3.5') ||
          (handedOn && storing && reply.code === 451 && !reply.text.startsWith('4.3.2'));
        const log = operators ? logger.error : logger.warn;
        log(
          {
            ...where,
            reply: `${reply.code} ${reply.text}`,
            ...(handedOn || internal || operators ? { err: errorDetail(err) } : {}),
          },
          internal ? 'Message refused: error inside the relay' : 'Message refused',
        );
        callback(replyError(reply));
        return reply.text === SHUTTING_DOWN_TEXT ? 'given-up' : 'refused';
      };
      const work = withMessageLogFields(where, () => receiveMessage(stream, session, sender, context)).then(
        (outcome): MessageOutcome => {
          if (!outcome.ok) return refused(outcome);
          const received = outcome.message;
          if (stateOf(session).closed) {
            // The client will send it again: it must keep this identity (as after a 451), or a message
            // without Message-ID and Date would be delivered twice.
            identities.settle(received.identity, CLIENT_LEFT);
          }
          const reply = acceptedReply(received.id);
          logger.info(
            {
              ...where,
              id: received.id,
              messageId: received.messageId,
              bytes: received.size,
              recipients: session.envelope.rcptTo.length,
              addedBcc: received.addedBcc,
              destination: relay.destination.name,
            },
            'Message accepted',
          );
          callback(null, reply.text);
          return 'accepted';
        },
        (error: unknown) => refused({ ok: false, stage: 'relay', error }),
      );
      relay.track(
        work.finally(() => {
          signals.unfollow(relay.signal, aborted);
          signals.unfollow(relay.arriving, stopped);
        }),
      );
    },
    onClose(session) {
      relay.slots.leave(session);
      relay.shares.leave(session);
      const state = sessions.get(session);
      if (!state) return;
      state.closed = true;
      release(state);
    },
  };
}

/**
 * What the relay keeps as an authenticated session's `user`: the name given, whose key it sends with (`relay`, or the
 * fingerprint of the client's), and its login, the one name of the sender in logs, spans and metrics: a relay user's
 * name, or `key:<fingerprint>` for an API key given as the password.
 */
export interface SessionUser {
  username: string;
  key: string;
  login: string | undefined;
  /** The addresses the login may send as; undefined when it has no list (any sender). */
  senders: SenderList | undefined;
}

/** The login of a session (see {@link SessionUser}), or undefined before AUTH (a client on `allowUnauthenticatedFrom`). */
export function sessionLogin(session: SMTPServerSession): string | undefined {
  const user = session.user as Partial<SessionUser> | undefined;
  return typeof user === 'object' && user !== null && typeof user.login === 'string' ? user.login : undefined;
}

/** What the log says of an error: its code (or class) and message, followed by its causes' (`ECODE: a: b: c`). */
function errorDetail(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const parts: string[] = [];
  for (let e: unknown = err; e instanceof Error && parts.length < 5; e = e.cause) parts.push(e.message);
  const code = (err as { code?: unknown }).code;
  return `${typeof code === 'string' ? code : err.name}: ${parts.join(': ')}`;
}

/** What the relay knows of a connection when it decides what the client may do. */
export interface ConnectionFacts {
  remoteAddress: string;
  secure: boolean;
  /** The client authenticated with an API key the service accepted. */
  authenticated: boolean;
}

/** The relay's configuration that the decisions depend on. */
export interface RelayPolicy {
  hasOwnKey: boolean;
  /** The relay offers STARTTLS (or listens with implicit TLS). */
  hasTls: boolean;
  hasUsers: boolean;
  /** Store-and-forward (`queue`): AUTH takes only the relay's users and its own key. */
  storing: boolean;
  allowUnauthenticatedFrom: ClientAddressList;
  /** Where AUTH is offered on plain text, and who is exempt from the per-address limits (`trustedNetworks`). */
  trustedNetworks: ClientAddressList;
}

/**
 * Whether AUTH is offered: over TLS, or from `trustedNetworks`, so that an API key never crosses the network in
 * clear. Not advertised otherwise (RFC 4954 section 4), so a client never sends the key before the refusal.
 */
export function authOffered(
  facts: Pick<ConnectionFacts, 'remoteAddress' | 'secure'>,
  policy: Pick<RelayPolicy, 'trustedNetworks'>,
): boolean {
  return facts.secure || policy.trustedNetworks.includes(facts.remoteAddress);
}

/**
 * Whether a client may start a mail transaction (MAIL FROM): when it authenticated (it sends with its own key), or,
 * when the relay holds a key, when its address is on `allowUnauthenticatedFrom`.
 *
 * @returns undefined when it may, else the `530` reply saying what it must do
 */
export function mailRefusal(facts: ConnectionFacts, policy: RelayPolicy): SmtpReply | undefined {
  if (facts.authenticated) return undefined;
  if (policy.hasOwnKey && policy.allowUnauthenticatedFrom.includes(facts.remoteAddress)) return undefined;
  if (authOffered(facts, policy)) return { code: 530, text: `5.7.0 Authentication required: ${authWith(policy)}` };
  return policy.hasTls
    ? { code: 530, text: `5.7.0 Must issue a STARTTLS command first, then ${authWith(policy)}` }
    : {
        code: 530,
        text: '5.7.0 Authentication required, and this relay accepts AUTH only from its trusted networks (it has no TLS certificate)',
      };
}

/** What a client AUTHs with on this relay, for the 530 (see the table in docs/relay.md). */
function authWith(policy: RelayPolicy): string {
  if (policy.storing) {
    return policy.hasUsers ? 'AUTH with your relay login' : "AUTH with the relay's own API key as the password";
  }
  return policy.hasUsers
    ? 'AUTH with your relay login, or with your API key as the password'
    : 'AUTH with your API key as the password';
}
