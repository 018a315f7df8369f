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
import { type CheckedEnvelope, portableMail } from './build-threads/portable-mail.js';
import { LEAN_MESSAGE_BYTES } from '../body/eml-upload-body.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { prepareForUpload, writeMessage, type WritableTree } from './message-writer.js';
import { resolveEnvelope } from './message-envelope.js';
import type { MailEnvelope, NodemailerMail } from './nodemailer-types.js';
import { SlotList, type Slot } from '../shared/slot-list.js';

/** A message Nodemailer compiled, built to bytes and checked, ready to upload or store. */
export interface BuiltMessage {
  /** In memory, or in a spool file past the threshold; the caller disposes `spooled.body`. */
  spooled: SpooledMessage;
  /** Sender and recipients, as the service reads them from the headers. */
  envelope: MailEnvelope;
  /** The Message-ID in the bytes (Nodemailer's own when the message has none). */
  messageId: string;
  /** Whether the envelope sender differs from From, which the service ignores for its own return path. */
  fromDiffers: boolean;
  onThread: boolean;
}

export interface BuildThreads {
  pool: BuildThreadPool;
  logger: EmlApiLogger;
}

/**
 * Builds a compiled message as the EML endpoint needs it: Bcc kept in the headers (the service reads recipients from
 * To, Cc and Bcc and removes Bcc, as sendmail and SES transports do), spooled, then checked (recipients present and the
 * same as any custom envelope). With `threads`, on a build thread when the message can move to one.
 * @param gate the turns of the sending thread's builds, or null to build at once (the outbox's producer, whose sends
 *   wait for no service) @default the shared {@link BuildGate}
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
  const built: { spooled: SpooledMessage; onThread: boolean; checked?: CheckedEnvelope | undefined } = (threads &&
    (await buildOnThread(mail, spool, signal, threads, limit))) ?? {
    spooled: await buildHere(mail, spool, signal, gate, limit),
    onThread: false,
  };
  const { spooled, checked } = built;
  try {
    const resolved = checked ? envelopeFromThread(checked) : resolveEnvelope(mail, spooled);
    return {
      spooled,
      envelope: resolved.envelope,
      // With `raw`, Nodemailer's messageId() is one it made up and never wrote: the bytes are the truth.
      messageId: resolved.messageId ?? mail.message.messageId(),
      fromDiffers: resolved.fromDiffers,
      onThread: built.onThread,
    };
  } catch (err) {
    await spooled.body.dispose();
    throw err;
  }
}

/** On the sending thread, Nodemailer's tree written straight into the spool when `gate` gives it a turn. */
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
 * How many messages the sending thread builds at once in the process. Nodemailer builds a message over several
 * event-loop turns, so builds started together share the thread and each takes as long as all of them, holding its
 * connection slot meanwhile; too few builds at once cost a CPU-bound sender per-message CPU instead. BENCHMARKS.md has
 * the measurements.
 */
export const SENDING_THREAD_BUILDS = 8;

/**
 * While builds wait, the gate looks at the thread and the running builds every this many ms. A build that wrote nothing
 * for {@link QUIET_LOOKS} looks is waiting for its content (a slow stream or URL) and stops counting; when every
 * running build is that quiet, or the event loop was idle half the period or more, every waiting build starts.
 */
export const SLOW_BUILD_MS = 20;

/**
 * Looks in a row without a write after which a build counts as waiting for its content; more than one, since on a
 * thread busy with other work, builds that are moving can all miss a period.
 */
export const QUIET_LOOKS = 3;

/** Looks ({@link SLOW_BUILD_MS} apart) after which a build stops counting, however it goes. */
export const SLOW_BUILD_PERIODS = 25;

export interface BuildTurn {
  /** A count that grows while the build writes. */
  watch(progress: () => number): void;
}

interface Turn extends BuildTurn {
  looks: number;
  quiet: number;
  progress: (() => number) | undefined;
  seen: number;
  slot: Slot<Turn> | undefined;
  release(): void;
}

/**
 * Lets a limited number of builds run at once, in order; a build waiting for its content stops counting, and all start
 * while the thread is idle. It keeps no timer while no build waits.
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
   * @param period ms between looks while builds wait @default SLOW_BUILD_MS
   * @param maxLooks looks after which a build stops counting in any case @default SLOW_BUILD_PERIODS
   */
  constructor(width = SENDING_THREAD_BUILDS, period = SLOW_BUILD_MS, maxLooks = SLOW_BUILD_PERIODS) {
    this.#width = width;
    this.#period = period;
    this.#maxLooks = maxLooks;
  }

  get load(): { running: number; waiting: number } {
    return { running: this.#running, waiting: this.#waiting.length };
  }

  /** Runs `build` once its turn comes. @throws the signal's reason when it aborts while waiting; what `build` throws */
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
      // One timer for the gate, only while builds wait: a timer per build costs a latency-bound sender.
      this.#since = performance.eventLoopUtilization();
      this.#lastLook = performance.now();
      this.#sweep = setInterval(() => this.#look(), this.#period);
      this.#sweep.unref?.();
    }
    return waiting;
  }

  #look(): void {
    const now = performance.now();
    // A look this late means the process had no time for anyone: nothing to judge by.
    const late = now - this.#lastLook > 2 * this.#period;
    this.#lastLook = now;
    const idle = performance.eventLoopUtilization(this.#since).utilization < 0.5;
    this.#since = performance.eventLoopUtilization();
    let looked = 0;
    let moving = 0;
    for (const turn of this.#turns.items()) {
      const progress = turn.progress?.() ?? 0;
      // Judged from its second look: at its first a build may not have started writing.
      const wrote = turn.looks === 0 || late || progress !== turn.seen;
      turn.seen = progress;
      turn.quiet = wrote ? 0 : turn.quiet + 1;
      looked++;
      if (turn.quiet < QUIET_LOOKS) moving++;
      if (turn.quiet >= QUIET_LOOKS || ++turn.looks > this.#maxLooks) turn.release();
    }
    // With no build seen (turns handed over, not started yet), nothing says the thread is free.
    if (idle || (looked > 0 && moving === 0)) {
      // No build is using the thread, or it has time to spare: every waiting build gets a turn at once, since
      // handing turns over a few at a time keeps sends waiting behind many stalled builds.
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

/** Shared by every transport in the process, as they share the thread. */
const sendingThreadBuilds = new BuildGate();

/** On a build thread; undefined (saying why at debug level) when it must be built here. */
async function buildOnThread(
  mail: NodemailerMail,
  spool: SpoolSettings,
  signal: AbortSignal,
  threads: BuildThreads,
  limit?: SpoolLimit,
): Promise<{ spooled: SpooledMessage; onThread: true; checked?: CheckedEnvelope | undefined } | undefined> {
  const portable = portableMail(mail);
  let reason: string;
  if (portable.movable) {
    const built = await threads.pool.build(portable, signal, Math.min(spool.threshold, LEAN_MESSAGE_BYTES));
    if (built.kind === 'whole') {
      const spooled = await spoolBuffer(built.eml, spool, signal, limit, built.body);
      return { spooled, onThread: true, checked: built.checked };
    }
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

function envelopeFromThread(checked: CheckedEnvelope): ReturnType<typeof resolveEnvelope> {
  if (!checked.ok) throw new EmlApiError(checked.code, checked.message, { command: 'envelope', permanent: true });
  return checked;
}
