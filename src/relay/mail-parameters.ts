import type { SMTPServer, SMTPServerAddress, SMTPServerSession } from 'smtp-server';
import type { SmtpReply } from './smtp-replies.js';

/**
 * The MAIL FROM parameters of the extensions the relay advertises: SIZE
 * (RFC 1870), BODY (8BITMIME, RFC 6152), SMTPUTF8 (RFC 6531), and AUTH (RFC
 * 4954 section 5, which clients that authenticated may send).
 */
const MAIL_PARAMETERS = new Set(['SIZE', 'BODY', 'SMTPUTF8', 'AUTH']);

/** RCPT TO takes none: DSN (NOTIFY, ORCPT) is not advertised. */
const RCPT_PARAMETERS = new Set<string>();

/** The command lines smtp-server read last, per session: it hands the handlers the parsed address only. */
const lastLines = new WeakMap<SMTPServerSession, Buffer | string>();

/** Each accepted RCPT TO's address as the client wrote it, by the object smtp-server keeps in `envelope.rcptTo`. */
const rcptSpellings = new WeakMap<SMTPServerAddress, string>();

/**
 * Keeps the command line each MAIL and RCPT handler answers, because
 * smtp-server gives the handlers the address with its domain turned into
 * Unicode (`xn--bcher-kva` becomes `bücher`): whether the client wrote a
 * non-ASCII address, which needs SMTPUTF8, shows only in the line it sent.
 * Wraps each connection's `_onCommand` (not smtp-server's public API, pinned
 * by the relay's tests; without it only the local part is checked).
 */
export function keepCommandLines(server: SMTPServer): void {
  const connect = server.connect.bind(server);
  server.connect = (socket, options) => {
    connect(socket, options);
    // connect() adds the new connection last.
    let newest: CommandConnection | undefined;
    for (const connection of server.connections as Set<unknown> as Set<CommandConnection>) newest = connection;
    const original = newest?._onCommand;
    if (!newest || typeof original !== 'function') return;
    const connection = newest;
    connection._onCommand = (command, callback) => {
      lastLines.set(connection.session, command);
      return original.call(connection, command, callback);
    };
  };
}

interface CommandConnection {
  session: SMTPServerSession;
  _onCommand?: (command: Buffer | string, callback?: () => void) => unknown;
}

/**
 * Why a MAIL FROM must be refused for its parameters or its address, or
 * undefined: `555 5.5.4` for a parameter of an extension the relay does not
 * advertise (RFC 5321 4.1.1.11; Postfix says the same), `553 5.6.7` for a
 * non-ASCII address without SMTPUTF8 (RFC 6531 3.5).
 */
export function mailParameterRefusal(address: SMTPServerAddress, session: SMTPServerSession): SmtpReply | undefined {
  return (
    unknownParameter(address, MAIL_PARAMETERS) ??
    (session.envelope.smtpUtf8 ? undefined : needsSmtpUtf8(address, session, 'MAIL'))
  );
}

/**
 * Remembers how the client wrote the address of the RCPT TO being answered
 * (call it from `onRcptTo`): smtp-server hands the handlers, and keeps in
 * `envelope.rcptTo`, the address with its domain decoded from `xn--` by
 * UTS #46 (`xn--victimexample-882l` becomes `victim。example`, which
 * mapping reads as `victim.example`), a mailbox the client never named.
 */
export function keepRcptSpelling(address: SMTPServerAddress, session: SMTPServerSession): void {
  const line = lastLines.get(session);
  const written = line === undefined ? undefined : writtenAddress(lineOf(line), 'RCPT');
  if (written !== undefined) rcptSpellings.set(address, written);
}

/**
 * The `RCPT TO` recipients of the session's transaction as the client wrote
 * them (see {@link keepRcptSpelling}); smtp-server's decoded form for one
 * whose line was not kept.
 */
export function envelopeRecipients(session: SMTPServerSession): string[] {
  return session.envelope.rcptTo.map((rcpt) => rcptSpellings.get(rcpt) ?? rcpt.address);
}

/**
 * The address of a MAIL or RCPT line as written, read as smtp-server reads
 * it (`_parseAddressCommand`): the first word after the colon, in angle
 * brackets, without a source route.
 */
function writtenAddress(line: string, verb: string): string | undefined {
  const colon = line.indexOf(':');
  if (colon === -1 || !line.slice(0, colon).trim().toUpperCase().startsWith(verb)) return undefined;
  const word = line
    .slice(colon + 1)
    .trim()
    .split(/\s+/)[0]!;
  if (!/^<[^<>]*>$/.test(word)) return undefined;
  return word.slice(1, -1).replace(/^@[^\s,:@]+(?:,@[^\s,:@]+)*:/, '');
}

/** The same for RCPT TO: no parameters; a non-ASCII address only in a transaction that declared SMTPUTF8. */
export function rcptParameterRefusal(address: SMTPServerAddress, session: SMTPServerSession): SmtpReply | undefined {
  return (
    unknownParameter(address, RCPT_PARAMETERS) ??
    (session.envelope.smtpUtf8 ? undefined : needsSmtpUtf8(address, session, 'RCPT'))
  );
}

function unknownParameter(address: SMTPServerAddress, known: ReadonlySet<string>): SmtpReply | undefined {
  const args = (address.args || {}) as Record<string, unknown>;
  const unknown = Object.keys(args).find((name) => !known.has(name.toUpperCase()));
  if (unknown === undefined) return undefined;
  // The name is the client's: kept short and printable in the reply.
  const name = unknown.replace(/[^\x21-\x7e]/g, '?').slice(0, 40);
  return { code: 555, text: `5.5.4 Unsupported parameter ${name}` };
}

function needsSmtpUtf8(address: SMTPServerAddress, session: SMTPServerSession, verb: string): SmtpReply | undefined {
  const line = lastLines.get(session);
  const written =
    line !== undefined && lineOf(line).toUpperCase().startsWith(verb) ? lineOf(line) : localPart(address.address);
  if (isAscii(written)) return undefined;
  return { code: 553, text: '5.6.7 Must declare SMTPUTF8 (MAIL FROM:<...> SMTPUTF8) to use a non-ASCII address' };
}

function lineOf(line: Buffer | string): string {
  return typeof line === 'string' ? line : line.toString('utf8');
}

function localPart(address: string): string {
  const at = address.lastIndexOf('@');
  return at === -1 ? address : address.slice(0, at);
}

function isAscii(text: string): boolean {
  // eslint-disable-next-line no-control-regex
  return /^[\x00-\x7f]*$/.test(text);
}
