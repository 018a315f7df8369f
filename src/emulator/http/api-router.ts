import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { API_KEY_HEADER, IDEMPOTENCY_KEY_HEADER } from '../../protocol/api-paths.js';
import type { ApiErrorBody } from '../../protocol/api-types.js';
import { isValidIdempotencyKey, MAX_IDEMPOTENCY_KEY } from '../../protocol/idempotency-key.js';
import { authenticate, requireScope } from './authenticate.js';
import type { ServerContext } from './server-context.js';
import { HttpError } from '../operations/http-error.js';
import { ClientGoneError, parseJsonObject, readBody } from './read-body.js';
import type { ApiAnswer, Operation, RequestContext } from '../operations/operation.js';
import { ROUTES } from './routes.js';

const MAX_PATH_LENGTH = 2048;

/**
 * Answers one request of the JSON API, with the injected faults. Every
 * failure caused by the request is a 4xx JSON error; only a bug in the
 * emulator gives 500.
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
  // The body is read first: a key reused with another body is refused, not replayed.
  const fingerprint = createHash('sha256')
    .update(await readRequestBody())
    .digest('base64');
  // Scoped to the account, not the API key (CONTRACT.md): a fleet that rotates keys must not send twice.
  const outcome = await state.idempotency.run(
    `${key.account}\n${routeId}\n${params.join('\n')}\n${idempotencyKey}`,
    fingerprint,
    now.getTime(),
    () => operation.handle(ctx),
  );
  if (outcome === 'conflict') {
    throw new HttpError(
      422,
      'idempotency_key_reused',
      'This Idempotency-Key was already used with a different request body; a new message needs a new key',
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
