import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import { API_KEY_HEADER, API_PATHS, IDEMPOTENCY_KEY_HEADER, type SendAcceptedResponse } from './api-types.js';
import { resolveClientOptions, type EmlApiClientOptions, type ResolvedClientOptions } from './client-options.js';
import { ConcurrencyLimiter } from './concurrency-limiter.js';
import { EmlApiError } from './errors.js';
import { errorFromFailure, errorFromResponse } from './request-error.js';
import { readServiceResponse, type ServiceResponse } from './service-response.js';
import { VERSION } from './version.js';

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
   * `Idempotency-Key` of this logical send.
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

interface ExchangeInit {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: string;
  signal?: AbortSignal | undefined;
  headers?: Record<string, string>;
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
  #closed = false;

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
      });
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
    const bytes = await toBuffer(eml);
    if (bytes.length === 0) {
      throw new EmlApiError('EMESSAGE', 'sendEml() got an empty message', {
        command: `POST ${API_PATHS.sendEml}`,
        permanent: true,
      });
    }
    const idempotencyKey = options.idempotencyKey ?? randomUUID();
    // Base64 has no character JSON must escape, so the body is built by concatenation.
    const body = `{"mail":"${bytes.toString('base64')}"}`;
    const res = await this.#exchange<Partial<SendAcceptedResponse>>({
      method: 'POST',
      path: API_PATHS.sendEml,
      body,
      signal: options.signal,
      headers: { [IDEMPOTENCY_KEY_HEADER]: idempotencyKey },
    });
    const data = res.data && typeof res.data === 'object' ? res.data : undefined;
    return {
      ...res,
      id: typeof data?.id === 'string' ? data.id : undefined,
      messageId: typeof data?.messageId === 'string' ? data.messageId : undefined,
      idempotencyKey,
    };
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
    // A 400 or 422 to an empty body means the request got past authentication
    // and the scope check: the key may send.
    await this.#exchange(
      { method: 'POST', path: API_PATHS.sendEml, body: '{}', signal: options.signal },
      { acceptStatus: (status) => status === 400 || status === 422 },
    );
    return true;
  }

  /**
   * Closes the connections the client opened. A dispatcher passed in the
   * options is left open: its owner closes it. Requests in flight finish first.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  async #exchange<T>(
    init: ExchangeInit,
    { acceptStatus }: { acceptStatus?: (status: number) => boolean } = {},
  ): Promise<ServiceResponse<T>> {
    const command = `${init.method} ${init.path}`;
    if (this.#closed) {
      throw new EmlApiError('ECONNECTION', `${command} refused: the client is closed`, { command, permanent: true });
    }
    const origin = this.options.baseUrl.origin;
    return this.#limiter.run(async () => {
      init.signal?.throwIfAborted();
      const headers: Record<string, string> = {
        [API_KEY_HEADER]: this.#apiKey,
        accept: 'application/json',
        'user-agent': this.options.userAgent ?? `nodemailer-eml-api/${VERSION}`,
        ...init.headers,
      };
      if (init.body !== undefined) headers['content-type'] = 'application/json';
      let res: ServiceResponse<T>;
      try {
        const answer = await this.#dispatcher.request({
          origin,
          path: this.options.basePath + init.path,
          method: init.method,
          headers,
          body: init.body,
          signal: init.signal,
        });
        const text = await answer.body.text();
        const contentType = answer.headers['content-type'];
        res = readServiceResponse<T>(
          answer.statusCode,
          Array.isArray(contentType) ? contentType[0] : contentType,
          text,
        );
      } catch (err) {
        throw errorFromFailure(command, origin, err, this.#apiKey);
      }
      if ((res.statusCode >= 200 && res.statusCode < 300) || acceptStatus?.(res.statusCode)) return res;
      throw errorFromResponse(command, res, this.#apiKey);
    });
  }
}

async function toBuffer(input: Buffer | Uint8Array | string | Readable): Promise<Buffer> {
  if (Buffer.isBuffer(input)) return input;
  if (typeof input === 'string') return Buffer.from(input, 'utf8');
  if (input instanceof Uint8Array) return Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  if (
    input instanceof Readable ||
    (typeof input === 'object' && input !== null && typeof (input as Readable).pipe === 'function')
  ) {
    const chunks: Buffer[] = [];
    for await (const chunk of input as AsyncIterable<Buffer | string>) {
      chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    }
    return Buffer.concat(chunks);
  }
  throw new EmlApiError('EMESSAGE', 'sendEml() expects a Buffer, Uint8Array, string or Readable stream', {
    permanent: true,
  });
}
