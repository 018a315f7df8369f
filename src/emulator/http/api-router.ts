import type { IncomingMessage, ServerResponse } from 'node:http';
import { createHash } from 'node:crypto';
import {
  API_KEY_HEADER,
  IDEMPOTENCY_KEY_HEADER,
  type ApiErrorBody,
  isValidIdempotencyKey,
  MAX_IDEMPOTENCY_KEY,
  type ApiScope,
} from '../../protocol/api-types.js';
import { HttpError, type ApiAnswer, type Operation, type RequestContext, type Route } from '../operations/operation.js';
import { addToGroupOperation, checkGroupOperation, removeFromGroupOperation } from '../operations/group-operations.js';
import { sendGroupOperation, sendEmailOperation, sendEmlOperation } from '../operations/send-operations.js';
import type { ApiKeyStore, KnownKey, EmulatorState } from '../state/emulator-state.js';
import type { FaultInjector } from './fault-injector.js';
import { configError, refuseUnknownKeys } from '../../shared/options-kit.js';
import { EmlApiError } from '../../shared/eml-api-error.js';

/**
 * The emulator's request handler: a request a site section owns (public pages, the web inbox) goes to it; everything
 * else is the JSON API.
 */
export function createRequestHandler(
  server: ServerContext,
  sections: readonly SiteSection[],
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const target = req.url ?? '/';
    const queryAt = target.indexOf('?');
    const path = queryAt === -1 ? target : target.slice(0, queryAt);
    const query = queryAt === -1 ? '' : target.slice(queryAt + 1);
    const method = (req.method ?? 'GET').toUpperCase();
    const section = sections.find((s) => s.owns(method, path));
    if (!section) return answerApi(server, req, res);
    try {
      await section.serve(req, res, path, query);
    } catch (err) {
      server.onInternalError(err);
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'content-length': '15' });
        res.end('Internal error\n');
      }
    }
  };
}

const MAX_PATH_LENGTH = 2048;

/**
 * Answers one request of the JSON API, with the injected faults. Every failure caused by the request is a 4xx JSON
 * error; only a bug in the emulator gives 500.
 */
export async function answerApi(server: ServerContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const fault = server.faults?.draw();
  if (fault && fault.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, fault.latencyMs));
  if (fault?.kind === 'resetBeforeProcessing') {
    req.socket.destroy();
    return;
  }
  let answer: ApiAnswer;
  try {
    if (fault?.kind === 'unavailable' || fault?.kind === 'rateLimited') {
      const [status, code, message] =
        fault.kind === 'unavailable'
          ? ([503, 'unavailable', 'The service is unavailable (injected fault); retry later'] as const)
          : ([429, 'rate_limited', 'Too many requests (injected fault); retry after the Retry-After delay'] as const);
      throw new HttpError(status, code, message, { 'retry-after': String(fault.retryAfterSeconds) });
    }
    answer = await route(server, req);
    if (fault?.kind === 'resetAfterProcessing') {
      // Processed (mail delivered), but the answer is lost on the way.
      req.socket.destroy();
      return;
    }
  } catch (err) {
    answer = errorAnswer(server, err);
    // The body may be partly unread (413, early errors): do not reuse the connection.
    if (!req.complete) res.setHeader('connection', 'close');
  }
  if (res.headersSent || res.destroyed) return;
  const payload = JSON.stringify(answer.body);
  res.writeHead(answer.status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(payload),
    'cache-control': 'no-store',
    ...answer.headers,
  });
  res.end(payload);
}

async function route(server: ServerContext, req: IncomingMessage): Promise<ApiAnswer> {
  const rawUrl = req.url ?? '/';
  if (rawUrl.length > MAX_PATH_LENGTH) {
    throw new HttpError(400, 'invalid_request', `The request URL is longer than ${MAX_PATH_LENGTH} characters`);
  }
  // Match on the raw path: a URL parser would resolve %2E%2E and dot segments
  // and let a path parameter reach another route.
  const path = rawUrl.split('?', 1)[0]!;
  for (const candidate of ROUTES) {
    const match = candidate.pattern.exec(path);
    if (!match) continue;
    const method = (req.method ?? 'GET').toUpperCase();
    const operation = candidate.methods[method as keyof typeof candidate.methods];
    if (!operation) {
      throw new HttpError(405, 'method_not_allowed', `${method} is not allowed on ${path.slice(0, 200)}`, {
        allow: Object.keys(candidate.methods).join(', '),
      });
    }
    const params = match.slice(1).map((segment, i) => decodeParam(segment!, i));
    return run(server, req, operation, params, `${method} ${candidate.pattern.source}`);
  }
  throw new HttpError(404, 'not_found', `No operation at ${req.method ?? 'GET'} ${path.slice(0, 200)}`);
}

async function run(
  server: ServerContext,
  req: IncomingMessage,
  operation: Operation,
  params: string[],
  routeId: string,
): Promise<ApiAnswer> {
  const { state } = server;
  const key = authenticate(state.keys, req.headers[API_KEY_HEADER]);
  const wait = server.rateLimiter?.take(key.label) ?? 0;
  if (wait > 0) {
    throw new HttpError(429, 'rate_limited', `This API key is over its rate limit; retry after ${wait} s`, {
      'retry-after': String(wait),
    });
  }
  requireScope(key, operation.scopes);
  if (operation.hasBody) {
    const type = (req.headers['content-type'] ?? '').split(';', 1)[0]!.trim().toLowerCase();
    if (type !== 'application/json') {
      throw new HttpError(
        415,
        'unsupported_media_type',
        `Content-Type must be application/json, got ${type ? JSON.stringify(type.slice(0, 100)) : 'none'}`,
      );
    }
  }
  const now = state.now();
  let body: Promise<Buffer> | undefined;
  const readRequestBody = () => (body ??= readBody(req, server.maxRequestSize));
  let parsed: Promise<Record<string, unknown>> | undefined;
  const ctx: RequestContext = {
    req,
    params,
    key,
    state,
    now,
    json: () => (parsed ??= readRequestBody().then(parseJsonObject)),
  };
  const idempotencyKey = req.headers[IDEMPOTENCY_KEY_HEADER];
  if (!operation.idempotent || typeof idempotencyKey !== 'string' || idempotencyKey.length === 0) {
    return operation.handle(ctx);
  }
  if (!isValidIdempotencyKey(idempotencyKey)) {
    throw new HttpError(
      400,
      'invalid_request',
      `The Idempotency-Key header must be 1 to ${MAX_IDEMPOTENCY_KEY} printable ASCII characters without spaces`,
    );
  }
  // The body is read first: a key reused with another request (body, operation or path) is refused, not replayed.
  const fingerprint = createHash('sha256')
    .update(`${routeId}\n${params.join('\n')}\n`)
    .update(await readRequestBody())
    .digest('base64');
  // One space per account, not per API key or operation (docs/contract.md): a fleet that rotates keys must not send twice.
  const outcome = await state.idempotency.run(`${key.account}\n${idempotencyKey}`, fingerprint, now.getTime(), () =>
    operation.handle(ctx),
  );
  if (outcome === 'conflict') {
    throw new HttpError(
      422,
      'idempotency_key_reused',
      'This Idempotency-Key was already used with a different request (another body, operation or group); a new message needs a new key',
    );
  }
  const { answer, replayed } = outcome;
  return replayed ? { ...answer, headers: { ...answer.headers, 'idempotent-replayed': 'true' } } : answer;
}

function decodeParam(segment: string, index: number): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HttpError(400, 'invalid_request', `Path parameter ${index + 1} is not valid percent-encoding`);
  }
}

function errorAnswer(server: ServerContext, err: unknown): ApiAnswer {
  if (err instanceof ClientGoneError) {
    // Nothing is reported: the client left; the answer goes nowhere.
    return { status: 400, body: { error: { code: 'invalid_request', message: err.message } } };
  }
  if (err instanceof HttpError) {
    const body: ApiErrorBody = { error: { code: err.code, message: err.message } };
    return { status: err.status, body, headers: err.headers };
  }
  server.onInternalError(err);
  const body: ApiErrorBody = {
    error: { code: 'internal_error', message: 'The emulator failed unexpectedly; see its log' },
  };
  return { status: 500, body };
}

const SEGMENT = '([^/]+)';

/**
 * The service's operations. Path parameters are single, percent-encoded segments; they are decoded after matching, so
 * an encoded `/` or `..` can never reach another route.
 */
export const ROUTES: readonly Route[] = [
  { pattern: /^\/v1\/send\/eml$/, methods: { POST: sendEmlOperation } },
  { pattern: /^\/v1\/send\/email$/, methods: { POST: sendEmailOperation } },
  { pattern: new RegExp(`^/v1/send/group/${SEGMENT}$`), methods: { POST: sendGroupOperation } },
  {
    pattern: new RegExp(`^/v1/group/${SEGMENT}$`),
    methods: { POST: addToGroupOperation, DELETE: removeFromGroupOperation },
  },
  {
    pattern: new RegExp(`^/v1/group/${SEGMENT}/check/${SEGMENT}$`),
    methods: { GET: checkGroupOperation },
  },
];

/**
 * Finds the key of a request's `X-API-KEY` header.
 * @throws {HttpError} 401 `missing_api_key` or `invalid_api_key`
 */
export function authenticate(keys: ApiKeyStore, presented: string | string[] | undefined): KnownKey {
  if (presented === undefined || presented === '') {
    throw new HttpError(401, 'missing_api_key', 'The X-API-KEY header is missing');
  }
  if (Array.isArray(presented)) {
    throw new HttpError(401, 'invalid_api_key', 'The X-API-KEY header must appear once');
  }
  const key = keys.find(presented);
  if (!key) throw new HttpError(401, 'invalid_api_key', 'The API key is not valid');
  return key;
}

/**
 * Checks that a key holds one of the scopes.
 * @throws {HttpError} 403 `missing_scope` naming the scope(s)
 */
export function requireScope(key: KnownKey, anyOf: readonly ApiScope[]): void {
  if (anyOf.some((scope) => key.scopes.has(scope))) return;
  const names = anyOf.map((s) => `"${s}"`).join(' or ');
  throw new HttpError(403, 'missing_scope', `The API key lacks the ${names} scope needed for this operation`);
}

/**
 * Reads a request body up to `limit` bytes. A declared or actual size over the limit answers 413 without buffering the
 * rest.
 */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    throw tooLarge(limit);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) throw tooLarge(limit);
      chunks.push(chunk);
    }
  } catch (err) {
    if (err instanceof HttpError) throw err;
    // The stream fails ('aborted', ECONNRESET) when the client goes away mid-body.
    throw new ClientGoneError(err);
  }
  return Buffer.concat(chunks, size);
}

/**
 * The client went away before its request was read: its own doing, never an internal error of the emulator. There is
 * nobody left to answer.
 */
export class ClientGoneError extends Error {
  override readonly name = 'ClientGoneError';
  constructor(cause: unknown) {
    super('the client disconnected before its request was read', { cause });
  }
}

function tooLarge(limit: number): HttpError {
  return new HttpError(413, 'payload_too_large', `The request body is larger than the limit of ${limit} bytes`);
}

/** Strict: bad bytes throw; a byte order mark is kept, so JSON.parse refuses it. */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * Parses a JSON body that must be an object.
 * @throws {HttpError} 400 `invalid_json` or `invalid_request`
 */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let text: string;
  try {
    text = UTF8.decode(body);
  } catch {
    // Decoding leniently would turn the bad bytes into U+FFFD and deliver a changed message.
    throw new HttpError(400, 'invalid_json', 'The request body is not UTF-8, the encoding of JSON (RFC 8259)');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, 'invalid_json', `The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new HttpError(400, 'invalid_request', 'The request body must be a JSON object');
  }
  return value as Record<string, unknown>;
}

/** What the HTTP side of the emulator works with: the state, and how it answers. */
export interface ServerContext {
  readonly state: EmulatorState;
  /** Largest request body accepted, in bytes. */
  readonly maxRequestSize: number;
  /** Called with unexpected internal errors. */
  readonly onInternalError: (err: unknown) => void;
  readonly rateLimiter: KeyRateLimiter | undefined;
  /** Faults injected into API requests; `emu.setFaults()` replaces them. */
  faults: FaultInjector | undefined;
}

/**
 * A part of the emulator's web site beside the JSON API (the public pages, the web inbox). The request handler asks
 * each section in turn whether it owns a request; sections write their own answers, so the handler knows nothing of
 * what they serve.
 */
export interface SiteSection {
  /** Whether this section answers a request for `path` with `method`. */
  owns(method: string, path: string): boolean;
  /** Answers a request it owns; a thrown error is answered with a plain 500. */
  serve(req: IncomingMessage, res: ServerResponse, path: string, query: string): Promise<void>;
  /** Ends what the section keeps open (event streams): the emulator is closing. */
  close?(): void;
}

/** A per-API-key rate limit of the emulator (its `rateLimit` option). */
export interface EmulatorRateLimit {
  requestsPerSecond: number;
  burst?: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Every field of {@link EmulatorRateLimit}. */
const RATE_LIMIT_FIELDS = ['requestsPerSecond', 'burst'] as const satisfies readonly (keyof EmulatorRateLimit)[];

/**
 * Token buckets per API key, on the real (monotonic) clock: the emulator's `now` option is for mail-domain time and may
 * be frozen in tests.
 */
export class KeyRateLimiter {
  readonly #rate: number;
  readonly #burst: number;
  readonly #buckets = new Map<string, Bucket>();

  /** @throws {EmlApiError} `ECONFIG` naming a bad field */
  constructor(limit: EmulatorRateLimit) {
    if (typeof limit !== 'object' || limit === null)
      throw configError('rateLimit', 'expected { requestsPerSecond, burst }');
    // The client's { max, duration } is a likely mistake here: say what the emulator takes instead.
    const clients = ['max', 'duration'].find((key) => Object.hasOwn(limit, key));
    if (clients !== undefined) {
      throw new EmlApiError(
        'ECONFIG',
        `Unknown option rateLimit.${clients}: the emulator limits requests with { requestsPerSecond, burst } (the service’s token bucket)`,
        { permanent: true },
      );
    }
    refuseUnknownKeys(limit, RATE_LIMIT_FIELDS, 'rateLimit.');
    if (!(
      typeof limit.requestsPerSecond === 'number' &&
      limit.requestsPerSecond > 0 &&
      Number.isFinite(limit.requestsPerSecond)
    )) {
      throw configError('rateLimit.requestsPerSecond', 'expected a positive number');
    }
    const burst = limit.burst ?? limit.requestsPerSecond;
    if (!(typeof burst === 'number' && burst >= 1 && Number.isFinite(burst)))
      throw configError('rateLimit.burst', 'expected a number of at least 1');
    this.#rate = limit.requestsPerSecond;
    this.#burst = burst;
  }

  /**
   * Takes one request from a key's bucket.
   * @returns 0 when allowed, else the seconds to wait (at least 1) for `Retry-After`
   */
  take(keyLabel: string, nowMs: number = performance.now()): number {
    const bucket = this.#buckets.get(keyLabel) ?? { tokens: this.#burst, at: nowMs };
    bucket.tokens = Math.min(this.#burst, bucket.tokens + ((nowMs - bucket.at) / 1000) * this.#rate);
    bucket.at = nowMs;
    this.#buckets.set(keyLabel, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.#rate));
  }
}
