import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import {
  spoolBuffer,
  spoolMessage,
  spoolWritten,
  type SpoolLimit,
  type SpooledMessage,
  type SpoolSettings,
} from '../body/message-spool.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import type { BuildThreadPool } from './build-threads/pool.js';
import { portableMail } from './build-threads/portable-mail.js';
import { prepareForUpload, writeMessage, type WritableTree } from './message-writer.js';
import type { MailEnvelope, NodemailerMail } from './nodemailer-types.js';
import { parseAddressList, parseHeaderFields, isValidAddress } from '../protocol/message-format.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { SlotList, type Slot } from '../shared/slot-list.js';

/** A message Nodemailer compiled, built to bytes and checked, ready to upload or store. */
export interface BuiltMessage {
  /** The built bytes: in memory, or in a spool file past the threshold. The caller disposes `spooled.body`. */
  spooled: SpooledMessage;
  /** Sender and recipients, as the service will read them from the headers. */
  envelope: MailEnvelope;
  /** The Message-ID written in the bytes (Nodemailer's own when the message has none). */
  messageId: string;
  /** Whether the envelope sender differs from From (the service sets its own return path). */
  fromDiffers: boolean;
  /** Whether a build thread built it (`buildThreads`), or the sending thread. */
  onThread: boolean;
}

/** Build threads and where to say why a message stays on the sending thread. */
export interface BuildThreads {
  pool: BuildThreadPool;
  logger: EmlApiLogger;
}

/**
 * Builds a compiled message the way the EML endpoint needs it: Bcc kept in
 * the headers (the service reads recipients from To, Cc and Bcc and removes
 * Bcc itself, as sendmail and SES transports do), spooled (in memory, or in a
 * file past the threshold), then checked: recipients present and the same as
 * any custom envelope. With `threads`, on a build thread when the message can
 * move to one; on the sending thread, a few at a time when `gate` is given.
 *
 * @param gate the turns of the sending thread's builds, or null to build at once (the outbox's producer:
 *   its sends wait for no service, so sharing the thread costs them no latency, and taking turns cost
 *   its 20 callers 9% of their rate) @default the shared {@link BuildGate}
 * @param limit the most bytes the message may have: the build stops as it passes them @default undefined
 * @throws {EmlApiError} `EENVELOPE` or `EMESSAGE`; `ESPOOL` when a spool file cannot be written,
 *   `ESTREAM` when a build thread dies; the signal's reason when it aborts
 */
export async function buildMessage(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads?: BuildThreads,
  gate: BuildGate | null = sendingThreadBuilds,
  limit?: SpoolLimit,
): Promise<BuiltMessage> {
  const built = (threads && (await buildOnThread(mail, spool, signal, threads, limit))) ?? {
    spooled: await buildHere(mail, spool, signal, gate, limit),
    onThread: false,
  };
  const { spooled } = built;
  try {
    const resolved = resolveEnvelope(mail, spooled);
    return {
      spooled,
      envelope: resolved.envelope,
      // The Message-ID written in the bytes is the truth: with `raw`,
      // Nodemailer's own messageId() is one it made up and never wrote.
      messageId: resolved.messageId ?? mail.message.messageId(),
      fromDiffers: resolved.fromDiffers,
      onThread: built.onThread,
    };
  } catch (err) {
    await spooled.body.dispose();
    throw err;
  }
}

/**
 * On the sending thread, written by Nodemailer's tree straight into the spool,
 * when `gate` gives it a turn ({@link sendingThreadBuilds}).
 */
function buildHere(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
  gate: BuildGate | null,
  limit?: SpoolLimit,
): Promise<SpooledMessage> {
  const build = (turn?: BuildTurn) => {
    const tree = mail.message as unknown as WritableTree;
    prepareForUpload(tree);
    return spoolWritten(
      (sink, done) => {
        turn?.watch(() => sink.writes);
        writeMessage(tree, sink, done);
      },
      spool,
      signal,
      limit,
    );
  };
  return gate ? gate.run(signal, build) : build();
}

/**
 * How many messages the sending thread builds at once, at most, in every
 * `EmlApiTransport` of the process (the outbox's producer builds at once).
 * Nodemailer builds a message over several turns of the event loop, so builds
 * started together share the thread turn by turn and each takes about as long
 * as all of them, holding its connection slot meanwhile: with
 * `maxConnections: 50` against a service answering in 50 ms, the transport
 * sent about 600 msg/s where the thread allowed 1,450 and the latency 1,000
 * (770-850 with this limit). Fewer builds a turn cost CPU per message in a
 * CPU-bound sender (each build's turns no longer share the event loop's
 * iterations): with 20 connections and a service answering at once, 2 or 4
 * lowered the rate by 5-15%, 8 by 3-9%; up to 8 connections nothing changes.
 */
export const SENDING_THREAD_BUILDS = 8;

/**
 * While builds wait for their turn, every this many ms the gate looks at the
 * thread and the builds running. A build that wrote nothing for
 * {@link QUIET_LOOKS} looks in a row is waiting for its content (a slow stream
 * or URL), not using the thread: it stops counting toward
 * {@link SENDING_THREAD_BUILDS}, so it does not hold back the builds behind it.
 * When every build running is that quiet, or the thread had time to spare (its
 * event loop idle half of the period or more), the builds running are not what
 * holds the others back: every build waiting starts. A build stops counting
 * after {@link SLOW_BUILD_PERIODS} looks in any case.
 */
export const SLOW_BUILD_MS = 20;

/**
 * Looks in a row without a write after which a build counts as waiting for its
 * content. One was not enough: on a thread busy with other work (an app, the
 * emulator in a test) eight builds that were moving could all miss a period.
 */
export const QUIET_LOOKS = 3;

/** Looks ({@link SLOW_BUILD_MS} apart) after which a build stops counting, however it goes. */
export const SLOW_BUILD_PERIODS = 25;

/** What a build tells the gate of its progress. */
export interface BuildTurn {
  /** How to read the build's progress: a count that grows while it writes. */
  watch(progress: () => number): void;
}

/** A build holding a turn. */
interface Turn extends BuildTurn {
  looks: number;
  quiet: number;
  progress: (() => number) | undefined;
  seen: number;
  slot: Slot<Turn> | undefined;
  release(): void;
}

/**
 * Lets a limited number of builds run at once, in the order they came; a
 * build waiting for its content stops counting, and everyone starts while the
 * thread is idle. Waiting ends with the signal's reason when it aborts. It
 * keeps no timer while no build waits.
 */
export class BuildGate {
  readonly #width: number;
  readonly #period: number;
  readonly #maxLooks: number;
  #running = 0;
  readonly #waiting: Array<() => void> = [];
  readonly #turns = new SlotList<Turn>();
  #sweep: NodeJS.Timeout | undefined;
  #since: EventLoopUtilization | undefined;
  #lastLook = 0;

  /**
   * @param width builds at once @default SENDING_THREAD_BUILDS
   * @param period ms between the looks at the thread and the builds while others wait @default SLOW_BUILD_MS
   * @param maxLooks looks after which a build stops counting in any case @default SLOW_BUILD_PERIODS
   */
  constructor(width = SENDING_THREAD_BUILDS, period = SLOW_BUILD_MS, maxLooks = SLOW_BUILD_PERIODS) {
    this.#width = width;
    this.#period = period;
    this.#maxLooks = maxLooks;
  }

  /** Builds running and counted now, and builds waiting for their turn. */
  get load(): { running: number; waiting: number } {
    return { running: this.#running, waiting: this.#waiting.length };
  }

  /**
   * Runs `build` once its turn comes.
   * @throws the signal's reason when it aborts while waiting; what `build` throws
   */
  async run<T>(signal: AbortSignal, build: (turn: BuildTurn) => Promise<T>): Promise<T> {
    if (this.#running < this.#width) this.#running++;
    else await this.#turn(signal);
    const turn: Turn = {
      looks: 0,
      quiet: 0,
      progress: undefined,
      seen: 0,
      slot: undefined,
      watch(progress) {
        turn.progress = progress;
      },
      release: () => {
        if (turn.slot === undefined) return;
        this.#turns.remove(turn.slot);
        turn.slot = undefined;
        // Handed straight to the next in line, so a newcomer cannot take the turn in between.
        const next = this.#waiting.shift();
        if (next) next();
        else this.#running--;
      },
    };
    turn.slot = this.#turns.add(turn);
    try {
      return await build(turn);
    } finally {
      turn.release();
    }
  }

  #turn(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const waiting = new Promise<void>((resolve, reject) => {
      const take = () => {
        signal.removeEventListener('abort', leave);
        resolve();
      };
      const leave = () => {
        const at = this.#waiting.indexOf(take);
        if (at >= 0) this.#waiting.splice(at, 1);
        reject(signal.reason);
      };
      this.#waiting.push(take);
      signal.addEventListener('abort', leave, { once: true });
    });
    if (this.#sweep === undefined) {
      // A timer per build cost a latency-bound sender 2-3% of its rate: one for the gate, only while builds wait.
      this.#since = performance.eventLoopUtilization();
      this.#lastLook = performance.now();
      this.#sweep = setInterval(() => this.#look(), this.#period);
      this.#sweep.unref?.();
    }
    return waiting;
  }

  /** Stops counting builds that wait for their content; lets everyone in while no build is using the thread. */
  #look(): void {
    const now = performance.now();
    // A look this late means the process had no time for anyone (a busy machine): nothing to judge by.
    const late = now - this.#lastLook > 2 * this.#period;
    this.#lastLook = now;
    const idle = performance.eventLoopUtilization(this.#since).utilization < 0.5;
    this.#since = performance.eventLoopUtilization();
    let looked = 0;
    let moving = 0;
    for (const turn of this.#turns.items()) {
      const progress = turn.progress?.() ?? 0;
      // A build is judged from the second look it sees: at its first it may not have started writing.
      const wrote = turn.looks === 0 || late || progress !== turn.seen;
      turn.seen = progress;
      turn.quiet = wrote ? 0 : turn.quiet + 1;
      looked++;
      if (turn.quiet < QUIET_LOOKS) moving++;
      if (turn.quiet >= QUIET_LOOKS || ++turn.looks > this.#maxLooks) turn.release();
    }
    // With no build seen (turns handed over, not started yet), nothing says the thread is free.
    if (idle || (looked > 0 && moving === 0)) {
      // No build is using the thread (or it has time to spare): sharing it costs nothing, so a turn for
      // everyone waiting, over the width for now. Handing turns over a few at a time, each new one taking
      // looks to show it waits too, kept sends behind hundreds of stalled builds waiting for seconds.
      for (const take of this.#waiting.splice(0)) {
        this.#running++;
        take();
      }
    }
    if (this.#waiting.length === 0) {
      clearInterval(this.#sweep);
      this.#sweep = undefined;
    }
  }
}

/** The sending thread's builds, shared by every transport in the process (they share the thread). */
const sendingThreadBuilds = new BuildGate();

/** On a build thread; undefined (after saying why, at debug level) when it must be built here. */
async function buildOnThread(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads: BuildThreads,
  limit?: SpoolLimit,
): Promise<{ spooled: SpooledMessage; onThread: true } | undefined> {
  const portable = portableMail(mail);
  let reason: string;
  if (portable.movable) {
    const built = await threads.pool.build(portable, signal);
    if (built.kind === 'whole') return { spooled: await spoolBuffer(built.eml, spool, signal, limit), onThread: true };
    if (built.kind === 'stream') {
      return { spooled: await spoolMessage(built.stream, spool, signal, limit), onThread: true };
    }
    reason = built.reason;
  } else {
    reason = portable.reason;
  }
  threads.logger.debug({ reason }, `Building the message on the sending thread: ${reason}`);
  return undefined;
}

/** Recipients and sender as the service will read them from the message's headers. */
export interface HeaderAddresses {
  from: string | false;
  recipients: string[];
  /** The Message-ID header as written, or undefined when there is none. */
  messageId: string | undefined;
}

/** Reads From and the To, Cc and Bcc recipients (deduplicated, in order) from a built message. */
export function readHeaderAddresses(eml: Buffer): HeaderAddresses {
  const seen = new Set<string>();
  const recipients: string[] = [];
  let from: string | false = false;
  let messageId: string | undefined;
  for (const field of parseHeaderFields(eml)) {
    const name = field.name.toLowerCase();
    if (name === 'message-id' && messageId === undefined) {
      messageId = field.value.trim() || undefined;
    } else if (name === 'from' && from === false) {
      from = parseAddressList(field.value)[0] ?? false;
    } else if (name === 'to' || name === 'cc' || name === 'bcc') {
      for (const address of parseAddressList(field.value)) {
        const key = address.toLowerCase();
        if (!seen.has(key)) {
          seen.add(key);
          recipients.push(address);
        }
      }
    }
  }
  return { from, recipients, messageId };
}

/**
 * Decides the envelope of a send through `/v1/send/eml`, where the service
 * takes recipients from the headers. Recipients the caller gave that differ
 * from the headers cannot be honoured and are refused: a custom Nodemailer
 * `envelope`, or `to`/`cc`/`bcc` given with `raw` (Nodemailer makes its
 * envelope from them, while the service reads the raw message's headers).
 *
 * @param built the built message; its header section is read only when Nodemailer's own view cannot be trusted
 * @returns the envelope, whether its sender differs from the From header, and the message's Message-ID
 * @throws {EmlApiError} `EENVELOPE` when recipients differ or there are none; `EMESSAGE` without a From address
 */
export function resolveEnvelope(
  mail: NodemailerMail,
  built: { readonly head: Buffer },
): { envelope: MailEnvelope; fromDiffers: boolean; messageId: string | undefined } {
  const { data } = mail;
  const custom = data.envelope !== undefined && data.envelope !== null;
  const raw = Boolean(data.raw);
  const nodemailerEnvelope = mail.message.getEnvelope();
  if (!custom && !raw) {
    // Nodemailer wrote the headers from the same data its envelope comes from:
    // no need to read them back from the bytes (the common, hot path).
    checkFrom(
      fromIsEnvelopeSender(mail.message)
        ? nodemailerEnvelope.from || undefined
        : firstAddress(mail.message.getAddresses().from),
    );
    if (nodemailerEnvelope.to.length === 0) throw noRecipients();
    return {
      envelope: { from: nodemailerEnvelope.from, to: [...nodemailerEnvelope.to] },
      fromDiffers: false,
      messageId: mail.message.messageId(),
    };
  }
  const headers = readHeaderAddresses(built.head);
  checkFrom(headers.from || undefined);
  if (headers.recipients.length === 0) throw noRecipients();
  const given = custom || (raw && (present(data.to) || present(data.cc) || present(data.bcc)));
  const envelope: MailEnvelope = given
    ? { from: nodemailerEnvelope.from, to: [...nodemailerEnvelope.to] }
    : // A raw message has no parsed headers in Nodemailer, so read them from the bytes.
      { from: nodemailerEnvelope.from || headers.from, to: headers.recipients };
  if (given) {
    const inHeaders = new Set(headers.recipients.map((a) => a.toLowerCase()));
    const inEnvelope = new Set(envelope.to.map((a) => a.toLowerCase()));
    const onlyEnvelope = envelope.to.filter((a) => !inHeaders.has(a.toLowerCase()));
    const onlyHeaders = headers.recipients.filter((a) => !inEnvelope.has(a.toLowerCase()));
    if (onlyEnvelope.length > 0 || onlyHeaders.length > 0) {
      const parts: string[] = [];
      const yours = custom ? 'in the envelope only' : 'in to/cc/bcc only';
      if (onlyEnvelope.length > 0) parts.push(`${yours}: ${onlyEnvelope.join(', ')}`);
      if (onlyHeaders.length > 0) parts.push(`in the headers only: ${onlyHeaders.join(', ')}`);
      const what = custom ? 'envelope recipients' : 'to/cc/bcc given with raw';
      const fix = custom
        ? 'put the recipients in to/cc/bcc (Bcc stays hidden from recipients) and drop the custom envelope'
        : 'put the recipients in the To/Cc/Bcc headers of the raw message and leave to/cc/bcc out';
      throw new EmlApiError(
        'EENVELOPE',
        `The ${what} differ from the To/Cc/Bcc headers of the message (${parts.join('; ')}). ` +
          `The EML endpoint delivers to the header recipients only, so these recipients cannot be honoured; ${fix}`,
        { command: 'envelope', permanent: true },
      );
    }
  }
  const fromDiffers =
    envelope.from !== false && headers.from !== false && envelope.from.toLowerCase() !== headers.from.toLowerCase();
  return { envelope, fromDiffers, messageId: headers.messageId };
}

/** The service needs a From address: refused here, before anything is sent. */
function checkFrom(from: string | undefined): void {
  if (from === undefined || from === '') {
    throw new EmlApiError('EMESSAGE', 'The message has no From address; set from (the service needs one to send)', {
      command: 'envelope',
      permanent: true,
    });
  }
  if (!isValidAddress(from)) {
    throw new EmlApiError('EMESSAGE', `The From address ${JSON.stringify(from.slice(0, 100))} is not a valid address`, {
      command: 'envelope',
      permanent: true,
    });
  }
}

/**
 * Whether Nodemailer's envelope sender is the first address of the From
 * header, if any: so it is with one From header and no Sender or Reply-To,
 * which its envelope falls back to when From gives no address. Saves
 * parsing every address header again.
 */
function fromIsEnvelopeSender(message: NodemailerMail['message']): boolean {
  const headers = (message as { _headers?: unknown })._headers;
  if (!Array.isArray(headers)) return false;
  let froms = 0;
  for (const { key } of headers as { key?: unknown }[]) {
    const name = typeof key === 'string' ? key.toLowerCase() : '';
    // A key spelled otherwise (a normalizeHeaderKey option) is one the envelope does not read.
    if (name === 'from' && key === 'From') froms++;
    else if (name === 'from' || name === 'sender' || name === 'reply-to') return false;
  }
  return froms === 1;
}

/** The address of the first entry of a parsed address header. */
function firstAddress(list: unknown): string | undefined {
  const first: unknown = Array.isArray(list) ? list[0] : undefined;
  if (typeof first === 'string') return first;
  const address = (first as { address?: unknown } | undefined)?.address;
  return typeof address === 'string' ? address : undefined;
}

function present(value: unknown): boolean {
  return value !== undefined && value !== null && value !== '' && !(Array.isArray(value) && value.length === 0);
}

function noRecipients(): EmlApiError {
  return new EmlApiError(
    'EENVELOPE',
    'No recipients defined: the message has no To, Cc or Bcc header, and the service takes recipients from them',
    { command: 'envelope', permanent: true },
  );
}
