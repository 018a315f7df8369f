import { Readable, Transform, type TransformCallback } from 'node:stream';
import { createHash, type Hash, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { domainToASCII } from 'node:url';
import type { SMTPServerDataStream, SMTPServerSession, SMTPServer, SMTPServerAddress } from 'smtp-server';
import { spooledInMemory, spoolMessage, type SpooledMessage, type SpoolSettings } from '../body/message-spool.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { MessageDestination, MessageSender } from './message-destination.js';
import { HeaderSectionFinder, MAX_HEADER_SECTION, headerSectionEnd } from '../protocol/message-format.js';
import {
  addressKey,
  fromRefusal,
  readingRelayHeaders,
  runInSlices,
  runWhole,
  type HeaderLimits,
  type RelayHeaderField,
  type Steps,
} from './relay-headers.js';
import type { SmtpReply } from './smtp-replies.js';
import { headerSenderRefusal, type SenderList } from './sender-lists.js';

/** What receiving a message needs from the relay. */
export interface ReceiveContext {
  spool: SpoolSettings;
  destination: MessageDestination;
  /** Aborted when the relay is closed with `{ abort: true }`. */
  signal: AbortSignal;
  /**
   * Aborted as soon as the relay is closed (whether or not with `abort`): a
   * message still arriving then is given up, so that a slow or stalled
   * client cannot hold close().
   */
  arriving: AbortSignal;
  /** How the relay names the messages it sends (one per relay: it remembers sends whose outcome it could not know). */
  identities: MessageIdentities;
  /** The relay's `maxRecipients`, which also bounds the ways the headers may spell their recipients. */
  maxRecipients: number;
  /** The relay's `maxMessageSize` (SIZE), applied to the message with CRLF line ends. */
  maxMessageSize: number;
  /** Refuse a From the relay cannot read for certain (the outbox stores the message: nobody would hear of the service's refusal). */
  certainFrom: boolean;
  /** The addresses the session's login may send as, when it has a list: From and Sender must be among them. */
  senders: SenderList | undefined;
  /** The session's login, named in a refusal (undefined for a client sending without AUTH). */
  login: string | undefined;
}

/** A message handed on. */
export interface ReceivedMessage {
  /** The id the destination gave it. */
  id: string | undefined;
  /** Its Message-ID: the client's, or the one the relay added. */
  messageId: string;
  /** Bytes uploaded. */
  size: number;
  /** Recipients written into the Bcc field (envelope-only recipients). */
  addedBcc: number;
  /** Its identity, to settle again if its client never reads the reply (see `MessageIdentities.settle`). */
  identity: MessageIdentity;
}

/**
 * One SMTP transaction's message, from DATA to its destination: the header
 * section is reconciled with the envelope (envelope-only recipients added as
 * Bcc; header recipients missing from RCPT TO refused), the message streams
 * into the spool (memory, or a temporary file past the threshold, never whole
 * in memory) while it is hashed, and the destination takes it. Its
 * idempotency key, and the Message-ID added when it has none, come from
 * {@link MessageIdentities}: a client that retries after a `451` (a timeout
 * after the service may have accepted it) is not delivered twice by a
 * service that honours `Idempotency-Key`.
 *
 * @throws {EmlApiError} `EENVELOPE`, a permanent `EMESSAGE` (the message cannot be read as one),
 *   a transient `EMESSAGE` or `ESPOOL` (the relay could not store it), `ESTREAM` ({@link isClientGone}) when
 *   the client left before the end of DATA, `EABORT` when the relay closed while the message was
 *   arriving, or what the destination throws ({@link failedAtDestination}; never `ESTREAM`: the relay builds no message)
 */
export async function receiveMessage(
  stream: SMTPServerDataStream,
  session: SMTPServerSession,
  sender: MessageSender,
  context: ReceiveContext,
): Promise<ReceivedMessage> {
  const rcptTo = envelopeRecipients(session);
  let plan: EnvelopePlan | undefined;
  const rewriter: MessageRewriter = new MessageRewriter(
    async (head) => {
      plan = await runInSlices(planningEnvelope(head, rcptTo, { maxRecipients: context.maxRecipients }));
      // A sender that is not the login's is refused first, so that every such try is counted as one.
      // What the service is certain to refuse gets no 250, in either mode (the outbox would store it for nothing).
      const refusal =
        (await headerSenderRefusal(plan.froms, plan.senders, context.senders, context.login)) ??
        (await fromRefusal(plan.froms, { certain: context.certainFrom }));
      if (refusal) throw refusal;
      return plan.head;
    },
    // SIZE bounds the message with CRLF line ends (RFC 1870), which is what is uploaded: one of bare LF
    // lines within SIZE on the wire may be over it, and is refused here, before the service is asked.
    () =>
      stream.sizeExceeded || rewriter.size > context.maxMessageSize
        ? new EmlApiError(
            'EMESSAGE',
            `The message is larger than SIZE (${context.maxMessageSize} bytes, counted with CRLF line ends)`,
            { permanent: true, responseCode: 413 },
          )
        : undefined,
  );
  stream.pipe(rewriter);
  // smtp-server destroys the DATA stream when the client disconnects mid-message, and pipe() does
  // not pass that on: without this, the spool would wait for the rest forever (its file kept, and
  // close() waiting for the message).
  // The error is built only when a client vanishes: an EmlApiError and its stack for every
  // message cost 2.3% of the relay's CPU.
  let gone: EmlApiError | undefined;
  const onClose = () => {
    if (stream.readableEnded) return;
    gone = clientGone();
    rewriter.destroy(gone);
  };
  stream.once('close', onClose);
  let spooled: SpooledMessage;
  try {
    spooled = await spoolMessage(rewriter, context.spool, context.arriving);
  } catch (err) {
    stream.unpipe(rewriter);
    // The rest of the message is read and dropped, so that smtp-server can answer.
    stream.resume();
    if (err === rewriter.failure || (gone && err === gone) || context.signal.aborted || context.arriving.aborted) {
      throw err;
    }
    throw storingFailed(err);
  } finally {
    stream.off('close', onClose);
  }
  const { addedBcc } = plan!;
  const envelope = { from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to: rcptTo };
  const identity = context.identities.identify({
    secret: sender.identitySecret,
    envelope,
    digest: rewriter.digest(),
    hasMessageId: plan!.messageId !== undefined,
    hasDate: plan!.hasDate,
    from: plan!.from,
  });
  const messageId = plan!.messageId ?? identity.addedMessageId!;
  let failure: unknown;
  try {
    if (plan!.messageId === undefined) {
      const first = spooled;
      spooled = await respool(first, messageId, context);
      await first.body.dispose();
    }
    const receipt = await context.destination
      .deliver({ spooled, idempotencyKey: identity.idempotencyKey, messageId, envelope }, sender, context.signal)
      .catch((err: unknown) => {
        if (typeof err === 'object' && err !== null) atDestination.add(err);
        throw err;
      });
    return { id: receipt.id, messageId, size: spooled.size, addedBcc: addedBcc.length, identity };
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    context.identities.settle(identity, failure);
    await spooled.body.dispose();
  }
}

/**
 * The spooled message again, with a Message-ID field added at the end of its
 * header section. Made only for messages without one, once their bytes are
 * known (the Message-ID is made from them): one more pass over the message,
 * in memory up to the spool threshold.
 */
async function respool(spooled: SpooledMessage, messageId: string, context: ReceiveContext): Promise<SpooledMessage> {
  // The plan took out the empty Message-ID fields of a message without one.
  const head = appendField(spooled.head, `Message-ID: ${messageId}${eolOf(spooled.head)}`);
  if (spooled.size + head.length - spooled.head.length <= context.spool.threshold) {
    // Small enough to stay in memory: one copy, without the spool's stream machinery (about 13 µs instead of 70).
    const parts: Buffer[] = [];
    for await (const chunk of spooled.open() as AsyncIterable<Buffer>) parts.push(chunk);
    return spooledInMemory(Buffer.concat([head, Buffer.concat(parts).subarray(spooled.head.length)]), head);
  }
  const rest = async function* (): AsyncGenerator<Buffer> {
    yield head;
    let skip = spooled.head.length;
    for await (const chunk of spooled.open() as AsyncIterable<Buffer>) {
      if (skip >= chunk.length) {
        skip -= chunk.length;
        continue;
      }
      yield skip > 0 ? chunk.subarray(skip) : chunk;
      skip = 0;
    }
  };
  try {
    return await spoolMessage(Readable.from(rest(), { objectMode: false }), context.spool, context.arriving);
  } catch (err) {
    if (context.signal.aborted || context.arriving.aborted) throw err;
    throw storingFailed(err);
  }
}

/**
 * A failure to store an arriving message, as the relay answers it: the client may try again
 * (`451`). Its text names no path or system error (the relay's log has them, in `cause`).
 */
function storingFailed(err: unknown): EmlApiError {
  if (err instanceof EmlApiError && err.code === 'ESPOOL') return err;
  return new EmlApiError('ESPOOL', 'The relay could not store the message', { cause: err, permanent: false });
}

/** The message's stream (the client's DATA) broke before the message was whole: `ESTREAM`, as in Nodemailer. */
function clientGone(): EmlApiError {
  return new EmlApiError('ESTREAM', 'The SMTP client disconnected before the end of its message (DATA)', {
    permanent: false,
  });
}

/** Failures of a destination's `deliver`, which the destination answers (see `MessageDestination.reply`). */
const atDestination = new WeakSet<object>();

/** Whether {@link receiveMessage} failed in its destination's `deliver` (the message had been received and checked). */
export function failedAtDestination(err: unknown): boolean {
  return typeof err === 'object' && err !== null && atDestination.has(err);
}

/**
 * Whether {@link receiveMessage} failed because the client disconnected before the end of DATA
 * (nobody to answer): its only `ESTREAM`, since a spool that fails is `ESPOOL` and the relay
 * builds no message (the other source of `ESTREAM`).
 */
export function isClientGone(err: unknown): err is EmlApiError {
  return err instanceof EmlApiError && err.code === 'ESTREAM';
}

const CR = 0x0d;
const LF = 0x0a;
const CRLF = Buffer.from('\r\n');

/**
 * The message as it arrives from DATA, passed through with every bare line
 * end made CRLF, its header section replaced by what `rewriteHead` makes of
 * it, and hashed (SHA-256) as it leaves. It holds at most the header section
 * in memory; the body streams through with backpressure.
 *
 * A bare LF or a bare CR (one that is not half of a CRLF) becomes CRLF, as
 * Postfix's `smtpd_forbid_bare_newline = normalize` (its default since 3.9)
 * treats bare LF: `\n.\n`, `\n.\r\n`, `\r.\r\n` and `\r\n.\n` inside DATA
 * never reach the service, where a later SMTP hop could read them as the end
 * of the message (SMTP smuggling); they arrive as a line holding a dot, which
 * every SMTP client dot-stuffs. DATA itself ends only at CRLF.CRLF
 * (smtp-server's rule, and the "normalize" rule). Bare CR is made a line
 * break too, where Postfix keeps it as a byte: MIME parsers read a bare CR
 * in a header field each their own way (mailparser unfolds it like a line
 * break), and as a CRLF it reads the same to the relay and to the service.
 */
export class MessageRewriter extends Transform {
  readonly #rewriteHead: (head: Buffer) => Buffer | Promise<Buffer>;
  readonly #tooLarge: () => Error | undefined;
  readonly #hash: Hash = createHash('sha256');
  readonly #head = new HeaderSectionFinder();
  /** Bytes read so far with their line ends made CRLF, before the header section is rewritten. */
  #normalised = 0;
  #headDone = false;
  /** The last chunk ended with a CR: whether it is bare depends on the next byte. */
  #pendingCr = false;
  /** The error this stream failed with (a refused envelope, an oversized message or header), if any. */
  failure: Error | undefined;

  /**
   * @param rewriteHead gets the header section (up to and including its blank line) and returns the one to send,
   *   or a promise of it (the rest of the message waits); what it throws or rejects with fails the stream
   * @param tooLarge checked on every chunk, once {@link size} counts it: an error to fail with once the message
   *   is over the size limit
   */
  constructor(rewriteHead: (head: Buffer) => Buffer | Promise<Buffer>, tooLarge: () => Error | undefined) {
    super();
    this.#rewriteHead = rewriteHead;
    this.#tooLarge = tooLarge;
  }

  /**
   * The size of the message read so far with every line end CRLF, as the
   * client sent it otherwise (before the relay's Bcc or Message-ID): what
   * SMTP's SIZE measures (RFC 1870 counts a message in CRLF lines), and what
   * the upload grows with. A message of bare LF lines is larger than the
   * bytes it took on the wire.
   */
  get size(): number {
    return this.#normalised;
  }

  /** SHA-256 (hex) of the bytes that left, once the stream has ended. */
  digest(): string {
    return this.#hash.copy().digest('hex');
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const normalised = this.#crlf(chunk);
    this.#normalised += normalised.length;
    this.#step(normalised, (err) => callback(this.#fail(err)));
  }

  override _flush(callback: TransformCallback): void {
    const last = this.#pendingCr ? CRLF : undefined;
    this.#pendingCr = false;
    const finish = () => {
      const oversize = this.#tooLarge();
      if (oversize || this.#headDone) return callback(this.#fail(oversize));
      // A message without a blank line is all header.
      this.#finishHead(this.#head.size, (err) => callback(this.#fail(err)));
    };
    if (!last) return finish();
    this.#normalised += last.length;
    this.#step(last, (err) => (err ? callback(this.#fail(err)) : finish()));
  }

  /**
   * The chunk with each bare LF and bare CR made CRLF. A CR at the end of the
   * chunk is held back until the next byte tells whether an LF follows it.
   * Copies nothing when the chunk has no bare line end (the common case).
   */
  #crlf(chunk: Buffer): Buffer {
    const parts: Buffer[] = [];
    let from = 0;
    let at = 0;
    if (this.#pendingCr) {
      this.#pendingCr = false;
      parts.push(CRLF);
      // The held CR and this LF are one CRLF; without the LF the CR was bare, and is a CRLF all the same.
      if (chunk[0] === LF) from = at = 1;
    }
    let cr = chunk.indexOf(CR, at);
    let lf = chunk.indexOf(LF, at);
    while (cr !== -1 || lf !== -1) {
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        if (cr === chunk.length - 1) {
          parts.push(chunk.subarray(from, cr));
          this.#pendingCr = true;
          from = chunk.length;
          break;
        }
        if (chunk[cr + 1] !== LF) {
          parts.push(chunk.subarray(from, cr), CRLF);
          from = cr + 1;
        } else {
          // A CRLF: the LF found next is this one.
          lf = chunk.indexOf(LF, cr + 2);
        }
        cr = chunk.indexOf(CR, cr + 1);
      } else {
        parts.push(chunk.subarray(from, lf), CRLF);
        from = lf + 1;
        lf = chunk.indexOf(LF, lf + 1);
      }
    }
    if (parts.length === 0) return chunk;
    parts.push(chunk.subarray(from));
    return Buffer.concat(parts);
  }

  #fail(err: Error | null | undefined): Error | undefined {
    if (err) this.failure ??= err;
    return err ?? undefined;
  }

  #step(chunk: Buffer, callback: (err?: Error) => void): void {
    const oversize = this.#tooLarge();
    if (oversize) return callback(oversize);
    if (this.#headDone) {
      this.#emit(chunk);
      return callback();
    }
    const end = this.#head.push(chunk);
    if (end !== undefined) return this.#finishHead(end, callback);
    if (this.#head.size > MAX_HEADER_SECTION) {
      return callback(
        new EmlApiError('EMESSAGE', `The header section is longer than ${MAX_HEADER_SECTION} bytes`, {
          permanent: true,
        }),
      );
    }
    callback();
  }

  /** Rewrites the head (the first `end` bytes held) and lets the rest through, then calls back with the rewrite's error. */
  #finishHead(end: number, callback: (err?: Error) => void): void {
    const held = this.#head.take();
    this.#headDone = true;
    const done = (head: Buffer) => {
      // The client left while the head was being read.
      if (this.destroyed) return;
      this.#emit(head);
      this.#emit(held.subarray(end));
      callback();
    };
    let rewritten: Buffer | Promise<Buffer>;
    try {
      rewritten = this.#rewriteHead(held.subarray(0, end));
    } catch (err) {
      return callback(err as Error);
    }
    if (Buffer.isBuffer(rewritten)) return done(rewritten);
    rewritten.then(done, (err: unknown) => callback(err as Error));
  }

  #emit(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.#hash.update(bytes);
    this.push(bytes);
  }
}

/** What the relay does to the header section of a message before it leaves. */
export interface EnvelopePlan {
  /**
   * The header section to upload: the original, with a `Bcc` field naming the envelope-only recipients,
   * and without the empty Message-ID fields of a message that has no Message-ID.
   */
  head: Buffer;
  /** `RCPT TO` recipients that no To, Cc or Bcc header named, now in the `Bcc` field. */
  addedBcc: string[];
  /** The From fields, for {@link fromRefusal}. */
  froms: RelayHeaderField[];
  /** The Sender fields. */
  senders: RelayHeaderField[];
  /** The From address of the headers, or false. */
  from: string | false;
  /** The Message-ID header, when there is one. */
  messageId: string | undefined;
  /** Whether the message has a Date header. */
  hasDate: boolean;
}

/** Recipients named in the refusal before "and N more". */
const NAMED = 5;

/**
 * Characters the address fields may hold per recipient the relay takes
 * (`maxRecipients`), and at least: room for long display names, while one
 * parser's run over them stays some milliseconds (it cannot be split).
 */
const ADDRESS_TEXT_PER_RECIPIENT = 512;
const MIN_ADDRESS_TEXT = 64 * 1024;

/** Entries the address fields may hold at least, whatever `maxRecipients`. */
const MIN_ENTRIES = 1000;
/** Tokens the address fields may hold per recipient, and at least (Postfix's `header_address_token_limit`, 10,240). */
const TOKENS_PER_RECIPIENT = 20;
const MIN_TOKENS = 10_240;

/**
 * How much of the address fields the relay reads for a message of at most
 * `maxRecipients` recipients: twice as many entries (a recipient may be
 * named in two fields; a group counts as one), 1,000 at least; 20 words,
 * separators and comments each, 10,240 at least; and
 * {@link ADDRESS_TEXT_PER_RECIPIENT} characters each, 64 KiB at least.
 */
export function headerLimits(maxRecipients: number): HeaderLimits {
  return {
    maxEntries: Math.max(MIN_ENTRIES, 2 * maxRecipients),
    maxTokens: Math.max(MIN_TOKENS, TOKENS_PER_RECIPIENT * maxRecipients),
    maxAddressText: Math.max(MIN_ADDRESS_TEXT, maxRecipients * ADDRESS_TEXT_PER_RECIPIENT),
  };
}

/**
 * Reconciles the SMTP envelope with the headers, for a service that reads
 * recipients from To, Cc and Bcc:
 *
 * - `RCPT TO` recipients no header names (the client removed Bcc, as
 *   Python's `send_message`, PHPMailer and most MTAs do) are written into a
 *   `Bcc` field at the end of the header section; the service removes it
 *   before delivery. An existing Bcc field is merged into it.
 * - Header recipients that are not in `RCPT TO` are refused: the service
 *   would mail people this transaction did not ask for.
 * - A control character in From, Sender or Reply-To is refused, as the
 *   service refuses it (the From fields' addresses are checked apart, by
 *   {@link fromRefusal}).
 *
 * Addresses compare as {@link addressKey} says: ASCII case aside, spelled
 * the same way (an IDN domain too: `xn--` in one and Unicode in the other
 * are refused). The headers are read strictly ({@link readingRelayHeaders}):
 * what the relay cannot read for certain is refused, never skipped; so are
 * headers that spell their recipients in more ways than `maxRecipients`, and
 * address fields past {@link headerLimits}.
 *
 * @param head the header section as received, ending with its blank line when there is a body
 * @param rcptTo the envelope recipients, as the client wrote them
 * @param limits.maxRecipients the most spellings of recipients the headers may hold
 * @throws {EmlApiError} `EENVELOPE` naming the header recipients missing from `RCPT TO`; a permanent
 *   `EMESSAGE` naming a header line or a To/Cc/Bcc entry the relay cannot read for certain, a limit
 *   passed, or what the service would refuse
 */
export function planEnvelope(
  head: Buffer,
  rcptTo: readonly string[],
  limits: { maxRecipients?: number } = {},
): EnvelopePlan {
  return runWhole(planningEnvelope(head, rcptTo, limits));
}

/** {@link planEnvelope} in steps, which the relay runs in slices of the event loop. */
export function* planningEnvelope(
  head: Buffer,
  rcptTo: readonly string[],
  { maxRecipients = Infinity }: { maxRecipients?: number } = {},
): Steps<EnvelopePlan> {
  const headers = yield* readingRelayHeaders(head, headerLimits(maxRecipients));
  const envelopeKeys = new Set(rcptTo.map(addressKey));
  const headerKeys = new Set(headers.recipients.map(addressKey));
  const notInEnvelope = headers.recipients.filter((a) => !envelopeKeys.has(addressKey(a)));
  if (notInEnvelope.length > 0) throw headersNameOthers(notInEnvelope, maxRecipients);
  if (headers.spellings > maxRecipients) {
    // Spellings that differ in ASCII case only are one recipient to the relay; a service that compared
    // them exactly would mail each: their number is held to what RCPT TO could have named.
    throw new EmlApiError(
      'EMESSAGE',
      `The To, Cc and Bcc headers spell their recipients in ${headers.spellings} different ways, more than the relay's ${maxRecipients} recipients per message`,
      { command: 'DATA', permanent: true },
    );
  }
  const addedBcc: string[] = [];
  const seen = new Set<string>();
  for (const address of rcptTo) {
    const key = addressKey(address);
    if (!headerKeys.has(key) && !seen.has(key)) {
      seen.add(key);
      addedBcc.push(address);
    }
  }
  const plan = {
    froms: headers.froms,
    senders: headers.senders,
    from: headers.from,
    messageId: headers.messageId,
    hasDate: headers.hasDate,
    addedBcc,
  };
  // A message has one Message-ID at most: the one the relay adds to a message without one replaces the empty ones.
  const doomed =
    headers.messageId === undefined ? headers.fields.filter((f) => f.name.toLowerCase() === 'message-id') : [];
  if (addedBcc.length === 0) return { ...plan, head: withoutFields(head, doomed) };
  const bcc = headers.fields.filter((f) => f.name.toLowerCase() === 'bcc');
  const existing = bcc.flatMap((f) => f.addresses ?? []);
  const kept = withoutFields(
    head,
    [...bcc, ...doomed].sort((a, b) => a.start - b.start),
  );
  return { ...plan, head: appendField(kept, foldedBcc([...existing, ...addedBcc], eolOf(head))) };
}

/** The header section without these fields (folded lines included). */
function withoutFields(head: Buffer, doomed: readonly RelayHeaderField[]): Buffer {
  if (doomed.length === 0) return head;
  const parts: Buffer[] = [];
  let pos = 0;
  for (const field of doomed) {
    parts.push(head.subarray(pos, field.start));
    pos = field.end;
  }
  parts.push(head.subarray(pos));
  return Buffer.concat(parts);
}

/** The line break the header section uses: `\n` for a section of bare LF lines (the relay's own are CRLF). */
function eolOf(head: Buffer): string {
  const lf = head.indexOf(0x0a);
  return lf === -1 || head[lf - 1] === 0x0d ? '\r\n' : '\n';
}

/**
 * The header section with `field` (a whole field, ending with its line break)
 * added as its last field, before the blank line that ends the section.
 */
export function appendField(section: Buffer, field: string): Buffer {
  const end = headerSectionEnd(section);
  let at: number;
  let lead = '';
  if (end !== undefined) {
    // Before the blank line that ends the header section (`\r\n` or `\n`).
    at = end - (section[end - 2] === 0x0d ? 2 : 1);
  } else {
    // A message without a body: all of it is header.
    at = section.length;
    if (at > 0 && section[at - 1] !== 0x0a) lead = eolOf(section);
  }
  return Buffer.concat([section.subarray(0, at), Buffer.from(`${lead}${field}`, 'utf8'), section.subarray(at)]);
}

/**
 * `Bcc: a, b, ...` folded so that no line exceeds 78 characters where the
 * addresses allow it (RFC 5322 2.1.1), ending with a line break.
 */
export function foldedBcc(addresses: readonly string[], eol: string): string {
  let out = 'Bcc:';
  let line = out.length;
  addresses.forEach((address, i) => {
    const item = i < addresses.length - 1 ? `${address},` : address;
    if (i > 0 && line + 1 + item.length > 78) {
      out += `${eol} ${item}`;
      line = 1 + item.length;
    } else {
      out += ` ${item}`;
      line += 1 + item.length;
    }
  });
  return `${out}${eol}`;
}

function headersNameOthers(addresses: string[], maxRecipients: number): EmlApiError {
  const named = addresses.slice(0, NAMED).join(', ');
  const more = addresses.length > NAMED ? ` and ${addresses.length - NAMED} more` : '';
  const limit = Number.isFinite(maxRecipients) ? ` (now ${maxRecipients})` : '';
  // What to change comes first: a reply is cut short past its length, and the addresses may be long.
  return new EmlApiError(
    'EENVELOPE',
    'The headers name recipients that are not in this transaction, which the email service would mail too, as ' +
      "when a sender splits a message into several transactions: set Postfix's smtp_destination_recipient_limit " +
      `(default 50) and the relay's --max-recipients${limit} to the most recipients a message has; ` +
      `not in RCPT TO: ${named}${more}`,
    { command: 'envelope', permanent: true },
  );
}

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
 * @returns the address as written (smtp-server's form when the line was not kept)
 */
export function keepRcptSpelling(address: SMTPServerAddress, session: SMTPServerSession): string {
  const line = lastLines.get(session);
  const written = line === undefined ? undefined : writtenAddress(lineOf(line), 'RCPT');
  if (written !== undefined) rcptSpellings.set(address, written);
  return written ?? address.address;
}

/**
 * The address of the `MAIL FROM` being answered as the client wrote it (call
 * it from `onMailFrom`; see {@link keepRcptSpelling}): '' for the null sender.
 */
export function mailFromSpelling(address: SMTPServerAddress, session: SMTPServerSession): string {
  const line = lastLines.get(session);
  return (line === undefined ? undefined : writtenAddress(lineOf(line), 'MAIL')) ?? address.address;
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

/** How long the service honours an `Idempotency-Key` (the contract's 24 hours); the relay remembers no longer. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/** Messages whose send outcome the relay remembers at most, by default (about 200 bytes each). */
const DEFAULT_CAPACITY = 10_000;

/** What names one message the relay received. */
export interface MessageIdentity {
  /** The `Idempotency-Key` of its send. */
  readonly idempotencyKey: string;
  /** The Message-ID the relay adds (deterministically), when the message has none; undefined when it has one. */
  readonly addedMessageId: string | undefined;
  /** What {@link MessageIdentities.settle} keys it by. */
  readonly fingerprint: string;
  /** The random part of an identity named by neither Message-ID nor Date ('' otherwise). */
  readonly nonce: string;
}

/**
 * The secret that keys the identities of the messages sent with an API key:
 * derived from the key (HKDF-SHA-256), so that every relay sending with the
 * same key names a message alike (a retry that reaches another relay is the
 * same send), while nobody without the key can compute a name.
 */
export function identitySecret(apiKey: string): Buffer {
  return Buffer.from(hkdfSync('sha256', apiKey, 'nodemailer-eml-api', 'relay message identity v1', 32));
}

/** What the relay knows of a message when it names it. */
export interface MessageFacts {
  /** {@link identitySecret} of the API key the message is sent with. */
  readonly secret: Buffer;
  /** `MAIL FROM` ('' for the null sender) and the `RCPT TO` recipients. */
  readonly envelope: { readonly from: string; readonly to: readonly string[] };
  /** SHA-256 (hex) of the message as it would leave the relay, without a Message-ID of the relay's. */
  readonly digest: string;
  readonly hasMessageId: boolean;
  readonly hasDate: boolean;
  /** The From address, whose domain the added Message-ID ends with. */
  readonly from: string | false;
}

/**
 * Names each message the relay sends, so that a client retrying after an
 * ambiguous `451` (the service accepted the upload but its answer was lost)
 * is not delivered twice, while a message sent again on purpose still is.
 *
 * - A message with a Message-ID, or with a Date, is named by its envelope and
 *   its bytes: the same bytes (the Date to the second) from the same `MAIL
 *   FROM` to the same `RCPT TO` are a retry, from whatever relay and however
 *   late, within the 24 hours the service honours the key.
 * - A message with neither (a static file sent by curl, Python's
 *   `EmailMessage` without a Date) may be sent again on purpose with the same
 *   bytes (an hourly alert): its bytes cannot tell a retry from a repeat. It
 *   gets a new identity, unless this relay's last try of the same envelope
 *   and bytes ended in a failure whose outcome it could not know (a `451`):
 *   then it is that try's retry, and keeps its identity. The relay remembers
 *   such failures for 24 hours, up to 10,000 messages, in memory: a retry
 *   that reaches another relay, or this one after a restart, is sent again.
 *
 * A message without a Message-ID gets one made from its identity
 * (`<hex.eml-api-relay@from-domain>`), as Postfix's cleanup adds a missing one
 * (`always_add_missing_headers`): recipients (and Gmail) expect one, and it
 * names the same message in every retry.
 *
 * Identities are HMACs keyed by the {@link identitySecret} of the API key
 * the message is sent with. An unkeyed hash of the envelope and the bytes,
 * which hold the hidden recipients (`RCPT TO`, and the Bcc field the relay
 * writes), let any recipient rebuild the added Message-ID from what it
 * received and a guessed Bcc, and so confirm the guess.
 */
export class MessageIdentities {
  /** Identity fingerprint → the nonce of a try whose outcome is unknown, and until when it holds. */
  readonly #unknown = new Map<string, { nonce: string; until: number }>();
  readonly #capacity: number;
  readonly #now: () => number;

  /**
   * @param options.capacity failed tries remembered at most; the oldest is forgotten past it. Default 10,000
   * @param options.now the clock, in milliseconds. Default `Date.now`
   */
  constructor({ capacity = DEFAULT_CAPACITY, now = Date.now }: { capacity?: number; now?: () => number } = {}) {
    this.#capacity = capacity;
    this.#now = now;
  }

  /** The identity of a message about to be sent. */
  identify(facts: MessageFacts): MessageIdentity {
    const hash = (label: string, ...parts: (string | readonly string[])[]) => mac(facts.secret, label, ...parts);
    const fingerprint = hash('fingerprint', facts.envelope.from, facts.envelope.to, facts.digest);
    // Without a Message-ID or a Date the bytes cannot tell a retry from a repeat: a new identity, or the remembered one.
    const nonce =
      facts.hasMessageId || facts.hasDate ? '' : (this.#remembered(fingerprint) ?? randomBytes(16).toString('hex'));
    const id = hash('identity', fingerprint, nonce);
    return {
      idempotencyKey: `smtp-relay-${id}`,
      addedMessageId: facts.hasMessageId
        ? undefined
        : `<${id.slice(0, 32)}.eml-api-relay@${messageIdDomain(facts.from)}>`,
      fingerprint,
      nonce,
    };
  }

  /**
   * Records how the send of an identified message ended: a failure whose
   * outcome is unknown (anything but a permanent refusal) is remembered, so
   * that the client's retry keeps the identity; anything else is forgotten.
   * Only messages named by a nonce (neither Message-ID nor Date) need it.
   * A send that succeeded but whose client left before its `250` (it will
   * retry, not knowing) is settled again with a transient failure.
   */
  settle(identity: { readonly fingerprint: string; readonly nonce: string }, failure: unknown): void {
    if (identity.nonce === '') return;
    this.#unknown.delete(identity.fingerprint);
    const known = failure === undefined || (failure instanceof EmlApiError && failure.permanent);
    if (known) return;
    this.#unknown.set(identity.fingerprint, { nonce: identity.nonce, until: this.#now() + IDEMPOTENCY_WINDOW_MS });
    // Map keeps insertion order: the first entry is the oldest.
    if (this.#unknown.size > this.#capacity) this.#unknown.delete(this.#unknown.keys().next().value!);
  }

  #remembered(fingerprint: string): string | undefined {
    const entry = this.#unknown.get(fingerprint);
    if (entry === undefined) return undefined;
    if (entry.until > this.#now()) return entry.nonce;
    this.#unknown.delete(fingerprint);
    return undefined;
  }
}

/** HMAC-SHA-256 (hex) of the parts, each length-prefixed so that no two lists of parts hash alike. */
function mac(secret: Buffer, label: string, ...parts: (string | readonly string[])[]): string {
  const h = createHmac('sha256', secret).update(label);
  for (const part of parts.flat()) h.update(`\0${Buffer.byteLength(part)}:${part}`);
  return h.digest('hex');
}

/** The domain of the From address in ASCII (`xn--` for an IDN), or `localhost` when there is none. */
function messageIdDomain(from: string | false): string {
  const domain = from === false ? '' : from.slice(from.lastIndexOf('@') + 1);
  if (domain.startsWith('[') && domain.endsWith(']')) return domain;
  const ascii = domain === '' ? '' : domainToASCII(domain.toLowerCase());
  return /^[a-z0-9.-]+$/.test(ascii) ? ascii : 'localhost';
}
