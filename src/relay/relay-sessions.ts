import type {
  SMTPServerAuthentication,
  SMTPServerAuthenticationResponse,
  SMTPServerDataStream,
  SMTPServerOptions,
  SMTPServerSession,
} from 'smtp-server';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { isValidAddress } from '../protocol/address-rules.js';
import type { KeyClient, KeyClients } from './key-clients.js';
import type { MessageDestination, MessageSender } from './message-destination.js';
import { MessageIdentities } from './message-identity.js';
import { isClientGone, receiveMessage } from './receive-message.js';
import type { RelaySettings } from './resolve-relay-options.js';
import { authOffered, mailRefusal, type RelayPolicy } from './session-rules.js';
import { acceptedReply, authFailureReply, failureReply, replyError, type SmtpReply } from './smtp-replies.js';

/** Failed AUTHs after which a connection is closed (`421`): each one costs the service a request. */
const MAX_AUTH_FAILURES = 3;

/** What the session handlers share with the relay that runs them. */
export interface RelayState {
  readonly settings: RelaySettings;
  readonly keyClients: KeyClients;
  /** The client of the relay's own key, when it has one. */
  readonly relayClient: EmlApiClient | undefined;
  readonly destination: MessageDestination;
  /** Aborted by `close({ abort: true })`. */
  readonly signal: AbortSignal;
  /** Aborted by any close(): messages still arriving are given up. */
  readonly arriving: AbortSignal;
  /** True once close() was called: new transactions are refused with `421`. */
  closing(): boolean;
  /** Registers a message in progress, so close() waits for it. */
  track(work: Promise<unknown>): void;
}

/** What the relay keeps per connection (the session object lives as long as the connection). */
interface SessionState {
  held: KeyClient | undefined;
  authFailures: number;
  /** The connection has closed (an AUTH check may still answer after that). */
  closed: boolean;
}

type Handlers = Required<
  Pick<SMTPServerOptions, 'onConnect' | 'onSecure' | 'onAuth' | 'onMailFrom' | 'onRcptTo' | 'onData' | 'onClose'>
>;

const SHUTTING_DOWN: SmtpReply = { code: 421, text: '4.3.2 The relay is shutting down, try again later' };

/**
 * The smtp-server handlers of the relay: who may AUTH and send, the key a
 * session sends with, and each message from DATA to its destination, with
 * the reply an MTA expects.
 */
export function relaySessionHandlers(relay: RelayState): Handlers {
  const { settings, keyClients, logger } = { ...relay, logger: relay.settings.logger };
  const policy: RelayPolicy = {
    hasOwnKey: relay.relayClient !== undefined,
    hasTls: settings.tls !== undefined,
    allowUnauthenticatedFrom: settings.allowUnauthenticatedFrom,
  };
  const sessions = new WeakMap<SMTPServerSession, SessionState>();
  const identities = new MessageIdentities();
  const stateOf = (session: SMTPServerSession): SessionState => {
    let state = sessions.get(session);
    if (!state) sessions.set(session, (state = { held: undefined, authFailures: 0, closed: false }));
    return state;
  };
  // The per-session command list also decides what EHLO advertises.
  const commandsFor = (session: SMTPServerSession): string[] => [
    ...(policy.hasTls ? [] : ['STARTTLS']),
    ...(authOffered(session) ? [] : ['AUTH']),
  ];
  const release = (state: SessionState) => {
    if (state.held) keyClients.release(state.held);
    state.held = undefined;
  };

  return {
    onConnect(session, callback) {
      if (relay.closing()) return callback(replyError(SHUTTING_DOWN));
      session.disabledCommands = commandsFor(session);
      callback();
    },
    onSecure(_socket, session, callback) {
      // smtp-server forgets an AUTH made before STARTTLS (RFC 3207 4.2); so does the relay.
      const state = sessions.get(session);
      if (state) release(state);
      session.disabledCommands = commandsFor(session);
      callback();
    },
    onAuth(auth: SMTPServerAuthentication, session, callback) {
      const state = stateOf(session);
      const refuse = (reply: SmtpReply) => callback(null, { message: reply.text, responseCode: reply.code });
      if (!authOffered(session)) return refuse({ code: 538, text: '5.7.11 Encryption required for AUTH' });
      if (auth.method !== 'PLAIN' && auth.method !== 'LOGIN') {
        return refuse({ code: 504, text: '5.5.4 Unrecognized authentication type' });
      }
      keyClients.authenticate(auth.password ?? '').then(
        (held) => {
          release(state);
          state.held = held;
          // The client left while its key was being checked: onClose has run already, so the hold
          // is released here (a held client is never evicted, and would be kept until the relay stops).
          if (state.closed) release(state);
          const user: SMTPServerAuthenticationResponse['user'] = { username: auth.username, key: held.id };
          logger.debug({ client: session.remoteAddress, session: session.id, key: held.id }, 'AUTH accepted');
          callback(null, { user });
        },
        (err: unknown) => {
          state.authFailures++;
          const reply =
            state.authFailures >= MAX_AUTH_FAILURES
              ? { code: 421, text: '4.7.0 Too many failed authentications, closing the connection' }
              : authFailureReply(err);
          logger.warn(
            { client: session.remoteAddress, session: session.id, reply: `${reply.code} ${reply.text}` },
            'AUTH refused',
          );
          refuse(reply);
        },
      );
    },
    onMailFrom(_address, session, callback) {
      const refusal = relay.closing()
        ? SHUTTING_DOWN
        : mailRefusal(
            { remoteAddress: session.remoteAddress, secure: session.secure, authenticated: Boolean(session.user) },
            policy,
          );
      // Answered on the next turn of the event loop, never synchronously: smtp-server (3.21) loses
      // its place when a client wrote the next transaction, message and all, without waiting for
      // the replies (`nc relay 2525 < session.txt`). Its parser resumes after a message by running
      // the rest of the input, and a MAIL answered synchronously lets that run reach the end of
      // the next message at once; the parser then forgets that it must resume after that one, and
      // the session stalls (the third message and QUIT never answered).
      setImmediate(() => callback(refusal ? replyError(refusal) : undefined));
    },
    onRcptTo(address, _session, callback) {
      if (isValidAddress(address.address)) return callback();
      callback(replyError({ code: 553, text: '5.1.3 The email service accepts no such address' }));
    },
    onData(stream: SMTPServerDataStream, session, callback) {
      const held = stateOf(session).held;
      const sender: MessageSender | undefined =
        session.user && held
          ? { client: held.client, owner: 'client' }
          : relay.relayClient
            ? { client: relay.relayClient, owner: 'relay' }
            : undefined;
      if (!sender) {
        stream.resume();
        return callback(replyError({ code: 530, text: '5.7.0 Authentication required' }));
      }
      const where = {
        client: session.remoteAddress,
        session: session.id,
        key: sender.owner === 'relay' ? 'relay' : held!.id,
      };
      const context = {
        spool: settings.spool,
        destination: relay.destination,
        signal: relay.signal,
        arriving: relay.arriving,
        identities,
      };
      const work = receiveMessage(stream, session, sender, context).then(
        (received) => {
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
        },
        (err: unknown) => {
          if (isClientGone(err)) {
            logger.warn(where, 'Message abandoned: the client disconnected before the end of DATA');
            return callback(replyError({ code: 451, text: `4.4.2 ${err.message}` }));
          }
          const reply: SmtpReply = stream.sizeExceeded
            ? { code: 552, text: `5.3.4 The message is larger than ${settings.maxMessageSize} bytes` }
            : failureReply(err, sender.owner);
          // What only the relay's operator can fix is an error: its key refused, its base URL wrong.
          const misconfigured =
            (sender.owner === 'relay' && reply.text.startsWith('4.7.1')) || reply.text.startsWith('4.3.5');
          const log = misconfigured ? logger.error : logger.warn;
          log({ ...where, reply: `${reply.code} ${reply.text}` }, 'Message refused');
          callback(replyError(reply));
        },
      );
      relay.track(work);
    },
    onClose(session) {
      const state = sessions.get(session);
      if (!state) return;
      state.closed = true;
      release(state);
    },
  };
}
