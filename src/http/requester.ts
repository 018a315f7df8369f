import { Agent, type Dispatcher } from 'undici';
import { EmlApiError } from '../shared/eml-api-error.js';
import { ClientClosedReason, TotalTimeoutReason } from './abort-reasons.js';
import { ConcurrencyLimiter } from './concurrency-limiter.js';
import { exchange, ExchangeFailure, type RawResponse } from './exchange.js';
import { redact } from './redact.js';
import { errorFromFailure, errorFromResponse, type CallStage, type FailureContext } from './request-error.js';

export type { CallStage };
import type { RequesterSettings } from './requester-options.js';
import { backoffDelay, classifyStatus, parseRetryAfter, sleep, type RetryClass } from './retry-policy.js';
import { localhostOnlyLoopback } from './localhost-lookup.js';
import { earlyAnswerConnector } from './early-answer-connector.js';
import { SendPacer } from './send-pacer.js';
import { readServiceResponse, type ServiceResponse } from './service-response.js';
import { SignalFanout } from './signal-fanout.js';
import { bytesBody, type UploadBody } from './upload-body.js';

/** One HTTP request of a call. */
export interface HttpRequest {
  method: 'GET' | 'POST' | 'DELETE';
  /** Path under the base URL, e.g. `/v1/send/eml`. */
  path: string;
  /** A JSON text, or a replayable body. */
  body?: string | UploadBody;
  headers?: Record<string, string>;
  /** Repeating it cannot do harm (a check, an add), so ambiguous failures are retried too. */
  replaySafe?: boolean;
  /** Non-2xx statuses the caller reads itself instead of failing on them. */
  acceptStatus?: (status: number) => boolean;
}

/** Options of one call. */
export interface CallOptions {
  /** The caller's signal: aborts the call wherever it is. */
  signal?: AbortSignal | undefined;
  /** A send: paced by `rateLimit` before it takes a connection slot. */
  paced?: boolean;
}

/**
 * One logical call in progress. It holds a connection slot from the moment
 * its work starts until it ends, so whatever it builds (a message) counts
 * against `maxConnections`.
 */
export interface Call {
  /** Aborted by the caller's signal, `timeouts.total` or `close({ abort: true })`. */
  readonly signal: AbortSignal;
  /** What the call is doing now. */
  stage: CallStage;
  /** The request being made (or the call's own name before the first), e.g. `POST /v1/send/eml`. */
  readonly command: string;
  /** Logs through the client's logger. */
  log(level: 'debug' | 'info' | 'warn', meta: Record<string, unknown>, message: string): void;
  /**
   * Sends one request, retrying what the retry policy allows, with backoff.
   * @returns a 2xx answer, or one `acceptStatus` accepts
   * @throws {EmlApiError} for any other answer; the raw failure (mapped by the call) when no answer came
   */
  request<T>(request: HttpRequest): Promise<ServiceResponse<T>>;
}

/**
 * What the request engine tells its observers (metrics, traces), which it
 * knows nothing else of: one event per attempt of a request, one per retry.
 * @example
 * requester.observe({ attempt: ({ seconds }) => histogram.observe(seconds) });
 */
export interface RequestObserver {
  /** An attempt ended: with an answer (`status`) or without one. */
  attempt?(event: {
    command: string;
    /** The call is a send (`paced`), not a check such as `verify()`. */
    send: boolean;
    attempt: number;
    bytes: number;
    seconds: number;
    status: number | undefined;
  }): void;
  /** A request is tried again after `delayMs`; `reason` is the status (`503`) or what failed (`unreachable`). */
  retry?(event: { command: string; send: boolean; attempt: number; delayMs: number; reason: string }): void;
}

/**
 * The request engine: runs calls within `maxConnections` slots, with pacing,
 * a total timeout per call, retries with backoff, abort from the caller's
 * signal or from `close({ abort: true })`, and a graceful close that waits for
 * every call made before it. It knows nothing of email.
 */
export class Requester {
  readonly #settings: RequesterSettings;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #limiter: ConcurrencyLimiter;
  readonly #pacer: SendPacer | undefined;
  readonly #fanout = new SignalFanout();
  readonly #releaseListeners = new Set<() => void>();
  readonly #observers = new Set<RequestObserver>();
  /** Calls in progress (settled when they end), so close() can wait for them. */
  readonly #inflight = new Set<Promise<void>>();
  /** The controllers of calls in progress, aborted by close({ abort: true }). */
  readonly #controllers = new Set<AbortController>();
  #closed = false;
  #abortedByClose = false;
  #closing: Promise<void> | undefined;

  constructor(settings: RequesterSettings) {
    this.#settings = settings;
    this.#ownsDispatcher = settings.dispatcher === undefined;
    this.#dispatcher =
      settings.dispatcher ??
      new Agent({
        connections: settings.maxConnections,
        keepAliveTimeout: 30_000,
        keepAliveMaxTimeout: 600_000,
        connect: earlyAnswerConnector({ timeout: settings.timeouts.connect, lookup: localhostOnlyLoopback() }),
      });
    this.#pacer = settings.rateLimit === undefined ? undefined : new SendPacer(settings.rateLimit);
    this.#limiter = new ConcurrencyLimiter(settings.maxConnections, () => {
      for (const listener of this.#releaseListeners) listener();
    });
  }

  /** Calls holding a slot now. */
  get active(): number {
    return this.#limiter.active;
  }

  /** Calls waiting for a slot. */
  get pending(): number {
    return this.#limiter.pending;
  }

  /** Whether a new call would start at once. */
  get hasFreeSlot(): boolean {
    return this.#limiter.hasFreeSlot;
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Calls `listener` each time a call ends and frees its slot. @returns a function that removes it */
  onSlotReleased(listener: () => void): () => void {
    this.#releaseListeners.add(listener);
    return () => this.#releaseListeners.delete(listener);
  }

  /** Tells `observer` of every attempt and retry of the requests to come. @returns a function that removes it */
  observe(observer: RequestObserver): () => void {
    this.#observers.add(observer);
    return () => this.#observers.delete(observer);
  }

  /**
   * Runs one logical call: waits for its pace and a free slot, then runs
   * `work` with the slot held. The call is registered before this returns,
   * so a later close() waits for it; after close() it is refused.
   *
   * @param command names the call in errors, e.g. `POST /v1/send/eml`
   * @throws {EmlApiError} every failure, mapped (`EABORT`, `ETIMEDOUT`, `ECONNECTION`...)
   */
  run<T>(command: string, options: CallOptions, work: (call: Call) => Promise<T>): Promise<T> {
    return this.track(command, () => this.#run(command, options, work));
  }

  /**
   * Registers an operation made of several calls (the batches of an import),
   * each with its own total timeout: close() waits for the whole operation,
   * whose calls still run after close() was called.
   *
   * @param operation gets the function that runs each of its calls
   */
  track<T>(
    command: string,
    operation: (
      run: <R>(command: string, options: CallOptions, work: (call: Call) => Promise<R>) => Promise<R>,
    ) => Promise<T>,
  ): Promise<T> {
    if (this.#closed) {
      return Promise.reject(
        new EmlApiError('ECONNECTION', `${command} refused: the client is closed`, { permanent: true }),
      );
    }
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    this.#inflight.add(finished);
    const run = <R>(cmd: string, options: CallOptions, work: (call: Call) => Promise<R>) =>
      this.#run(cmd, options, work);
    let result: Promise<T>;
    try {
      result = operation(run);
    } catch (err) {
      result = Promise.reject(err);
    }
    return result.finally(() => {
      this.#inflight.delete(finished);
      finish();
    });
  }

  /**
   * Stops accepting calls, lets the calls already made finish (queued ones
   * included), then closes the dispatcher it created. With `{ abort: true }`
   * the calls still running are aborted instead.
   */
  close(options: { abort?: boolean } = {}): Promise<void> {
    this.#closed = true;
    if (options.abort) {
      this.#abortedByClose = true;
      for (const controller of this.#controllers) controller.abort(new ClientClosedReason());
    }
    this.#closing ??= (async () => {
      while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
      if (this.#ownsDispatcher) await this.#dispatcher.close();
    })();
    return this.#closing;
  }

  async #run<T>(command: string, options: CallOptions, work: (call: Call) => Promise<T>): Promise<T> {
    // One controller per call, fed by the caller's signal, the total timeout and close({ abort }).
    // (AbortSignal.any costs noticeably more per call on Node 20.)
    const controller = new AbortController();
    this.#controllers.add(controller);
    if (this.#abortedByClose) controller.abort(new ClientClosedReason());
    if (options.signal) this.#fanout.follow(options.signal, controller);
    const total = this.#settings.timeouts.total;
    const timer = setTimeout(() => controller.abort(new TotalTimeoutReason(total)), total);
    const call = new RunningCall(
      this.#settings,
      this.#dispatcher,
      controller.signal,
      command,
      this.#observers,
      options.paced === true,
    );
    try {
      if (options.paced && this.#pacer) await this.#pacer.wait(controller.signal);
      return await this.#limiter.run(() => {
        call.stage = 'sending';
        return work(call);
      }, controller.signal);
    } catch (err) {
      throw errorFromFailure(err, call.context());
    } finally {
      clearTimeout(timer);
      if (options.signal) this.#fanout.unfollow(options.signal, controller);
      this.#controllers.delete(controller);
    }
  }
}

/** What a retry without an answer is called, by the phase the request failed in. */
const FAILED_IN: Record<ExchangeFailure['phase'], string> = {
  connect: 'unreachable',
  write: 'connection-reset',
  sent: 'no-answer',
};

/** A call in progress: its signal, stage and attempts, and the retry loop of its requests. */
class RunningCall implements Call {
  stage: CallStage = 'queued';
  #command: string;
  #attempts = 0;

  constructor(
    readonly settings: RequesterSettings,
    readonly dispatcher: Dispatcher,
    readonly signal: AbortSignal,
    command: string,
    readonly observers: ReadonlySet<RequestObserver> = new Set(),
    readonly send = false,
  ) {
    this.#command = command;
  }

  /** What error mapping needs to know about this call. */
  get command(): string {
    return this.#command;
  }

  log(level: 'debug' | 'info' | 'warn', meta: Record<string, unknown>, message: string): void {
    this.settings.logger[level](meta, message);
  }

  /** Tells the observers; one that throws is ignored (metrics must never fail a send). */
  #tell<K extends keyof RequestObserver>(kind: K, event: Parameters<NonNullable<RequestObserver[K]>>[0]): void {
    for (const observer of this.observers) {
      try {
        (observer[kind] as ((e: typeof event) => void) | undefined)?.(event);
      } catch {
        // An observer's failure is its own.
      }
    }
  }

  context(): FailureContext {
    return {
      command: this.#command,
      origin: this.settings.origin,
      secret: this.settings.secret,
      signal: this.signal,
      attempts: this.#attempts,
      responseTimeout: this.settings.timeouts.response,
      stage: this.stage,
    };
  }

  async request<T>(init: HttpRequest): Promise<ServiceResponse<T>> {
    const { settings, signal } = this;
    const { retry, timeouts, secret } = settings;
    const command = `${init.method} ${init.path}`;
    this.#command = command;
    this.#attempts = 0;
    this.stage = 'sending';
    const headers: Record<string, string> = { ...settings.headers, ...init.headers };
    if (init.body !== undefined) headers['content-type'] = 'application/json';
    const body = typeof init.body === 'string' ? bytesBody(Buffer.from(init.body)) : init.body;
    for (;;) {
      this.#attempts++;
      let answer: RawResponse | undefined;
      let failure: unknown;
      const startedAt = performance.now();
      try {
        answer = await exchange(this.dispatcher, {
          origin: settings.origin,
          path: settings.basePath + init.path,
          method: init.method,
          headers,
          body,
          signal,
          headersTimeout: timeouts.response,
        });
      } catch (err) {
        failure = err;
      }
      this.#tell('attempt', {
        command,
        send: this.send,
        attempt: this.#attempts,
        bytes: body?.length ?? 0,
        seconds: (performance.now() - startedAt) / 1000,
        status: answer?.statusCode,
      });
      let retryClass: RetryClass;
      let wait: number | undefined;
      let res: ServiceResponse<T> | undefined;
      if (answer) {
        // Redacted where the answer comes in: a service that echoes the key must not put it in results or errors.
        res = readServiceResponse<T>(answer.statusCode, answer.headers['content-type'], redact(answer.text, secret));
        if ((res.statusCode >= 200 && res.statusCode < 300) || init.acceptStatus?.(res.statusCode)) return res;
        retryClass = classifyStatus(res.statusCode);
        wait = parseRetryAfter(answer.headers['retry-after']);
      } else {
        // A body that failed to produce its bytes (a stored message that does not match its hash)
        // fails the call with its own error: no retry makes it right.
        if (signal.aborted || !(failure instanceof ExchangeFailure) || failure.cause instanceof EmlApiError) {
          throw failure;
        }
        retryClass = failure.phase === 'sent' ? 'ambiguous' : 'safe';
      }
      const allowed =
        retryClass === 'safe' || (retryClass === 'ambiguous' && (retry.retryAmbiguous || init.replaySafe === true));
      const delay = wait ?? backoffDelay(this.#attempts - 1, retry);
      if (!allowed || this.#attempts >= retry.attempts || delay > retry.maxDelay) {
        if (res) {
          const note =
            wait !== undefined && delay > retry.maxDelay
              ? `the service asks to retry after ${Math.ceil(delay / 1000)} s, longer than retry.maxDelay`
              : undefined;
          throw errorFromResponse(command, res, secret, {
            attempts: this.#attempts,
            ...(note ? { note } : {}),
            ...(wait === undefined ? {} : { retryAfter: wait }),
          });
        }
        throw failure;
      }
      this.log(
        'debug',
        { command, attempt: this.#attempts, delayMs: delay },
        'Retrying after a failure the service did not process',
      );
      this.#tell('retry', {
        command,
        send: this.send,
        attempt: this.#attempts,
        delayMs: delay,
        reason: res ? String(res.statusCode) : failure instanceof ExchangeFailure ? FAILED_IN[failure.phase] : 'failed',
      });
      await sleep(delay, signal);
    }
  }
}
