import { EventEmitter } from 'node:events';
import { EmlApiClient, toGroupEmailRequest, toStandardEmailRequest } from '../client/eml-api-client.js';
import { checkIdempotencyKey } from '../client/client-input.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import { checkOptions, custom, type OptionSchema, passedOn } from '../shared/option-schema.js';
import { VERSION } from '../shared/version.js';
import { EmlApiMetrics, type MetricsRegistry } from '../observability/metrics.js';
import { endSend, watchSends, activeSpanEvent, startSpan } from '../observability/tracing.js';
import { buildMessage, type BuildThreads } from './build-message.js';
import { BuildThreadPool, resolveBuildThreads } from './build-threads/pool.js';
import { sendRouteOf, type SendRoute, jsonSendFromMail } from './json-send-from-mail.js';
import type { NodemailerMail, MailEnvelope } from './nodemailer-types.js';
import { type EmlApiClientOptions, CLIENT_SCHEMA } from '../client/client-options.js';
import type { GroupSendAcceptedResponse, SendAcceptedResponse } from '../protocol/api-types.js';
import type { GroupSendResult, SendResult } from '../client/client-types.js';

/** Nodemailer's callback of `transport.send`: called once, with the error or with what the send resolved. */
type SendCallback = (err: Error | null, info?: EmlApiSentMessageInfo) => void;

/**
 * The event of {@link EmlApiTransport}: `'idle'` when a send would start at once again (Nodemailer's pool contract).
 * @example transport.on('idle', () => console.log('ready for more'));
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- EventEmitter implements them
export interface EmlApiTransport {
  on(event: 'idle', listener: (...args: unknown[]) => void): this;
  once(event: 'idle', listener: (...args: unknown[]) => void): this;
  off(event: 'idle', listener: (...args: unknown[]) => void): this;
  addListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  removeListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  prependListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  prependOnceListener(event: 'idle', listener: (...args: unknown[]) => void): this;
  emit(event: 'idle'): boolean;
}

/**
 * Nodemailer transport that sends through the email service's HTTP API, a drop-in replacement for an SMTP relay. A
 * message goes to `POST /v1/send/eml` as Nodemailer compiled it (plugins and DKIM applied, Bcc kept: the service reads
 * recipients from To, Cc and Bcc and removes Bcc); `group` or `tracking: true` send JSON fields to
 * `/v1/send/group/:groupId` or `/v1/send/email`. Like Nodemailer's SMTP pool it builds a message only once a connection
 * slot is free, so memory is bounded by `maxConnections`. `send`, `verify`, `close` and `isIdle` are bound own
 * properties, so a spread copy still works.
 * @example
 * import nodemailer from 'nodemailer';
 * import { EmlApiTransport } from 'nodemailer-eml-api';
 *
 * const transporter = nodemailer.createTransport(
 *   new EmlApiTransport({ apiKey: process.env.EML_API_KEY!, baseUrl: 'https://api.mail.example.com' }),
 * );
 * const info = await transporter.sendMail({ from: 'shop@example.com', to: 'ann@example.net', subject: 'Hi', text: 'Hello' });
 * console.log(info.messageId, info.response); // '<…@example.com>' '202 Accepted'
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- typed events (interface above)
export class EmlApiTransport extends EventEmitter {
  /** Transport name, for Nodemailer's logs. */
  readonly name = 'EmlApiTransport';
  /** Tells Nodemailer that the transport honours `sendMail({ signal })`, queued, building or in flight (`EABORT`). */
  readonly supportsAbortSignal = true;
  /** Package version, for Nodemailer's logs. */
  readonly version = VERSION;
  /** The API client the transport sends through; use it for the other operations. */
  readonly client: EmlApiClient;
  readonly #logger: EmlApiLogger;
  readonly #threads: BuildThreads | undefined;
  #closed = false;
  readonly #metrics: EmlApiMetrics | undefined;

  /** @throws {EmlApiError} `ECONFIG` naming the invalid option */
  constructor(options: EmlApiTransportOptions) {
    super();
    const { clientOptions, buildThreads, metrics } = splitTransportOptions(options);
    this.#metrics = EmlApiMetrics.resolve(metrics, "The transport's metrics option");
    this.client = new EmlApiClient(clientOptions);
    this.#logger = this.client.logger;
    this.#threads =
      buildThreads > 0 ? { pool: new BuildThreadPool(buildThreads, this.#logger), logger: this.#logger } : undefined;
    watchSends(this.client, 'transport', this.#metrics);
    this.client.onSlotReleased(() => {
      if (this.isIdle()) this.emit('idle');
    });
  }

  /** Sends one message for Nodemailer's `sendMail`; the callback is called exactly once. */
  readonly send = (mail: NodemailerMail, callback: (err: Error | null, info?: EmlApiSentMessageInfo) => void): void => {
    let called = false;
    const done: SendCallback = (err, info) => {
      if (called) return;
      called = true;
      if (err) callback(err);
      else callback(null, info);
    };
    // One span per sendMail, a child of the app's active span.
    const span = startSpan('eml-api.send', { kind: 'client', attributes: { 'eml_api.component': 'transport' } });
    let sent: Promise<EmlApiSentMessageInfo>;
    try {
      // Run in the span, so are the build and uploads (a call waiting for a slot keeps its context).
      sent = span.run(() => this.#send(mail));
    } catch (err) {
      sent = Promise.reject(err);
    }
    sent.then(
      (info) => {
        span.set({ 'eml_api.message_id': info.messageId || undefined, 'eml_api.id': info.id });
        endSend(span, this.#metrics, 'transport', { response: info.response });
      },
      (err: unknown) => endSend(span, this.#metrics, 'transport', { err }),
    );
    sent.then(
      (info) => done(null, info),
      (err: unknown) => done(err instanceof Error ? err : new Error(String(err))),
    );
  };

  /**
   * Checks that the service is reachable and the API key may send, without sending; a Promise without a callback.
   * @throws {EmlApiError} `EAUTH` when the key or its `sender` scope is refused
   * @example await transporter.verify(); // true
   */
  readonly verify: {
    (): Promise<true>;
    (callback: (err: Error | null, success?: true) => void): void;
  } = ((callback?: (err: Error | null, success?: true) => void): Promise<true> | void => {
    const promise = this.client.verify();
    if (typeof callback !== 'function') return promise;
    promise.then(
      (ok) => callback(null, ok),
      (err: Error) => callback(err),
    );
  }) as EmlApiTransport['verify'];

  /**
   * Stops the transport: new sends fail with `ECONNECTION`, sends already made finish (or, with `{ abort: true }`, are
   * aborted with `EABORT`), then connections close and build threads end. The callback is optional.
   * @example
   * await transporter.close();                // graceful, what Nodemailer calls
   * await transport.close({ abort: true });   // now
   */
  readonly close = (
    optionsOrCallback?: { abort?: boolean } | ((err?: Error | null) => void),
    maybeCallback?: (err?: Error | null) => void,
  ): Promise<void> => {
    const options = typeof optionsOrCallback === 'object' && optionsOrCallback !== null ? optionsOrCallback : {};
    const callback = typeof optionsOrCallback === 'function' ? optionsOrCallback : maybeCallback;
    this.#closed = true;
    const threads = this.#threads;
    const promise = threads
      ? this.client.close(options).finally(() => threads.pool.close())
      : this.client.close(options);
    if (typeof callback === 'function') {
      promise.then(
        () => callback(null),
        (err: Error) => callback(err),
      );
    }
    return promise;
  };

  /** Whether a send would start at once (fewer than `maxConnections` running or queued). */
  readonly isIdle = (): boolean => !this.#closed && this.client.hasFreeSlot;

  async #send(mail: NodemailerMail): Promise<EmlApiSentMessageInfo> {
    if (this.#closed) {
      throw new EmlApiError('ECONNECTION', 'The transport is closed; create a new one to send more mail', {
        permanent: true,
      });
    }
    const data = mail.data as Record<string, unknown>;
    const route = sendRouteOf(data);
    const idempotencyKey = checkIdempotencyKey(data.idempotencyKey);
    const signal = signalOf(mail);
    if (route.kind === 'group') return this.#sendGroup(mail, route, idempotencyKey, signal);
    if (route.kind === 'email') return this.#sendTracked(mail, route, idempotencyKey, signal);
    return this.#sendEml(mail, idempotencyKey, signal);
  }

  async #sendEml(
    mail: NodemailerMail,
    idempotencyKey: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<EmlApiSentMessageInfo> {
    const { result, built } = await this.client.send({
      kind: 'eml',
      idempotencyKey,
      signal,
      build: async ({ signal: callSignal, spool }) => {
        const message = await buildMessage(mail, spool, callSignal, this.#threads);
        activeSpanEvent('built', {
          'eml_api.bytes': message.spooled.size,
          'eml_api.message_id': message.messageId,
          'eml_api.built_on_thread': message.onThread,
        });
        const { envelope } = message;
        if (message.fromDiffers) {
          this.#logger.info(
            { envelopeFrom: envelope.from },
            'Envelope sender differs from From; the service sets its own return path, so the envelope sender is not used',
          );
        }
        this.#logger.debug(
          { recipients: envelope.to.length, bytes: message.spooled.size, builtOnThread: message.onThread },
          'Sending message',
        );
        return { body: message.spooled.body, envelope, messageId: message.messageId };
      },
    });
    const { envelope, messageId } = built!;
    this.#logger.info({ messageId, id: result.id, response: result.response }, 'Message accepted');
    return sentMessageInfo(envelope, messageId, result);
  }

  async #sendGroup(
    mail: NodemailerMail,
    route: Extract<SendRoute, { kind: 'group' }>,
    idempotencyKey: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<EmlApiSentMessageInfo> {
    const { result, built } = await this.client.send({
      kind: 'group',
      groupId: route.groupId,
      idempotencyKey,
      signal,
      build: async ({ signal: callSignal }) => {
        const { from, subject, textContent } = await jsonSendFromMail(mail, route, callSignal);
        const request = toGroupEmailRequest({ from, subject, textContent }, 'sendMail');
        return { body: JSON.stringify(request), from: request.from.email };
      },
    });
    this.#logger.info({ group: route.groupId, id: result.id, response: result.response }, 'Group email accepted');
    return { ...sentMessageInfo({ from: built!.from, to: [] }, '', result), group: route.groupId };
  }

  async #sendTracked(
    mail: NodemailerMail,
    route: Extract<SendRoute, { kind: 'email' }>,
    idempotencyKey: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<EmlApiSentMessageInfo> {
    const { result, built } = await this.client.send({
      kind: 'email',
      idempotencyKey,
      signal,
      build: async ({ signal: callSignal }) => {
        const request = toStandardEmailRequest(await jsonSendFromMail(mail, route, callSignal), 'sendMail');
        return {
          body: JSON.stringify(request),
          envelope: { from: request.from.email, to: request.to.map((a) => a.email) },
        };
      },
    });
    this.#logger.info({ id: result.id, response: result.response }, 'Tracked email accepted');
    return sentMessageInfo(built!.envelope, result.messageId ?? '', result);
  }
}

function signalOf(mail: NodemailerMail): AbortSignal | undefined {
  const signal = (mail.data as { signal?: unknown }).signal;
  return signal instanceof AbortSignal ? signal : undefined;
}

/**
 * Options of {@link EmlApiTransport}: the {@link EmlApiClientOptions} and the transport's own.
 * @example
 * const transporter = nodemailer.createTransport(
 *   new EmlApiTransport({ apiKey: process.env.EML_API_KEY!, baseUrl: 'https://api.mail.example.com', logger: true }),
 * );
 */
export interface EmlApiTransportOptions extends EmlApiClientOptions {
  /** Where the transport logs: `true` for the console, or a logger object; never the API key. @default false */
  logger?: boolean | EmlApiLogger;
  /**
   * Build messages on this many worker threads (`'auto'`: `os.availableParallelism()`), keeping Nodemailer's build
   * (MIME, DKIM, attachment files) off the app's thread, with the same bytes. A message a thread cannot reproduce
   * (stream or function content, a stream plugin, values that are not plain data, in-memory contents over 2 MiB) is
   * built on the sending thread, and the debug log says why. Threads start with the first send that needs one, never
   * keep the process alive while idle, and end with `close()`.
   * @default undefined (off: messages are built on the sending thread)
   * @example new EmlApiTransport({ apiKey, baseUrl, buildThreads: 2 });
   */
  buildThreads?: number | 'auto' | false;
  /**
   * Prometheus metrics of the sends (`eml_api_sends_total`... with `component="transport"`): `true` for prom-client's
   * default registry, or `{ registry }`. Needs the optional peer `prom-client`; see docs/operations.md.
   * @default false
   * @example new EmlApiTransport({ apiKey, baseUrl, metrics: { registry } });
   */
  metrics?: boolean | { registry: MetricsRegistry };
}

export const TRANSPORT_SCHEMA = {
  ...passedOn(CLIENT_SCHEMA),
  buildThreads: custom("0 to 256, 'auto', false", resolveBuildThreads),
  metrics: custom('true, false, { registry }', (v) => v as EmlApiTransportOptions['metrics']),
} as const satisfies OptionSchema<EmlApiTransportOptions>;

/**
 * Splits the transport's own options from the client's.
 * @throws {EmlApiError} `ECONFIG` naming the option (an unknown one with the nearest valid name)
 */
export function splitTransportOptions(options: EmlApiTransportOptions): {
  clientOptions: EmlApiClientOptions;
  buildThreads: number;
  /** Checked where the metrics are made. */
  metrics?: boolean | { registry: MetricsRegistry };
} {
  if (typeof options !== 'object' || options === null) return { clientOptions: options, buildThreads: 0 };
  const { buildThreads } = checkOptions(options as unknown as Record<string, unknown>, TRANSPORT_SCHEMA);
  const { buildThreads: _b, metrics, ...clientOptions } = options;
  return {
    clientOptions,
    buildThreads,
    ...(metrics === undefined ? {} : { metrics }),
  };
}

/**
 * What `transporter.sendMail()` resolves with: the fields of Nodemailer's SMTP transport and the service's answer.
 * @example
 * const info: EmlApiSentMessageInfo = await transporter.sendMail(message);
 * console.log(info.messageId, info.response); // '<...@example.test>' '202 Accepted'
 */
export interface EmlApiSentMessageInfo {
  /** Sender and recipients of the message. */
  envelope: MailEnvelope;
  /** The uploaded message's Message-ID, with angle brackets; a tracked send's from the service; empty for group sends. */
  messageId: string;
  /** Every envelope recipient (the service takes or refuses a message whole); empty for group sends. */
  accepted: string[];
  /** Always empty: a refused message rejects the promise instead. */
  rejected: string[];
  /** Always empty. */
  pending: string[];
  /** HTTP status line of the service's answer, e.g. `202 Accepted`. */
  response: string;
  /** The service's id for the send, when it gave one. */
  id: string | undefined;
  /** The service's JSON answer, read leniently; for group sends `{ id, recipients, failed }`. */
  apiResponse: Partial<SendAcceptedResponse> | Partial<GroupSendAcceptedResponse> | undefined;
  /** The group a group send went to. */
  group?: string;
  /** The `Idempotency-Key` the send carried. */
  idempotencyKey: string;
  /** Set (and logged) when the 2xx was not the service's JSON, e.g. a page behind a wrong `baseUrl`: the message may not have gone. */
  warning?: string;
}

/** The info of an accepted send: every envelope recipient accepted, since the service takes or refuses a message whole. */
export function sentMessageInfo(
  envelope: MailEnvelope,
  messageId: string,
  result: SendResult | GroupSendResult,
): EmlApiSentMessageInfo {
  const info: EmlApiSentMessageInfo = {
    envelope,
    messageId,
    accepted: [...envelope.to],
    rejected: [],
    pending: [],
    response: result.response,
    id: result.id,
    apiResponse: result.data,
    idempotencyKey: result.idempotencyKey,
  };
  if (result.warning !== undefined) info.warning = result.warning;
  return info;
}
