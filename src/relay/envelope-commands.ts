import type { SmtpReply } from './smtp-replies.js';
import { commandLineOf, type SMTPServerAddress, type SMTPServerSession } from './smtp-server-adapter.js';

/** The MAIL FROM parameters of the extensions the relay advertises: SIZE, BODY (8BITMIME), SMTPUTF8 and AUTH. */
const MAIL_PARAMETERS = new Set(['SIZE', 'BODY', 'SMTPUTF8', 'AUTH']);

/** RCPT TO takes none: DSN (NOTIFY, ORCPT) is not advertised. */
const RCPT_PARAMETERS = new Set<string>();

/** Each accepted RCPT TO's address as the client wrote it, by the object smtp-server keeps in `envelope.rcptTo`. */
const rcptSpellings = new WeakMap<SMTPServerAddress, string>();

/**
 * `555 5.5.4` for a parameter of an extension the relay does not advertise (RFC 5321 4.1.1.11), `553 5.6.7` for a
 * non-ASCII address without SMTPUTF8 (RFC 6531 3.5), else undefined.
 */
export function mailParameterRefusal(address: SMTPServerAddress, session: SMTPServerSession): SmtpReply | undefined {
  return (
    unknownParameter(address, MAIL_PARAMETERS) ??
    (session.envelope.smtpUtf8 ? undefined : needsSmtpUtf8(address, session, 'MAIL'))
  );
}

/**
 * Remembers how the client wrote the address of the RCPT TO being answered (from `onRcptTo`): smtp-server keeps the
 * domain decoded from `xn--` by UTS #46 (`xn--victimexample-882l` reads as `victim.example`), a mailbox the client
 * never named.
 * @returns the address as written (smtp-server's form when the line was not kept)
 */
export function keepRcptSpelling(address: SMTPServerAddress, session: SMTPServerSession): string {
  const line = commandLineOf(session);
  const written = line === undefined ? undefined : writtenAddress(lineOf(line), 'RCPT');
  if (written !== undefined) rcptSpellings.set(address, written);
  return written ?? address.address;
}

/** The address of the `MAIL FROM` being answered as the client wrote it (from `onMailFrom`): '' for `<>`. */
export function mailFromSpelling(address: SMTPServerAddress, session: SMTPServerSession): string {
  const line = commandLineOf(session);
  return (line === undefined ? undefined : writtenAddress(lineOf(line), 'MAIL')) ?? address.address;
}

/** The `RCPT TO` recipients of the session's transaction as the client wrote them (see {@link keepRcptSpelling}). */
export function envelopeRecipients(session: SMTPServerSession): string[] {
  return session.envelope.rcptTo.map((rcpt) => rcptSpellings.get(rcpt) ?? rcpt.address);
}

/** The address of a MAIL or RCPT line as written, read as smtp-server's `_parseAddressCommand` reads it. */
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

/** Read from the line as sent (smtp-server decodes `xn--` domains); without the line, the local part alone. */
function needsSmtpUtf8(address: SMTPServerAddress, session: SMTPServerSession, verb: string): SmtpReply | undefined {
  const line = commandLineOf(session);
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
