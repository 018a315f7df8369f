import { EventEmitter } from 'node:events';
import { EmlApiClient } from '../client/eml-api-client.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { resolveLogger, type EmlApiLogger } from '../shared/logger.js';
import { jsonRouteOf, jsonSendFromMail, type JsonRoute } from './json-send-from-mail.js';
import { resolveEnvelope } from './message-envelope.js';
import { spoolMessage } from '../body/message-spool.js';
import { sliceLargeContents } from './slice-large-contents.js';
import type { SendResult } from '../client/eml-api-client.js';
import type { NodemailerMail } from './nodemailer-types.js';
import type { EmlApiSentMessageInfo } from './sent-message-info.js';
import type { EmlApiTransportOptions } from './transport-options.js';
import { VERSION } from '../shared/version.js';

/** Nodemailer's callback of `transport.send`. */
export type SendCallback = (err: Error | null, info?: EmlApiSentMessageInfo) => void;

/**
 * Nodemailer transport that sends every message through the service's
 * `POST /v1/send/eml`: a drop-in replacement for an SMTP relay.
 *
 * It takes the message Nodemailer compiled (plugins and DKIM signing
 * applied), keeps the Bcc header (the service reads recipients from To, Cc and
 * Bcc and removes Bcc before delivery), Base64-encodes it and posts it.
 *
 * `send`, `verify`, `close` and `isIdle` are own enumerable properties bound to
 * the instance, so a copy made with spread or `for...in` still works.
 *
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
export class EmlApiTransport extends EventEmitter {
  /** Transport name, used by Nodemailer in logs. */
  readonly name = 'EmlApiTransport';
  /**
   * Tells Nodemailer that `sendMail({ signal })` is honoured by the transport
   * itself: a send is aborted while queued, building or in flight (`EABORT`).
   */
  readonly supportsAbortSignal = true;
  /** Package version, used by Nodemailer in logs. */
  readonly version = VERSION;
  /** The API client the transport sends through; use it for the other operations. */
  readonly client: EmlApiClient;
  readonly #logger: EmlApiLogger;
  #closed = false;

  /**
   * @throws {EmlApiError} `ECONFIG` naming the option when an option is invalid
   */
  constructor(options: EmlApiTransportOptions) {
    super();
    this.client = new EmlApiClient(options);
    this.#logger = resolveLogger(options.logger);
    this.client.onSlotReleased(() => {
      if (this.isIdle()) this.emit('idle');
    });
  }

  /**
   * Sends one message; called by Nodemailer's `sendMail`. The callback is
   * called exactly once.
   */
  readonly send = (mail: NodemailerMail, callback: SendCallback): void => {
    let called = false;
    const done: SendCallback = (err, info) => {
      if (called) return;
      called = true;
      if (err) callback(err);
      else callback(null, info);
    };
    this.#send(mail).then(
      (info) => done(null, info),
      (err: unknown) => done(err instanceof Error ? err : new Error(String(err))),
    );
  };

  /**
   * Checks that the service is reachable and accepts the API key for sending,
   * without sending mail. Returns a Promise when called without a callback.
   *
   * @throws {EmlApiError} `EAUTH` when the key or its `sender` scope is refused
   * @example
   * await transporter.verify(); // true
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
   * Stops the transport: new sends fail with `ECONNECTION`; sends already
   * made (queued ones included) finish, then the connections are closed. With
   * `{ abort: true }` the sends still running are aborted instead (`EABORT`).
   * Returns a Promise; an optional callback is called once when done.
   *
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
    const promise = this.client.close(options);
    if (typeof callback === 'function') {
      promise.then(
        () => callback(null),
        (err: Error) => callback(err),
      );
    }
    return promise;
  };

  /** Whether the transport can start a send at once (fewer than `maxConnections` in flight). */
  readonly isIdle = (): boolean => !this.#closed && this.client.hasFreeSlot;

  async #send(mail: NodemailerMail): Promise<EmlApiSentMessageInfo> {
    if (this.#closed) {
      throw new EmlApiError('ECONNECTION', 'The transport is closed; create a new one to send more mail', {
        permanent: true,
      });
    }
    const route = jsonRouteOf(mail.data as Record<string, unknown>);
    if (route) return this.#sendJson(mail, route);
    // The service reads recipients from To, Cc and Bcc and strips Bcc itself,
    // so Bcc must stay in the uploaded message (as sendmail and SES transports do).
    mail.message.keepBcc = true;
    const signal = signalOf(mail);
    sliceLargeContents(mail.message as unknown as Parameters<typeof sliceLargeContents>[0]);
    // Built once; large messages go to a spool file while Nodemailer writes them.
    const spooled = await spoolMessage(mail.message.createReadStream(), this.client.options.spool, signal);
    let result: SendResult;
    let resolved: ReturnType<typeof resolveEnvelope>;
    try {
      resolved = resolveEnvelope(mail, spooled.head);
      if (resolved.fromDiffers) {
        this.#logger.info(
          { envelopeFrom: resolved.envelope.from },
          'Envelope sender differs from From; the service sets its own return path, so the envelope sender is not used',
        );
      }
      this.#logger.debug({ recipients: resolved.envelope.to.length, bytes: spooled.size }, 'Sending message');
      result = await this.client.sendEmlBody(spooled.body, { signal });
    } finally {
      await spooled.body.dispose();
    }
    const { envelope } = resolved;
    // The Message-ID written in the uploaded bytes is the truth: with `raw`,
    // Nodemailer's own messageId() is one it made up and never wrote.
    const messageId = resolved.messageId ?? result.messageId ?? mail.message.messageId();
    this.#logger.info({ messageId, id: result.id, response: result.response }, 'Message accepted');
    return {
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
  }

  async #sendJson(mail: NodemailerMail, route: JsonRoute): Promise<EmlApiSentMessageInfo> {
    const input = await jsonSendFromMail(mail, route);
    if (route.kind === 'group') {
      const { from, subject, textContent } = input;
      const result = await this.client.sendToGroup(
        route.groupId,
        { from, subject, textContent },
        { signal: signalOf(mail) },
      );
      this.#logger.info({ group: route.groupId, id: result.id, response: result.response }, 'Group email accepted');
      return {
        envelope: { from: input.from.email, to: [] },
        messageId: '',
        accepted: [],
        rejected: [],
        pending: [],
        response: result.response,
        id: result.id,
        apiResponse: result.data,
        idempotencyKey: result.idempotencyKey,
        group: route.groupId,
      };
    }
    const result = await this.client.sendEmail(input, { signal: signalOf(mail) });
    this.#logger.info({ id: result.id, response: result.response }, 'Tracked email accepted');
    const to = input.to.map((a) => a.email);
    return {
      envelope: { from: input.from.email, to },
      messageId: result.messageId ?? '',
      accepted: to,
      rejected: [],
      pending: [],
      response: result.response,
      id: result.id,
      apiResponse: result.data,
      idempotencyKey: result.idempotencyKey,
    };
  }
}

/** The AbortSignal of `sendMail({ signal })`, if any. */
function signalOf(mail: NodemailerMail): AbortSignal | undefined {
  const signal = (mail.data as { signal?: unknown }).signal;
  return signal instanceof AbortSignal ? signal : undefined;
}
