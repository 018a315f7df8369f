import type { Readable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { spoolMessage, type SpoolSettings } from '../body/message-spool.js';
import { emlBodyFromBuffer, emlBodyLength, STREAM_ABOVE } from '../body/eml-upload-body.js';
import { Requester, type RequestObserver, type Call } from '../http/requester.js';
import {
  errorFromResponse,
  bodyShape,
  errorFromUnreadableAnswer,
  readApiError,
  type ServiceResponse,
} from '../http/request-error.js';
import type { UploadBody } from '../http/exchange.js';
import {
  API_KEY_HEADER,
  API_PATHS,
  IDEMPOTENCY_KEY_HEADER,
  sendPath,
  type SendKind,
  type AddToGroupRequest,
  type AddToGroupResponse,
  type GroupMemberEntry,
  type GroupSendAcceptedResponse,
  type SendAcceptedResponse,
  type GroupEmailRequest,
  type StandardEmailRequest,
} from '../protocol/api-types.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiLogger } from '../shared/options-kit.js';
import { VERSION } from '../shared/version.js';
import {
  toApiAddress,
  type AddressInput,
  checkGroupId,
  checkIdempotencyKey,
  toMemberEntry,
  inputError,
  toApiAddressList,
  toApiTextContent,
  checkSubject,
} from './client-input.js';
import {
  type EmlApiClientOptions,
  type EmlApiClientSettings,
  type ResolvedClientOptions,
  clientSettingsView,
  resolveClientOptions,
} from './client-options.js';
import {
  DEFAULT_ADD_BATCH_SIZE,
  type AddToGroupOptions,
  type AddToGroupResult,
  type EmailInput,
  type GroupEmailInput,
  type GroupSendResult,
  type MemberInput,
  type RequestOptions,
  type SendOptions,
  type SendResult,
} from './client-types.js';

/**
 * Typed client of the email service's HTTP API; the transport sends through one. At most `maxConnections` calls run at
 * once over keep-alive connections, the rest queue.
 * @example
 * import { EmlApiClient } from 'nodemailer-eml-api';
 * const client = new EmlApiClient({ apiKey: process.env.EML_API_KEY!, baseUrl: 'https://api.mail.example.com' });
 * const result = await client.sendEml(fs.readFileSync('welcome.eml'));
 * console.log(result.id, result.messageId);
 * await client.close();
 */
export class EmlApiClient {
  /** The validated options with their defaults, frozen, without the API key, `dispatcher` and `logger`. */
  readonly settings: EmlApiClientSettings;
  readonly #resolved: Readonly<ResolvedClientOptions>;
  readonly #requester: Requester;
  readonly #apiKey: string;

  /** @throws {EmlApiError} `ECONFIG` naming the invalid option. */
  constructor(options: EmlApiClientOptions) {
    const { apiKey, resolved } = resolveClientOptions(options);
    this.#apiKey = apiKey;
    this.#resolved = Object.freeze(resolved);
    this.settings = clientSettingsView(resolved);
    this.#requester = new Requester({
      origin: resolved.baseUrl.origin,
      basePath: resolved.basePath,
      headers: {
        [API_KEY_HEADER]: apiKey,
        accept: 'application/json',
        'user-agent': resolved.userAgent ?? `nodemailer-eml-api/${VERSION}`,
      },
      secret: apiKey,
      maxConnections: resolved.maxConnections,
      dispatcher: resolved.dispatcher,
      retry: resolved.retry,
      timeouts: resolved.timeouts,
      rateLimit: resolved.rateLimit,
      logger: resolved.logger,
    });
  }

  /** @internal Calls holding a connection slot, for the package's tests. */
  get activeRequests(): number {
    return this.#requester.active;
  }

  /** @internal Calls waiting for a connection slot, for the package's tests. */
  get queuedRequests(): number {
    return this.#requester.pending;
  }

  /** @internal Whether a new call would start at once; the transports' `isIdle()` is the public signal. */
  get hasFreeSlot(): boolean {
    return this.#requester.hasFreeSlot;
  }

  /**
   * Sends a complete message through `POST /v1/send/eml`; the service takes the recipients from To, Cc and Bcc.
   * @param eml the RFC 5322 message; a stream is read only by a send that goes out (else the caller destroys it)
   * @throws {EmlApiError} `EAUTH`, `EAPI`, `ECONNECTION`, `ETIMEDOUT` or `EABORT`
   * @example const { id } = await client.sendEml('From: a@example.test\r\nTo: b@example.test\r\nSubject: Hi\r\n\r\nHello\r\n');
   */
  async sendEml(eml: Buffer | Uint8Array | string | Readable, options: SendOptions = {}): Promise<SendResult> {
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey);
    const sent = await this.send({
      kind: 'eml',
      idempotencyKey,
      signal: options.signal,
      build: async ({ signal }) => ({ body: await this.#emlBody(eml, signal) }),
    });
    return sent.result;
  }

  /**
   * Sends a standard JSON email through `POST /v1/send/email` (hosted images need the plus plan).
   * @throws {EmlApiError} `EMESSAGE` for bad input (before any request), `EAUTH`, `EAPI`, `ECONNECTION`...
   * @example await client.sendEmail({ to: 'ann@example.net', from: 'shop@example.com', subject: 'Hi', textContent: { html: '<p>Hi</p>', tracking: true } });
   */
  async sendEmail(email: EmailInput, options: SendOptions = {}): Promise<SendResult> {
    const body = toStandardEmailRequest(email, 'sendEmail');
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey);
    const sent = await this.send({ kind: 'email', body: JSON.stringify(body), idempotencyKey, signal: options.signal });
    return sent.result;
  }

  /**
   * Sends an email to each member of a group through `POST /v1/send/group/{groupId}`, personalised per member.
   * @throws {EmlApiError} `EMESSAGE` for bad input, `EAPI` 404 `group_not_found`, `EAUTH`...
   * @example const { recipients } = await client.sendToGroup('newsletter', { from: 'news@example.com', subject: 'Hi {{first_name}}', textContent: { html, text } });
   */
  async sendToGroup(groupId: string, email: GroupEmailInput, options: SendOptions = {}): Promise<GroupSendResult> {
    checkGroupId(groupId, 'sendToGroup');
    const body = toGroupEmailRequest(email, 'sendToGroup');
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey);
    const sent = await this.send({
      kind: 'group',
      groupId,
      body: JSON.stringify(body),
      idempotencyKey,
      signal: options.signal,
    });
    return sent.result;
  }

  /**
   * @internal The one send path (send methods, transport, outbox worker, relay); it builds the body only once the call
   * holds a slot, so memory is bounded by `maxConnections`, and disposes a body it built when the send settles.
   * @throws {EmlApiError} `EMESSAGE` for an empty EML; the request engine's errors (`EAUTH`, `EAPI`, `ETIMEDOUT`...)
   */
  send<K extends SendKind, B extends SendBody = SendBody>(
    request: SendRequest<B> & { readonly kind: K },
  ): Promise<AcceptedSend<SendAnswer<K>, B | undefined>> {
    if (request.kind === 'group' && !request.groupId) {
      return Promise.reject(new TypeError('send(): a group send needs its groupId'));
    }
    const path = sendPath(request.kind, request.groupId);
    const command = `POST ${path}`;
    return this.#requester.run(command, { signal: request.signal, paced: true }, async (call) => {
      let built: B | undefined;
      let body: SendBody['body'];
      if (request.build) {
        call.stage = 'building';
        built = await request.build({
          signal: call.signal,
          spool: this.#resolved.spool,
          logger: this.#resolved.logger,
        });
        body = built.body;
      } else {
        body = request.body;
      }
      try {
        if (request.kind === 'eml' && typeof body !== 'string' && body.length <= emlBodyLength(0)) {
          throw new EmlApiError('EMESSAGE', 'sendEml() got an empty message', { command, permanent: true });
        }
        const idempotencyKey = request.idempotencyKey ?? randomUUID();
        const res = await call.request<Partial<SendAcceptedResponse & GroupSendAcceptedResponse>>({
          method: 'POST',
          path,
          body,
          headers: { [IDEMPOTENCY_KEY_HEADER]: idempotencyKey },
        });
        const result = readSendAnswer(request.kind, res, idempotencyKey, call) as SendAnswer<K>;
        return { result, built };
      } finally {
        if (built && typeof body !== 'string') await body.dispose();
      }
    });
  }

  /** @internal Tells `observer` of every attempt and retry (metrics, spans); returns its remover. */
  observe(observer: RequestObserver): () => void {
    return this.#requester.observe(observer);
  }

  /** @internal Calls `listener` whenever a call frees its connection slot; returns its remover. */
  onSlotReleased(listener: () => void): () => void {
    return this.#requester.onSlotReleased(listener);
  }

  /** @internal The client's logger, silent when none was given. */
  get logger(): EmlApiLogger {
    return this.#resolved.logger;
  }

  /**
   * Adds or updates group members through `POST /v1/group/{groupId}` in batches, every entry checked first.
   * @throws {EmlApiError} `EMESSAGE` for bad input; a failed batch rejects with earlier batches' entries in `partial`
   * @example
   * const { added, skipped } = await client.addToGroup('newsletter', [
   *   { email: 'ann@example.net', name: 'Ann', substitutions: { first_name: 'Ann' } },
   *   'Bob <bob@example.net>',
   * ], { onFailure: 'SKIP', onBatch: (p) => console.log(`${p.entriesDone} of ${p.entries}`) });
   */
  async addToGroup(
    groupId: string,
    members: MemberInput[],
    options: AddToGroupOptions = {},
  ): Promise<AddToGroupResult> {
    checkGroupId(groupId, 'addToGroup');
    if (!Array.isArray(members)) throw inputError('addToGroup: members must be an array');
    const onFailure = options.onFailure ?? 'ABORT';
    if (onFailure !== 'SKIP' && onFailure !== 'ABORT')
      throw inputError('addToGroup: onFailure must be "SKIP" or "ABORT"');
    const batchSize = options.batchSize ?? DEFAULT_ADD_BATCH_SIZE;
    if (!Number.isInteger(batchSize) || batchSize < 1)
      throw inputError('addToGroup: batchSize must be a whole number of at least 1');
    if (options.onBatch !== undefined && typeof options.onBatch !== 'function')
      throw inputError('addToGroup: onBatch must be a function');
    const result: AddToGroupResult = { added: [], skipped: [], batches: 0 };
    const entries: GroupMemberEntry[] = [];
    members.forEach((member, i) => {
      const where = `addToGroup: members[${i}]`;
      try {
        entries.push(toMemberEntry(member, where));
      } catch (err) {
        // SKIP reports a bad entry as the service would instead of failing the import.
        if (onFailure === 'ABORT') throw err;
        result.skipped.push({ email: memberEmail(member), reason: (err as Error).message.replace(`${where}: `, '') });
      }
    });
    const path = API_PATHS.group(groupId);
    const command = `POST ${path}`;
    const batches = Math.ceil(entries.length / batchSize);
    return this.#requester.track(command, async (run) => {
      for (let start = 0; start < entries.length; start += batchSize) {
        const batch = entries.slice(start, start + batchSize);
        const body: AddToGroupRequest = { entries: batch, groupId, onFailure };
        let res: ServiceResponse<Partial<AddToGroupResponse>>;
        try {
          res = await run(command, { signal: options.signal }, (call) =>
            call.request<Partial<AddToGroupResponse>>({
              method: 'POST',
              path,
              body: JSON.stringify(body),
              replaySafe: true, // re-adding the same entries sets nothing new
            }),
          );
        } catch (err) {
          if (err instanceof EmlApiError && result.batches > 0) {
            throw new EmlApiError(
              err.code,
              `${err.message} (batch ${result.batches + 1} of ${batches}; the ${result.added.length} entries of earlier batches were added)`,
              { ...errorDetails(err), partial: { ...result } },
            );
          }
          throw err;
        }
        result.batches++;
        const data = objectOrUndefined(res.data);
        // A 2xx that does not list what it added added the whole batch.
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
        options.onBatch?.({
          batch: result.batches,
          batches,
          entriesDone: start + batch.length,
          entries: entries.length,
          added,
          skipped,
        });
      }
      return result;
    });
  }

  /**
   * Removes one address from a group through `DELETE /v1/group/{groupId}`.
   * @returns `false` when it was not a member
   * @throws {EmlApiError} `EAPI` 404 `group_not_found` for an unknown group, `EAUTH`...
   * @example await client.removeFromGroup('newsletter', 'ann@example.net'); // true
   */
  async removeFromGroup(groupId: string, email: AddressInput, options: RequestOptions = {}): Promise<boolean> {
    checkGroupId(groupId, 'removeFromGroup');
    const address = toApiAddress(email, 'removeFromGroup: email').email;
    const path = API_PATHS.group(groupId);
    return this.#requester.run(`DELETE ${path}`, { signal: options.signal }, async (call) => {
      const res = await call.request({
        method: 'DELETE',
        path,
        body: JSON.stringify({ email: address }),
        acceptStatus: (status) => status === 404,
      });
      if (res.statusCode !== 404) return true;
      const { code } = readApiError(res.data);
      if (code === undefined || code === 'not_a_member') return false;
      throw errorFromResponse(`DELETE ${path}`, res, this.#apiKey);
    });
  }

  /**
   * Checks membership through `GET /v1/group/{groupId}/check/{email}`; a 404 without a group error means "not a member".
   * @throws {EmlApiError} `EAPI` 404 `group_not_found` for an unknown group, `EAUTH`...
   * @example if (await client.isInGroup('newsletter', 'ann@example.net')) console.log('already a member');
   */
  async isInGroup(groupId: string, email: AddressInput, options: RequestOptions = {}): Promise<boolean> {
    checkGroupId(groupId, 'isInGroup');
    const address = toApiAddress(email, 'isInGroup: email').email;
    const path = API_PATHS.groupCheck(groupId, address);
    return this.#requester.run(`GET ${path}`, { signal: options.signal }, async (call) => {
      const res = await call.request({
        method: 'GET',
        path,
        replaySafe: true,
        acceptStatus: (status) => status === 404,
      });
      if (res.statusCode === 404) {
        const { code } = readApiError(res.data);
        if (code === undefined || code === 'not_a_member' || code === 'not_found_member') return false;
        throw errorFromResponse(`GET ${path}`, res, this.#apiKey);
      }
      const member = readMembership(res);
      if (member === undefined)
        throw errorFromUnreadableAnswer(
          `GET ${path}`,
          res,
          this.#apiKey,
          'a membership answer',
          '{"member": true|false}',
        );
      return member;
    });
  }

  /**
   * Proves the service is reachable and the key may send, without sending: the service refuses an empty `/v1/send/eml`
   * with 400 or 422 past authentication; a 2xx means something else answered (a web server behind a wrong `baseUrl`).
   * @throws {EmlApiError} `EAUTH` for a refused key or scope; `ECONNECTION`/`ETIMEDOUT`; `EAPI` for any other answer
   * @example await client.verify();
   */
  async verify(options: RequestOptions = {}): Promise<true> {
    const command = `POST ${API_PATHS.sendEml}`;
    return this.#requester.run(command, { signal: options.signal }, async (call) => {
      const res = await call.request({
        method: 'POST',
        path: API_PATHS.sendEml,
        body: '{}',
        acceptStatus: (status) => status === 400 || status === 422,
      });
      if (res.statusCode >= 200 && res.statusCode < 300) {
        throw errorFromUnreadableAnswer(
          command,
          res,
          this.#apiKey,
          "the service's refusal of an empty send (it never accepts one)",
          '400 or 422',
        );
      }
      return true as const;
    });
  }

  /**
   * Stops accepting calls, lets those already made finish, then closes the connections the client opened (a
   * `dispatcher` given in the options stays open). `{ abort: true }` aborts running calls (`EABORT`).
   * @example
   * await client.close();                // graceful
   * await client.close({ abort: true }); // now
   */
  close(options: { abort?: boolean } = {}): Promise<void> {
    return this.#requester.close(options);
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#requester.closed;
  }

  async #emlBody(eml: Buffer | Uint8Array | string | Readable, signal: AbortSignal): Promise<UploadBody> {
    if (typeof eml === 'string') return emlBodyFromBuffer(Buffer.from(eml, 'utf8'), STREAM_ABOVE);
    if (eml instanceof Uint8Array)
      return emlBodyFromBuffer(Buffer.from(eml.buffer, eml.byteOffset, eml.byteLength), STREAM_ABOVE);
    if (typeof eml === 'object' && eml !== null && typeof (eml as Readable).pipe === 'function') {
      return (await spoolMessage(eml as Readable, this.#resolved.spool, signal)).body;
    }
    throw new EmlApiError('EMESSAGE', 'sendEml() expects a Buffer, Uint8Array, string or Readable stream', {
      permanent: true,
    });
  }
}

function memberEmail(member: unknown): string {
  if (typeof member === 'string') return member;
  if (typeof member === 'object' && member !== null) {
    const o = member as Record<string, unknown>;
    return String(o.email ?? o.address ?? '');
  }
  return String(member);
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

/** @internal A send: it brings its `body` (the caller disposes it) or a `build` run once its call holds a slot. */
export type SendRequest<B extends SendBody = SendBody> = {
  readonly kind: SendKind;
  readonly groupId?: string | undefined;
  /** The send's `Idempotency-Key` (checked by the caller); a new UUID when undefined. */
  readonly idempotencyKey?: string | undefined;
  /** Aborts the send wherever it is: waiting, building or uploading. */
  readonly signal?: AbortSignal | undefined;
} & (
  | { readonly body: UploadBody | string; readonly build?: never }
  | { readonly build: (context: BuildContext) => Promise<B>; readonly body?: never }
);

/** @internal A body made by a send's `build`, with what the builder wants back with the answer. */
export interface SendBody {
  readonly body: UploadBody | string;
}

/** @internal What a send's `build` gets. */
export interface BuildContext {
  /** Aborted by the caller's signal, `timeouts.total` or `close({ abort: true })`. */
  readonly signal: AbortSignal;
  readonly spool: SpoolSettings;
  readonly logger: EmlApiLogger;
}

/** @internal An accepted send: the answer, and what `build` made (undefined for a given body). */
export interface AcceptedSend<R, B> {
  readonly result: R;
  readonly built: B;
}

export type SendAnswer<K extends SendKind> = K extends 'group' ? GroupSendResult : SendResult;

/** Reads a send's 2xx answer leniently (a real service may omit fields), warning when it is not JSON. */
export function readSendAnswer(
  kind: SendKind,
  res: ServiceResponse<Partial<SendAcceptedResponse & GroupSendAcceptedResponse>>,
  idempotencyKey: string,
  call: Call,
): SendResult | GroupSendResult {
  const data = objectOrUndefined(res.data);
  const { statusCode, response, text } = res;
  // Written out: V8 is slow to build a literal that spreads and then names fields.
  const result: SendResult | GroupSendResult =
    kind === 'group'
      ? {
          statusCode,
          response,
          data: res.data,
          text,
          id: stringOrUndefined(data?.id),
          recipients: numberOrUndefined(data?.recipients),
          failed: numberOrUndefined(data?.failed),
          idempotencyKey,
        }
      : {
          statusCode,
          response,
          data: res.data,
          text,
          id: stringOrUndefined(data?.id),
          messageId: stringOrUndefined(data?.messageId),
          idempotencyKey,
        };
  return withWarning(result, call);
}

/** A 2xx that is not JSON may be a page from a web server behind a wrong baseUrl (an empty body is fine). */
function withWarning<T extends SendResult | GroupSendResult>(result: T, call: Call): T {
  const { data } = result;
  const shape = bodyShape(result);
  if (shape === 'empty' || (typeof data === 'object' && data !== null && !Array.isArray(data))) return result;
  const what = { html: 'an HTML page', text: 'a body that is not JSON', json: 'JSON that is not an object' }[shape];
  const warning = `The service answered ${result.response}, but with ${what}, not the service's JSON: the message may not have been sent; check baseUrl (a web server or single-page app may answer every path)`;
  call.log('warn', { command: call.command, responseCode: result.statusCode }, warning);
  return { ...result, warning };
}

const MEMBERSHIP_FIELDS = ['member', 'isMember', 'is_member', 'inGroup', 'in_group', 'exists', 'found'];

/**
 * The membership a 2xx states: `{ "member": true }` or a common spelling, a bare boolean, either inside `data`, or 204.
 * @returns undefined when it states none: never a guess, since a wrong "yes" mails non-members
 */
export function readMembership(res: ServiceResponse): boolean | undefined {
  if (res.statusCode === 204) return true;
  const { data } = res;
  if (typeof data === 'boolean') return data;
  const envelope = isObject(data) && isObject(data.data) ? data.data : undefined;
  for (const candidate of [data, envelope]) {
    if (!isObject(candidate)) continue;
    for (const field of MEMBERSHIP_FIELDS) {
      if (typeof candidate[field] === 'boolean') return candidate[field];
    }
  }
  return undefined;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Lenient readers of the service's JSON: a field of the wrong type reads as undefined. */
export function objectOrUndefined<T>(value: T | undefined): T | undefined {
  return typeof value === 'object' && value !== null ? value : undefined;
}

export function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

export function numberOrUndefined(value: unknown): number | undefined {
  return typeof value === 'number' ? value : undefined;
}

/** The checked body of `POST /v1/send/email`. @throws {EmlApiError} `EMESSAGE` naming the bad field */
export function toStandardEmailRequest(email: EmailInput, method: string): StandardEmailRequest {
  if (typeof email !== 'object' || email === null)
    throw inputError(`${method}: expected { to, from, subject, textContent }`);
  const body: StandardEmailRequest = {
    to: toApiAddressList(email.to, `${method}: to`),
    from: toApiAddress(email.from, `${method}: from`),
    subject: checkSubject(email.subject, method),
    textContent: toApiTextContent(email.textContent, method),
  };
  if (body.to.length === 0) throw inputError(`${method}: to needs at least one recipient`);
  return body;
}

/** The checked body of `POST /v1/send/group/{groupId}`. @throws {EmlApiError} `EMESSAGE` naming the bad field */
export function toGroupEmailRequest(email: GroupEmailInput, method: string): GroupEmailRequest {
  if (typeof email !== 'object' || email === null)
    throw inputError(`${method}: expected { from, subject, textContent }`);
  if ('to' in email) throw inputError(`${method}: a group email has no "to"; the recipients are the group members`);
  return {
    from: toApiAddress(email.from, `${method}: from`),
    subject: checkSubject(email.subject, method),
    textContent: toApiTextContent(email.textContent, method),
  };
}
