import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import { hasLoneSurrogate, toApiAddress, toApiAddressList, type AddressInput } from './address-input.js';
import {
  API_KEY_HEADER,
  API_PATHS,
  IDEMPOTENCY_KEY_HEADER,
  type AddToGroupRequest,
  type AddToGroupResponse,
  type GroupEmailRequest,
  type GroupMemberEntry,
  type GroupSendAcceptedResponse,
  type OnFailure,
  type SendAcceptedResponse,
  type StandardEmailRequest,
} from '../protocol/api-types.js';
import { toApiSubstitutions, toApiTextContent, type TextContentInput } from './content-input.js';
import { resolveClientOptions, type EmlApiClientOptions, type ResolvedClientOptions } from './client-options.js';
import { ConcurrencyLimiter } from '../http/concurrency-limiter.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import { ClientClosedReason, TotalTimeoutReason } from '../http/abort-reasons.js';
import { exchange, ExchangeFailure, type RawAnswer } from '../http/exchange.js';
import { errorFromFailure, errorFromResponse } from '../http/request-error.js';
import { backoffDelay, classifyStatus, parseRetryAfter, sleep, type RetryClass } from '../http/retry-policy.js';
import { SendPacer } from '../http/send-pacer.js';
import { spoolMessage } from '../body/message-spool.js';
import { bytesBody, emlBodyFromBuffer, emlBodyLength, STREAM_ABOVE, type UploadBody } from '../body/upload-body.js';

import { readApiError, readServiceResponse, type ServiceResponse } from '../http/service-answer.js';
import { VERSION } from '../shared/version.js';

/**
 * Per-call options of the client's methods.
 *
 * @example
 * await client.sendEml(eml, { signal: AbortSignal.timeout(10_000) });
 */
export interface RequestOptions {
  /** Aborts the request; the call rejects with `EABORT`. */
  signal?: AbortSignal;
}

/** Per-call options of sends. */
export interface SendOptions extends RequestOptions {
  /**
   * `Idempotency-Key` of this logical send: 1 to 255 printable ASCII characters
   * without spaces (anything else rejects with `EMESSAGE` before any request).
   * @default a new random UUID per call
   */
  idempotencyKey?: string;
}

/**
 * Result of an accepted send. `data` is the service's JSON answer when it
 * sent one (the fields are read leniently: a real service may omit them).
 *
 * @example
 * const { id, messageId, response } = await client.sendEml(eml); // response: '202 Accepted'
 */
export interface SendResult extends ServiceResponse<Partial<SendAcceptedResponse>> {
  /** The service's id for the send, when it gave one. */
  id: string | undefined;
  /** The Message-ID the service reported, when it gave one. */
  messageId: string | undefined;
  /** The `Idempotency-Key` the send carried. */
  idempotencyKey: string;
}

/**
 * A standard JSON email for {@link EmlApiClient.sendEmail}.
 *
 * @example
 * const email: EmailInput = { from: 'Shop <shop@example.com>', to: 'ann@example.net', subject: 'Hi', textContent: { html: '<p>Hi</p>', tracking: true } };
 */
export interface EmailInput {
  /** One recipient or several, in any Nodemailer address form. */
  to: AddressInput | AddressInput[];
  from: AddressInput;
  subject: string;
  textContent: TextContentInput;
}

/**
 * A group email for {@link EmlApiClient.sendToGroup}: the recipients are the group's members.
 *
 * @example
 * const newsletter: GroupEmailInput = { from: 'news@example.com', subject: 'Hello {{first_name}}', textContent: { html: '<p>…</p><a href="{{unsubscribe}}">Unsubscribe</a>' } };
 */
export interface GroupEmailInput {
  from: AddressInput;
  subject: string;
  textContent: TextContentInput;
}

/** Result of an accepted group send. */
export interface GroupSendResult extends ServiceResponse<Partial<GroupSendAcceptedResponse>> {
  id: string | undefined;
  /** Members the email went to, when the service said. */
  recipients: number | undefined;
  /** Members whose delivery failed (and who were removed from the group), when the service said. */
  failed: number | undefined;
  idempotencyKey: string;
}

/**
 * One member to add: an address in any Nodemailer form, or an object with
 * `email`, `name` and `substitutions` (keys with or without braces).
 *
 * @example
 * const member: MemberInput = { email: 'ann@example.net', name: 'Ann', substitutions: { first_name: 'Ann' } };
 */
export type MemberInput =
  | string
  | { email: string; name?: string; substitutions?: Record<string, string | number | boolean> }
  | { address: string; name?: string; substitutions?: Record<string, string | number | boolean> };

/** Options of {@link EmlApiClient.addToGroup}. */
export interface AddToGroupOptions extends RequestOptions {
  /**
   * `SKIP` adds the valid entries and reports the others; `ABORT` adds nothing
   * from a request when any entry fails (across batches, see the README).
   * @default 'ABORT'
   */
  onFailure?: OnFailure;
  /**
   * Entries per request; larger lists are sent in several requests.
   * @default 500
   */
  batchSize?: number;
}

/** Result of {@link EmlApiClient.addToGroup}, covering every batch. */
export interface AddToGroupResult {
  /** Addresses added (or updated, when already members). */
  added: string[];
  /** Entries the service skipped, with its reasons. */
  skipped: { email: string; reason: string }[];
  /** Requests made. */
  batches: number;
}

/** Default entries per add request. */
export const DEFAULT_ADD_BATCH_SIZE = 500;

interface ExchangeInit {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: string | UploadBody;
  signal?: AbortSignal | undefined;
  headers?: Record<string, string>;
  /** A send: paced by `maxMessagesPerSecond`. */
  paced?: boolean;
  /** Repeating it cannot do harm (a check, an add), so ambiguous failures are retried too. */
  replaySafe?: boolean;
}

/**
 * Typed client of the email service's HTTP API. The transport uses one; apps
 * can use it directly for the operations `sendMail` does not cover.
 *
 * Requests go through undici with keep-alive connections reused across calls;
 * at most `maxConnections` requests are in flight, the rest queue.
 *
 * @example
 * import { EmlApiClient } from 'nodemailer-eml-api';
 *
 * const client = new EmlApiClient({ apiKey: process.env.EML_API_KEY!, baseUrl: 'https://api.mail.example.com' });
 * const result = await client.sendEml(fs.readFileSync('welcome.eml'));
 * console.log(result.id, result.messageId);
 * await client.close();
 */
export class EmlApiClient {
  /** Validated options (the API key is not among them). */
  readonly options: Readonly<ResolvedClientOptions>;
  readonly #apiKey: string;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #limiter: ConcurrencyLimiter;
  readonly #releaseListeners = new Set<() => void>();
  readonly #pacer: SendPacer | undefined;
  /** Calls in progress (settled when they end), so close() can wait for them. */
  readonly #inflight = new Set<Promise<void>>();
  /** The controllers of calls in progress, aborted by close({ abort: true }). */
  readonly #callControllers = new Set<AbortController>();
  #abortedByClose = false;
  /** One listener per caller's signal, shared by every call using it (a signal reused for many sends). */
  readonly #signalFanout = new Map<AbortSignal, { calls: Set<AbortController>; listener: () => void }>();
  #closed = false;
  #closing: Promise<void> | undefined;

  /**
   * @throws {EmlApiError} `ECONFIG` when an option is invalid; the message names it.
   */
  constructor(options: EmlApiClientOptions) {
    const { apiKey, resolved } = resolveClientOptions(options);
    this.#apiKey = apiKey;
    this.options = Object.freeze(resolved);
    this.#ownsDispatcher = resolved.dispatcher === undefined;
    this.#dispatcher =
      resolved.dispatcher ??
      new Agent({
        connections: resolved.maxConnections,
        keepAliveTimeout: 30_000,
        keepAliveMaxTimeout: 600_000,
        connect: { timeout: resolved.timeouts.connect },
      });
    this.#pacer =
      resolved.maxMessagesPerSecond === undefined ? undefined : new SendPacer(resolved.maxMessagesPerSecond);
    this.#limiter = new ConcurrencyLimiter(resolved.maxConnections, () => {
      for (const listener of this.#releaseListeners) listener();
    });
  }

  /** Requests in flight now. */
  get activeRequests(): number {
    return this.#limiter.active;
  }

  /** Requests waiting for a free connection slot. */
  get queuedRequests(): number {
    return this.#limiter.pending;
  }

  /** Whether a new request would start at once (fewer than `maxConnections` in flight or queued). */
  get hasFreeSlot(): boolean {
    return this.#limiter.hasFreeSlot;
  }

  /**
   * Calls `listener` each time a request finishes and frees a slot.
   * @returns a function that removes the listener
   * @internal used by the transport for `isIdle()` and `'idle'`
   */
  onSlotReleased(listener: () => void): () => void {
    this.#releaseListeners.add(listener);
    return () => this.#releaseListeners.delete(listener);
  }

  /**
   * Sends a complete message through `POST /v1/send/eml`. The service takes the
   * recipients from the To, Cc and Bcc headers and removes Bcc before delivery.
   *
   * @param eml the RFC 5322 message: bytes, text, or a stream of bytes
   * @returns the accepted send
   * @throws {EmlApiError} `EAUTH`, `EAPI`, `ECONNECTION`, `ETIMEDOUT` or `EABORT`
   * @example
   * const { id } = await client.sendEml('From: a@example.test\r\nTo: b@example.test\r\nSubject: Hi\r\n\r\nHello\r\n');
   */
  async sendEml(eml: Buffer | Uint8Array | string | Readable, options: SendOptions = {}): Promise<SendResult> {
    const leave = this.#enter('sendEml');
    try {
      // Checked before the message is read: a stream is consumed only by a send that can go out.
      if (options.idempotencyKey !== undefined) checkIdempotencyKey(options.idempotencyKey);
      const body = await this.#emlBody(eml, options.signal);
      try {
        return await this.#sendBody(body, options);
      } finally {
        await body.dispose();
      }
    } finally {
      leave();
    }
  }

  /**
   * Sends a standard JSON email through `POST /v1/send/email` (hosted images
   * need the plus plan).
   *
   * @throws {EmlApiError} `EMESSAGE` for bad input (before any request), `EAUTH`, `EAPI`, `ECONNECTION`...
   * @example
   * await client.sendEmail({ to: 'ann@example.net', from: 'shop@example.com', subject: 'Hi', textContent: { html: '<p>Hi</p>', tracking: true } });
   */
  async sendEmail(email: EmailInput, options: SendOptions = {}): Promise<SendResult> {
    const leave = this.#enter('sendEmail');
    try {
      if (typeof email !== 'object' || email === null)
        throw inputError('sendEmail: expected { to, from, subject, textContent }');
      const body: StandardEmailRequest = {
        to: toApiAddressList(email.to, 'sendEmail: to'),
        from: toApiAddress(email.from, 'sendEmail: from'),
        subject: checkSubject(email.subject, 'sendEmail'),
        textContent: toApiTextContent(email.textContent, 'sendEmail'),
      };
      if (body.to.length === 0) throw inputError('sendEmail: to needs at least one recipient');
      return await this.#send(API_PATHS.sendEmail, JSON.stringify(body), options);
    } finally {
      leave();
    }
  }

  /**
   * Sends an email to every member of a group through
   * `POST /v1/send/group/{groupId}`; the service personalises each copy with the
   * member's substitutions and replaces `{{unsubscribe}}` with the member's link.
   *
   * @throws {EmlApiError} `EMESSAGE` for bad input, `EAPI` 404 `group_not_found`, `EAUTH`...
   * @example
   * const { recipients } = await client.sendToGroup('newsletter', { from: 'news@example.com', subject: 'Hi {{first_name}}', textContent: { html, text } });
   */
  async sendToGroup(groupId: string, email: GroupEmailInput, options: SendOptions = {}): Promise<GroupSendResult> {
    const leave = this.#enter('sendToGroup');
    try {
      checkGroupId(groupId, 'sendToGroup');
      if (typeof email !== 'object' || email === null)
        throw inputError('sendToGroup: expected { from, subject, textContent }');
      if ('to' in email)
        throw inputError('sendToGroup: a group email has no "to"; the recipients are the group members');
      const body: GroupEmailRequest = {
        from: toApiAddress(email.from, 'sendToGroup: from'),
        subject: checkSubject(email.subject, 'sendToGroup'),
        textContent: toApiTextContent(email.textContent, 'sendToGroup'),
      };
      const { idempotencyKey, res } = await this.#postIdempotent<Partial<GroupSendAcceptedResponse>>(
        API_PATHS.sendGroup(groupId),
        JSON.stringify(body),
        options,
      );
      const data = objectOrUndefined(res.data);
      return {
        ...res,
        id: stringOrUndefined(data?.id),
        recipients: numberOrUndefined(data?.recipients),
        failed: numberOrUndefined(data?.failed),
        idempotencyKey,
      };
    } finally {
      leave();
    }
  }

  /**
   * Adds members to a group through `POST /v1/group/{groupId}`, in batches of
   * `batchSize`. Adding an existing member updates its name and substitutions.
   * Every entry is checked before the first request, so a bad address never
   * leaves a list half imported.
   *
   * @returns what was added and skipped, over all batches
   * @throws {EmlApiError} `EMESSAGE` for bad input; a failed batch rejects with the
   *   entries of earlier batches in `partial` (they were added)
   * @example
   * const { added, skipped } = await client.addToGroup('newsletter', [
   *   { email: 'ann@example.net', name: 'Ann', substitutions: { first_name: 'Ann' } },
   *   'Bob <bob@example.net>',
   * ], { onFailure: 'SKIP' });
   */
  async addToGroup(
    groupId: string,
    members: MemberInput[],
    options: AddToGroupOptions = {},
  ): Promise<AddToGroupResult> {
    const leave = this.#enter('addToGroup');
    try {
      checkGroupId(groupId, 'addToGroup');
      if (!Array.isArray(members)) throw inputError('addToGroup: members must be an array');
      const onFailure = options.onFailure ?? 'ABORT';
      if (onFailure !== 'SKIP' && onFailure !== 'ABORT')
        throw inputError('addToGroup: onFailure must be "SKIP" or "ABORT"');
      const batchSize = options.batchSize ?? DEFAULT_ADD_BATCH_SIZE;
      if (!Number.isInteger(batchSize) || batchSize < 1)
        throw inputError('addToGroup: batchSize must be a whole number of at least 1');
      const result: AddToGroupResult = { added: [], skipped: [], batches: 0 };
      const entries: GroupMemberEntry[] = [];
      members.forEach((member, i) => {
        const where = `addToGroup: members[${i}]`;
        try {
          entries.push(toMemberEntry(member, where));
        } catch (err) {
          // With SKIP a bad entry is reported, like the service would, instead of failing the import.
          if (onFailure === 'ABORT') throw err;
          result.skipped.push({ email: memberEmail(member), reason: (err as Error).message.replace(`${where}: `, '') });
        }
      });
      for (let start = 0; start < entries.length; start += batchSize) {
        const batch = entries.slice(start, start + batchSize);
        const body: AddToGroupRequest = { entries: batch, groupId, onFailure };
        let res: ServiceResponse<Partial<AddToGroupResponse>>;
        try {
          res = await this.#exchange<Partial<AddToGroupResponse>>({
            method: 'POST',
            path: API_PATHS.group(groupId),
            body: JSON.stringify(body),
            signal: options.signal,
            // Adding the same entries again only sets what the first attempt set.
            replaySafe: true,
          });
        } catch (err) {
          if (err instanceof EmlApiError && result.batches > 0) {
            throw new EmlApiError(
              err.code,
              `${err.message} (batch ${result.batches + 1} of ${Math.ceil(entries.length / batchSize)}; the ${result.added.length} entries of earlier batches were added)`,
              { ...errorDetails(err), partial: { ...result } },
            );
          }
          throw err;
        }
        result.batches++;
        const data = objectOrUndefined(res.data);
        // Lenient: a service that answers 2xx without listing what it added added the whole batch.
        const added = Array.isArray(data?.added)
          ? data.added.filter((a): a is string => typeof a === 'string')
          : batch.map((e) => e.email);
        const skipped = Array.isArray(data?.skipped)
          ? data.skipped
              .filter((s): s is { email: string; reason: string } => typeof s === 'object' && s !== null)
              .map((s) => ({ email: String(s.email ?? ''), reason: String(s.reason ?? '') }))
          : [];
        result.added.push(...added);
        result.skipped.push(...skipped);
      }
      return result;
    } finally {
      leave();
    }
  }

  /**
   * Removes one address from a group through `DELETE /v1/group/{groupId}`.
   *
   * @returns `true` when it was removed, `false` when it was not a member
   * @throws {EmlApiError} `EAPI` 404 `group_not_found` for an unknown group, `EAUTH`...
   * @example
   * await client.removeFromGroup('newsletter', 'ann@example.net'); // true
   */
  async removeFromGroup(groupId: string, email: AddressInput, options: RequestOptions = {}): Promise<boolean> {
    const leave = this.#enter('removeFromGroup');
    try {
      checkGroupId(groupId, 'removeFromGroup');
      const address = toApiAddress(email, 'removeFromGroup: email').email;
      const res = await this.#exchange(
        {
          method: 'DELETE',
          path: API_PATHS.group(groupId),
          body: JSON.stringify({ email: address }),
          signal: options.signal,
        },
        { acceptStatus: (status) => status === 404 },
      );
      if (res.statusCode !== 404) return true;
      const { code } = readApiError(res.data);
      if (code === undefined || code === 'not_a_member') return false;
      throw errorFromResponse(`DELETE ${API_PATHS.group(groupId)}`, res, this.#apiKey);
    } finally {
      leave();
    }
  }

  /**
   * Checks membership through `GET /v1/group/{groupId}/check/{email}`. Reads a
   * JSON boolean (`member`, `isMember`...) and treats a 404 without a
   * group error as "not a member", so it works with either style of service.
   *
   * @throws {EmlApiError} `EAPI` 404 `group_not_found` for an unknown group, `EAUTH`...
   * @example
   * if (await client.isInGroup('newsletter', 'ann@example.net')) { ... }
   */
  async isInGroup(groupId: string, email: AddressInput, options: RequestOptions = {}): Promise<boolean> {
    const leave = this.#enter('isInGroup');
    try {
      checkGroupId(groupId, 'isInGroup');
      const address = toApiAddress(email, 'isInGroup: email').email;
      const path = API_PATHS.groupCheck(groupId, address);
      const res = await this.#exchange(
        { method: 'GET', path, signal: options.signal, replaySafe: true },
        { acceptStatus: (status) => status === 404 },
      );
      if (res.statusCode === 404) {
        const { code } = readApiError(res.data);
        if (code === undefined || code === 'not_a_member' || code === 'not_found_member') return false;
        throw errorFromResponse(`GET ${path}`, res, this.#apiKey);
      }
      return readMembership(res.data);
    } finally {
      leave();
    }
  }

  /**
   * Proves the service is reachable and accepts the key for sending, without
   * sending mail: it posts an empty body to `/v1/send/eml`, so a validation
   * error (400) means the key and its `sender` scope were accepted.
   *
   * @returns `true`
   * @throws {EmlApiError} `EAUTH` when the key or its scope is refused; `ECONNECTION`/`ETIMEDOUT` when unreachable
   * @example
   * await client.verify();
   */
  async verify(options: RequestOptions = {}): Promise<true> {
    const leave = this.#enter('verify');
    try {
      // A 400 or 422 to an empty body means the request got past authentication
      // and the scope check: the key may send.
      await this.#exchange(
        { method: 'POST', path: API_PATHS.sendEml, body: '{}', signal: options.signal },
        { acceptStatus: (status) => status === 400 || status === 422 },
      );
      return true;
    } finally {
      leave();
    }
  }

  /**
   * Stops accepting calls, lets the calls already made finish (queued ones
   * included), then closes the connections the client opened. With
   * `{ abort: true }` the calls still running are aborted instead (`EABORT`).
   * A dispatcher passed in the options is left open: its owner closes it.
   *
   * @example
   * await client.close();                // graceful
   * await client.close({ abort: true }); // now
   */
  close(options: { abort?: boolean } = {}): Promise<void> {
    this.#closed = true;
    if (options.abort) {
      this.#abortedByClose = true;
      for (const controller of this.#callControllers) controller.abort(new ClientClosedReason());
    }
    this.#closing ??= (async () => {
      while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
      if (this.#ownsDispatcher) await this.#dispatcher.close();
    })();
    return this.#closing;
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Sends a prepared `{"mail": ...}` body through `POST /v1/send/eml`. The
   * transport uses it for messages it has built and spooled; the caller
   * disposes the body.
   * @internal
   */
  async sendEmlBody(body: UploadBody, options: SendOptions = {}): Promise<SendResult> {
    const leave = this.#enter('sendEml');
    try {
      return await this.#sendBody(body, options);
    } finally {
      leave();
    }
  }

  async #sendBody(body: UploadBody, options: SendOptions): Promise<SendResult> {
    if (body.length <= emlBodyLength(0)) {
      throw new EmlApiError('EMESSAGE', 'sendEml() got an empty message', {
        command: `POST ${API_PATHS.sendEml}`,
        permanent: true,
      });
    }
    return this.#send(API_PATHS.sendEml, body, options);
  }

  /** The upload body of an EML given as bytes, text or a stream (streams are spooled when large). */
  async #emlBody(eml: Buffer | Uint8Array | string | Readable, signal: AbortSignal | undefined): Promise<UploadBody> {
    if (typeof eml === 'string') return emlBodyFromBuffer(Buffer.from(eml, 'utf8'), STREAM_ABOVE);
    if (eml instanceof Uint8Array)
      return emlBodyFromBuffer(Buffer.from(eml.buffer, eml.byteOffset, eml.byteLength), STREAM_ABOVE);
    if (typeof eml === 'object' && eml !== null && typeof (eml as Readable).pipe === 'function') {
      return (await spoolMessage(eml as Readable, this.options.spool, signal)).body;
    }
    throw new EmlApiError('EMESSAGE', 'sendEml() expects a Buffer, Uint8Array, string or Readable stream', {
      permanent: true,
    });
  }

  /** Posts a send with its `Idempotency-Key` and reads the accepted answer leniently. */
  async #send(path: string, body: string | UploadBody, options: SendOptions): Promise<SendResult> {
    const { idempotencyKey, res } = await this.#postIdempotent<Partial<SendAcceptedResponse>>(path, body, options);
    const data = objectOrUndefined(res.data);
    return { ...res, id: stringOrUndefined(data?.id), messageId: stringOrUndefined(data?.messageId), idempotencyKey };
  }

  /** Posts one logical send; the key is the caller's or a new UUID. */
  async #postIdempotent<T>(
    path: string,
    body: string | UploadBody,
    options: SendOptions,
  ): Promise<{ idempotencyKey: string; res: ServiceResponse<T> }> {
    const idempotencyKey =
      options.idempotencyKey === undefined ? randomUUID() : checkIdempotencyKey(options.idempotencyKey);
    const res = await this.#exchange<T>({
      method: 'POST',
      path,
      body,
      signal: options.signal,
      headers: { [IDEMPOTENCY_KEY_HEADER]: idempotencyKey },
      paced: true,
    });
    return { idempotencyKey, res };
  }

  async #exchange<T>(
    init: ExchangeInit,
    { acceptStatus }: { acceptStatus?: (status: number) => boolean } = {},
  ): Promise<ServiceResponse<T>> {
    return this.#call<T>(init, `${init.method} ${init.path}`, acceptStatus);
  }

  /** Aborts `controller` when `signal` aborts, through one listener per signal. */
  #follow(signal: AbortSignal, controller: AbortController): void {
    let fanout = this.#signalFanout.get(signal);
    if (!fanout) {
      const calls = new Set<AbortController>();
      const listener = () => {
        for (const call of calls) call.abort(signal.reason);
      };
      fanout = { calls, listener };
      this.#signalFanout.set(signal, fanout);
      signal.addEventListener('abort', listener, { once: true });
    }
    fanout.calls.add(controller);
  }

  #unfollow(signal: AbortSignal, controller: AbortController): void {
    const fanout = this.#signalFanout.get(signal);
    if (!fanout) return;
    fanout.calls.delete(controller);
    if (fanout.calls.size === 0) {
      signal.removeEventListener('abort', fanout.listener);
      this.#signalFanout.delete(signal);
    }
  }

  /**
   * Registers a call the moment it is made (before any await), so that
   * close() waits for every call made before it, and refuses later ones.
   * @returns the function that marks the call finished
   */
  #enter(method: string): () => void {
    if (this.#closed) {
      throw new EmlApiError('ECONNECTION', `${method}() refused: the client is closed`, { permanent: true });
    }
    let release!: () => void;
    const done = new Promise<void>((resolve) => (release = resolve));
    this.#inflight.add(done);
    return () => {
      this.#inflight.delete(done);
      release();
    };
  }

  /** One logical call: pacing, attempts within the connection limit, backoff between them. */
  async #call<T>(
    init: ExchangeInit,
    command: string,
    acceptStatus: ((status: number) => boolean) | undefined,
  ): Promise<ServiceResponse<T>> {
    const { retries, timeouts, baseUrl, basePath } = this.options;
    const origin = baseUrl.origin;
    // One controller per call, fed by the caller's signal, the total timeout and close({ abort }).
    // (Listeners on one shared close signal would pile up past Node's warning limit.)
    // (AbortSignal.any costs noticeably more per call on Node 20.)
    const controller = new AbortController();
    const signal = controller.signal;
    this.#callControllers.add(controller);
    if (this.#abortedByClose) controller.abort(new ClientClosedReason());
    const userSignal = init.signal;
    if (userSignal?.aborted) controller.abort(userSignal.reason);
    else if (userSignal) this.#follow(userSignal, controller);
    const timer = setTimeout(() => controller.abort(new TotalTimeoutReason(timeouts.total)), timeouts.total);
    const headers: Record<string, string> = {
      [API_KEY_HEADER]: this.#apiKey,
      accept: 'application/json',
      'user-agent': this.options.userAgent ?? `nodemailer-eml-api/${VERSION}`,
      ...init.headers,
    };
    if (init.body !== undefined) headers['content-type'] = 'application/json';
    const body = typeof init.body === 'string' ? bytesBody(Buffer.from(init.body)) : init.body;
    let attempts = 0;
    const context = () => ({
      command,
      origin,
      apiKey: this.#apiKey,
      signal,
      attempts,
      responseTimeout: timeouts.response,
    });
    try {
      if (init.paced && this.#pacer) await this.#pacer.wait(signal);
      for (;;) {
        attempts++;
        let answer: RawAnswer | undefined;
        let failure: unknown;
        try {
          answer = await this.#limiter.run(
            () =>
              exchange(this.#dispatcher, {
                origin,
                path: basePath + init.path,
                method: init.method,
                headers,
                body,
                signal,
                headersTimeout: timeouts.response,
                tracksWrites: this.#ownsDispatcher,
              }),
            signal,
          );
        } catch (err) {
          failure = err;
        }
        let retryClass: RetryClass;
        let wait: number | undefined;
        let res: ServiceResponse<T> | undefined;
        if (answer) {
          res = readServiceResponse<T>(answer.statusCode, answer.headers['content-type'], answer.text);
          if ((res.statusCode >= 200 && res.statusCode < 300) || acceptStatus?.(res.statusCode)) return res;
          retryClass = classifyStatus(res.statusCode);
          wait = parseRetryAfter(answer.headers['retry-after']);
        } else {
          if (signal.aborted || !(failure instanceof ExchangeFailure)) throw failure;
          retryClass = failure.phase === 'sent' ? 'ambiguous' : 'safe';
        }
        const allowed =
          retryClass === 'safe' || (retryClass === 'ambiguous' && (retries.retryAmbiguous || init.replaySafe === true));
        const delay = wait ?? backoffDelay(attempts - 1, retries);
        if (!allowed || attempts > retries.limit || delay > retries.maxDelay) {
          if (res) {
            const note =
              wait !== undefined && delay > retries.maxDelay
                ? `the service asks to retry after ${Math.ceil(delay / 1000)} s, longer than retries.maxDelay`
                : undefined;
            throw errorFromResponse(command, res, this.#apiKey, { attempts, ...(note ? { note } : {}) });
          }
          throw failure;
        }
        await sleep(delay, signal);
      }
    } catch (err) {
      throw errorFromFailure(err, context());
    } finally {
      clearTimeout(timer);
      if (userSignal) this.#unfollow(userSignal, controller);
      this.#callControllers.delete(controller);
    }
  }
}

function inputError(message: string): EmlApiError {
  return new EmlApiError('EMESSAGE', message, { permanent: true });
}

function checkGroupId(groupId: unknown, method: string): asserts groupId is string {
  if (typeof groupId !== 'string' || groupId.length === 0)
    throw inputError(`${method}: groupId must be a non-empty string`);
  if (groupId.length > 256) throw inputError(`${method}: groupId is longer than 256 characters`);
  if (hasLoneSurrogate(groupId)) throw inputError(`${method}: groupId is not valid Unicode (a lone surrogate)`);
}

/** A header value: 1 to 255 printable ASCII characters, so it can neither inject a header nor be refused by the service. */
function checkIdempotencyKey(key: unknown): string {
  if (typeof key !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(key))
    throw inputError('idempotencyKey must be 1 to 255 printable ASCII characters without spaces');
  return key;
}

function checkSubject(subject: unknown, method: string): string {
  if (typeof subject !== 'string' || subject.length === 0)
    throw inputError(`${method}: subject must be a non-empty string`);
  if (/[\r\n]/.test(subject)) throw inputError(`${method}: subject must not contain line breaks`);
  return subject;
}

function toMemberEntry(member: unknown, where: string): GroupMemberEntry {
  const address = toApiAddress(member, where);
  const substitutions =
    typeof member === 'object' && member !== null
      ? toApiSubstitutions((member as { substitutions?: unknown }).substitutions, where)
      : undefined;
  return { ...address, ...(substitutions ? { substitutions } : {}) };
}

function memberEmail(member: unknown): string {
  if (typeof member === 'string') return member;
  if (typeof member === 'object' && member !== null) {
    const o = member as Record<string, unknown>;
    return String(o.email ?? o.address ?? '');
  }
  return String(member);
}

const MEMBERSHIP_FIELDS = ['member', 'isMember', 'is_member', 'inGroup', 'in_group', 'exists', 'found', 'result'];

/** Reads membership from a 2xx answer of any common shape; a 2xx without a boolean means "member". */
function readMembership(data: unknown): boolean {
  if (typeof data === 'boolean') return data;
  if (typeof data === 'object' && data !== null) {
    for (const field of MEMBERSHIP_FIELDS) {
      const value = (data as Record<string, unknown>)[field];
      if (typeof value === 'boolean') return value;
    }
  }
  return true;
}

function objectOrUndefined<T>(value: T | undefined): T | undefined {
  return typeof value === 'object' && value !== null ? value : undefined;
}

function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function numberOrUndefined(value: unknown): number | undefined {
  return typeof value === 'number' ? value : undefined;
}

function errorDetails(err: EmlApiError) {
  return {
    ...(err.responseCode === undefined ? {} : { responseCode: err.responseCode }),
    ...(err.response === undefined ? {} : { response: err.response }),
    ...(err.command === undefined ? {} : { command: err.command }),
    ...(err.apiCode === undefined ? {} : { apiCode: err.apiCode }),
    permanent: err.permanent,
    cause: err,
  };
}
