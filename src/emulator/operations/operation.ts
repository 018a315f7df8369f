import type { IncomingMessage } from 'node:http';
import type { ApiScope, ApiErrorCode } from '../../protocol/api-types.js';
import type { KnownKey, EmulatorState } from '../state/emulator-state.js';

/** An answer of an API operation: status and JSON body. */
export interface ApiAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** What a handler gets: the request, its decoded path parameters, its key and the state. */
export interface RequestContext {
  req: IncomingMessage;
  /** Decoded path parameters, in order. */
  params: string[];
  key: KnownKey;
  state: EmulatorState;
  /** The request time, from the emulator's clock. */
  now: Date;
  /** The body parsed as a JSON object (read once, within the body limit). */
  json(): Promise<Record<string, unknown>>;
}

/** One method of a route. */
export interface Operation {
  /** The key must hold one of these scopes. */
  scopes: readonly ApiScope[];
  /** Whether the operation has a JSON body (checked for Content-Type). */
  hasBody: boolean;
  /** Whether a repeated `Idempotency-Key` replays the first answer. */
  idempotent: boolean;
  handle(ctx: RequestContext): Promise<ApiAnswer>;
}

/** A path pattern and the methods it answers. */
export interface Route {
  pattern: RegExp;
  methods: Partial<Record<'GET' | 'POST' | 'DELETE', Operation>>;
}

/**
 * An error answer of the emulator: thrown by handlers, turned into `{ "error": { "code", "message" } }` with its status
 * by the server.
 */
export class HttpError extends Error {
  override readonly name = 'HttpError';
  constructor(
    readonly status: number,
    readonly code: ApiErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Rejects fields a request type does not have, so that a typo is reported instead of silently ignored. */
export function rejectUnknownFields(
  body: Record<string, unknown>,
  allowed: readonly string[],
  where = 'request body',
): void {
  for (const key of Object.keys(body)) {
    if (!allowed.includes(key)) {
      throw new HttpError(
        400,
        'invalid_request',
        `Unknown field "${key.slice(0, 64)}" in the ${where}; allowed: ${allowed.join(', ')}`,
      );
    }
  }
}

/**
 * Checks that a group exists (groups are created out of band).
 * @throws {HttpError} 404 `group_not_found`
 */
export function requireGroup(state: EmulatorState, groupId: string): void {
  if (!state.groups.has(groupId)) {
    throw new HttpError(
      404,
      'group_not_found',
      `No group ${JSON.stringify(groupId.slice(0, 200))}; groups are created in the dashboard`,
    );
  }
}
