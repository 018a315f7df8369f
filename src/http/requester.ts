export type { CallStage };

import { Agent, type Dispatcher } from 'undici';
import { EmlApiError } from '../shared/eml-api-error.js';
import { SlotList } from '../shared/slot-list.js';
import { exchangeRetryClass, statusVerdict, type RetryClass } from '../shared/failure.js';
import {
  ClientClosedReason,
  TotalTimeoutReason,
  redact,
  errorFromFailure,
  errorFromResponse,
  type CallStage,
  type FailureContext,
  readServiceResponse,
  type ServiceResponse,
} from './request-error.js';
import {
  exchange,
  ExchangeFailure,
  type RawResponse,
  localhostOnlyLoopback,
  earlyAnswerConnector,
  bytesBody,
  type UploadBody,
} from './exchange.js';
import type { EmlApiLogger } from '../shared/options-kit.js';

export interface HttpRequest {
  method: 'GET' | 'POST' | 'DELETE';
  /** Under the base URL, e.g. `/v1/send/eml`. */
  path: string;
  body?: string | UploadBody;
  headers?: Record<string, string>;
  /** Repeating it does no harm (a check, an add), so ambiguous failures are retried too. */
  replaySafe?: boolean;
  /** Non-2xx statuses the caller reads itself. */
  acceptStatus?: (status: number) => boolean;
}

export interface CallOptions {
  signal?: AbortSignal | undefined;
  /** A send: paced by `rateLimit` before it takes a slot. */
  paced?: boolean;
}

/** One logical call. It holds a connection slot while its work runs, so what it builds counts against `maxConnections`. */
export interface Call {
  /** Aborted by the caller's signal, `timeouts.total` or `close({ abort: true })`. */
  readonly signal: AbortSignal;
  stage: CallStage;
  /** The request being made (or the call's name before the first), e.g. `POST /v1/send/eml`. */
  readonly command: string;
  log(level: 'debug' | 'info' | 'warn', meta: Record<string, unknown>, message: string): void;
  /**
   * Sends one request, retrying what the retry policy allows.
   * @throws {EmlApiError} for an answer neither 2xx nor `acceptStatus`; the raw failure when no answer came
   */
  request<T>(request: HttpRequest): Promise<ServiceResponse<T>>;
}

/** What the request engine tells observers (metrics, traces): one event per attempt of a request, one per retry. */
export interface RequestObserver {
  /** An attempt ended: with an answer (`status`) or without one. */
  attempt?(event: {
    command: string;
    send: boolean;
    attempt: number;
    bytes: number;
    seconds: number;
    status: number | undefined;
  }): void;
  /** `reason` is the status (`503`) or what failed (`unreachable`). */
  retry?(event: { command: string; send: boolean; attempt: number; delayMs: number; reason: string }): void;
}

/**
 * The request engine: runs calls within `maxConnections` slots, with pacing, a total timeout per call, retries with
 * backoff, abort, and a graceful close that waits for every call made before it. It knows nothing of email.
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
  #inflight = 0;
  #drained: (() => void) | undefined;
  readonly #controllers = new SlotList<AbortController>();
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

  get active(): number {
    return this.#limiter.active;
  }

  get pending(): number {
    return this.#limiter.pending;
  }

  get hasFreeSlot(): boolean {
    return this.#limiter.hasFreeSlot;
  }

  get closed(): boolean {
    return this.#closed;
  }

  onSlotReleased(listener: () => void): () => void {
    this.#releaseListeners.add(listener);
    return () => this.#releaseListeners.delete(listener);
  }

  observe(observer: RequestObserver): () => void {
    this.#observers.add(observer);
    return () => this.#observers.delete(observer);
  }

  /**
   * Runs one logical call with its pace and a slot. The call is counted before this returns, so a later close() waits
   * for it. @throws {EmlApiError} every failure, mapped (`EABORT`, `ETIMEDOUT`, `ECONNECTION`...)
   */
  run<T>(command: string, options: CallOptions, work: (call: Call) => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(closedError(command));
    this.#inflight++;
    return this.#run(command, options, work, true);
  }

  /** Counts an operation of several calls (an import's batches), each with its own total timeout, for close() to wait for. */
  track<T>(
    command: string,
    operation: (
      run: <R>(command: string, options: CallOptions, work: (call: Call) => Promise<R>) => Promise<R>,
    ) => Promise<T>,
  ): Promise<T> {
    if (this.#closed) return Promise.reject(closedError(command));
    this.#inflight++;
    const run = <R>(cmd: string, options: CallOptions, work: (call: Call) => Promise<R>) =>
      this.#run(cmd, options, work, false);
    let result: Promise<T>;
    try {
      result = operation(run);
    } catch (err) {
      result = Promise.reject(err);
    }
    return result.finally(() => this.#ended());
  }

  #ended(): void {
    if (--this.#inflight === 0) this.#drained?.();
  }

  /** Stops accepting calls, lets those made finish (or aborts them), then closes the dispatcher it created. */
  close(options: { abort?: boolean } = {}): Promise<void> {
    this.#closed = true;
    if (options.abort) {
      this.#abortedByClose = true;
      for (const controller of this.#controllers.items()) controller.abort(new ClientClosedReason());
    }
    this.#closing ??= (async () => {
      if (this.#inflight > 0) await new Promise<void>((resolve) => (this.#drained = resolve));
      if (this.#ownsDispatcher) await this.#dispatcher.close();
    })();
    return this.#closing;
  }

  async #run<T>(command: string, options: CallOptions, work: (call: Call) => Promise<T>, counted: boolean): Promise<T> {
    // One controller per call, fed by the caller's signal, the total timeout and close({ abort }):
    // AbortSignal.any costs more per call on Node 20.
    const controller = new AbortController();
    const slot = this.#controllers.add(controller);
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
      this.#controllers.remove(slot);
      if (counted) this.#ended();
    }
  }
}

function closedError(command: string): EmlApiError {
  return new EmlApiError('ECONNECTION', `${command} refused: the client is closed`, { permanent: true });
}

const FAILED_IN: Record<ExchangeFailure['phase'], string> = {
  connect: 'unreachable',
  write: 'connection-reset',
  sent: 'no-answer',
};

class RunningCall implements Call {
  stage: CallStage = 'queued';
  #command: string;
  #attempts = 0;
  #replaysAmbiguous = false;

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

  get command(): string {
    return this.#command;
  }

  log(level: 'debug' | 'info' | 'warn', meta: Record<string, unknown>, message: string): void {
    this.settings.logger[level](meta, message);
  }

  #tell<K extends keyof RequestObserver>(kind: K, event: Parameters<NonNullable<RequestObserver[K]>>[0]): void {
    for (const observer of this.observers) {
      try {
        (observer[kind] as ((e: typeof event) => void) | undefined)?.(event);
      } catch {
        // An observer that throws is ignored: metrics must never fail a send.
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
      replaysAmbiguous: this.#replaysAmbiguous,
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
    const body = typeof init.body === 'string' ? bytesBody(Buffer.from(init.body)) : init.body;
    // One new object: V8 is slow to build a literal that spreads and then names fields.
    const headers: Record<string, string> = Object.assign({}, settings.headers, init.headers);
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(body.length);
    }
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
        // Redacted on arrival: a service that echoes the key must not put it in results or errors.
        res = readServiceResponse<T>(answer.statusCode, answer.headers['content-type'], redact(answer.text, secret));
        if ((res.statusCode >= 200 && res.statusCode < 300) || init.acceptStatus?.(res.statusCode)) return res;
        retryClass = statusVerdict(res.statusCode).retry;
        wait = parseRetryAfter(answer.headers['retry-after']);
      } else {
        // A body that failed to produce its bytes (a stored message not matching its hash) fails the call: no retry helps.
        if (signal.aborted || !(failure instanceof ExchangeFailure) || failure.cause instanceof EmlApiError) {
          throw failure;
        }
        retryClass = exchangeRetryClass(failure.phase === 'sent');
      }
      this.#replaysAmbiguous = retry.retryAmbiguous || init.replaySafe === true;
      const allowed = retryClass === 'safe' || (retryClass === 'ambiguous' && this.#replaysAmbiguous);
      const delay = wait ?? backoffDelay(this.#attempts - 1, retry);
      if (!allowed || this.#attempts >= retry.attempts || delay > retry.maxDelay) {
        if (res) {
          const note =
            wait !== undefined && delay > retry.maxDelay
              ? `the service asks to retry after ${Math.ceil(delay / 1000)} s, longer than retry.maxDelay`
              : undefined;
          throw errorFromResponse(command, res, secret, {
            attempts: this.#attempts,
            replaysAmbiguous: this.#replaysAmbiguous,
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

/**
 * When the client tries a call again: `attempts` tries in all, waiting `delay` after the first failure, doubling up to
 * `maxDelay`, each wait shortened by a random share of up to `jitter`.
 * @example new EmlApiClient({ apiKey, baseUrl, retry: { attempts: 6, delay: 200, retryAmbiguous: true } });
 */
export interface RetryOptions {
  /** Tries in all, the first included (1: no retry). @default 4 */
  attempts?: number;
  /** Wait after the first failed try, in ms; doubled after each further one. @default 500 */
  delay?: number;
  /** Longest wait before a retry, in ms; a longer `Retry-After` fails the call. @default 30000 */
  maxDelay?: number;
  /** Share of each wait drawn at random (0 to 1), so clients that failed together do not retry together. @default 0.5 */
  jitter?: number;
  /**
   * Also retry failures the service may have processed (timeout or reset after sending, 502, 504): safe only with a
   * service that honours `Idempotency-Key`, as the emulator does. @default false
   */
  retryAmbiguous?: boolean;
}

/**
 * At most `max` sends start per `duration` ms (the same shape in client, transport, worker and relay).
 * @example new EmlApiClient({ apiKey, baseUrl, rateLimit: { max: 20, duration: 1000 } }); // 20 sends a second
 */
export interface RateLimitOptions {
  /** Sends started per window, at least 1. */
  max: number;
  /** The window, in ms. */
  duration: number;
}

/**
 * Time limits in milliseconds.
 * @example new EmlApiClient({ apiKey, baseUrl, timeouts: { connect: 5000, response: 15000, total: 60000 } });
 */
export interface TimeoutOptions {
  /** Establishing a connection (TCP and TLS); a `dispatcher` you pass keeps its own. @default 10000 */
  connect?: number;
  /** From sending the request to the response headers, per attempt. @default 30000 */
  response?: number;
  /** The whole call: waiting for a slot, building, uploading, retries and backoff. @default 120000 */
  total?: number;
}

export const DEFAULT_RETRY: Readonly<Required<RetryOptions>> = Object.freeze({
  attempts: 4,
  delay: 500,
  maxDelay: 30_000,
  jitter: 0.5,
  retryAmbiguous: false,
});

export const DEFAULT_TIMEOUTS: Readonly<Required<TimeoutOptions>> = Object.freeze({
  connect: 10_000,
  response: 30_000,
  total: 120_000,
});

export interface RequesterSettings {
  origin: string;
  /** The base URL's path without a trailing slash; request paths are appended to it. */
  basePath: string;
  headers: Readonly<Record<string, string>>;
  /** The secret in `headers`, redacted from anything the service echoes. */
  secret: string;
  maxConnections: number;
  /** A dispatcher the caller owns (left open on close), or undefined to create one. */
  dispatcher: Dispatcher | undefined;
  retry: Required<RetryOptions>;
  timeouts: Required<TimeoutOptions>;
  rateLimit: RateLimitOptions | undefined;
  logger: EmlApiLogger;
}

/** Bounds how many async tasks run at once, whatever the dispatcher; the rest wait in FIFO order. */
export class ConcurrencyLimiter {
  readonly #limit: number;
  readonly #waiting: (() => void)[] = [];
  #active = 0;
  readonly #onRelease: () => void;

  constructor(limit: number, onRelease: () => void = () => {}) {
    this.#limit = limit;
    this.#onRelease = onRelease;
  }

  get active(): number {
    return this.#active;
  }

  get pending(): number {
    return this.#waiting.length;
  }

  get hasFreeSlot(): boolean {
    return this.#active + this.#waiting.length < this.#limit;
  }

  /** Runs `task` when a slot is free; an aborted `signal` rejects at once, also while waiting. */
  async run<T>(task: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    signal?.throwIfAborted();
    if (this.#active >= this.#limit) {
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          const at = this.#waiting.indexOf(grant);
          if (at !== -1) this.#waiting.splice(at, 1);
          reject(signal!.reason);
        };
        const grant = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        this.#waiting.push(grant);
      });
    } else {
      this.#active++;
    }
    try {
      return await task();
    } finally {
      const next = this.#waiting.shift();
      // Handed straight to the next waiter, so the active count never dips.
      if (next) next();
      else this.#active--;
      this.#onRelease();
    }
  }
}

/** Spaces sends `duration / max` ms apart, so at most `max` start in any `duration` ms. */
export class SendPacer {
  readonly #interval: number;
  #next = 0;

  constructor({ max, duration }: RateLimitOptions) {
    this.#interval = duration / max;
  }

  /** Resolves at this caller's slot; an aborted signal rejects without giving the slot back. */
  async wait(signal: AbortSignal): Promise<void> {
    const now = performance.now();
    const slot = Math.max(now, this.#next);
    this.#next = slot + this.#interval;
    if (slot > now) await sleep(slot - now, signal);
  }
}

/**
 * Forwards a caller's signal to its calls' controllers through one listener per signal: an app may pass one signal to
 * thousands of sends, and a listener each would pass Node's MaxListeners warning.
 */
export class SignalFanout {
  readonly #followers = new Map<AbortSignal, { calls: Set<AbortController>; listener: () => void }>();

  follow(signal: AbortSignal, controller: AbortController): void {
    if (signal.aborted) {
      controller.abort(signal.reason);
      return;
    }
    let entry = this.#followers.get(signal);
    if (!entry) {
      const calls = new Set<AbortController>();
      const listener = () => {
        for (const call of calls) call.abort(signal.reason);
      };
      entry = { calls, listener };
      this.#followers.set(signal, entry);
      signal.addEventListener('abort', listener, { once: true });
    }
    entry.calls.add(controller);
  }

  unfollow(signal: AbortSignal, controller: AbortController): void {
    const entry = this.#followers.get(signal);
    if (!entry) return;
    entry.calls.delete(controller);
    if (entry.calls.size === 0) {
      signal.removeEventListener('abort', entry.listener);
      this.#followers.delete(signal);
    }
  }
}

/** Exponential delay before retry `attempt` (0 first), shortened by a random share of up to `jitter` ("equal jitter" at 0.5). */
export function backoffDelay(
  attempt: number,
  retry: Required<RetryOptions>,
  random: () => number = Math.random,
): number {
  const exponential = Math.min(retry.maxDelay, retry.delay * 2 ** attempt);
  return Math.round(exponential * (1 - retry.jitter * (1 - random())));
}

/** `Retry-After` (seconds or an HTTP date) in ms from now; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | undefined, now: number = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
