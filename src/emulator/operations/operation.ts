import type { IncomingMessage } from 'node:http';
import type { ApiScope } from '../../protocol/api-types.js';
import type { KnownKey } from '../state/api-key-store.js';
import type { EmulatorState } from '../state/emulator-state.js';

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
