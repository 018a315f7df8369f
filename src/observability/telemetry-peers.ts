import type * as PromClient from 'prom-client';
import type * as OtelApi from '@opentelemetry/api';
import { createRequire } from 'node:module';
import { requirePeer } from '../shared/optional-peer.js';

/**
 * The `prom-client` module, as {@link loadPromClient} returns it.
 * @example
 * const { Registry }: PromClientModule = loadPromClient('The metrics option');
 */
export type PromClientModule = typeof PromClient;

/**
 * The `@opentelemetry/api` module, as {@link loadOtelApi} returns it.
 * @example
 * const api: OtelApiModule | undefined = loadOtelApi();
 */
export type OtelApiModule = typeof OtelApi;

let promClient: PromClientModule | undefined;
let otelApi: OtelApiModule | null | undefined;

/**
 * Loads `prom-client`, the optional peer metrics are kept in, the first time
 * metrics are asked for: an app that sends mail without metrics never loads it.
 *
 * @param user what asked for it, named in the error, e.g. `The metrics option`
 * @throws {EmlApiError} `ECONFIG` saying `npm install prom-client` when it is missing
 * @example
 * const { Registry } = loadPromClient('eml-api relay --http-port');
 */
export function loadPromClient(user: string): PromClientModule {
  return (promClient ??= requirePeer<PromClientModule>('prom-client', 'prom-client', user));
}

// Resolved from this package, as requirePeer does: the app's copy when it installed one.
const requireFromHere = createRequire(import.meta.url);

/**
 * Loads `@opentelemetry/api` when it is installed, and `undefined` when it is
 * not. Tracing asks for nothing: as every instrumented library does, the
 * package calls the API, which records nothing until the app registers an SDK
 * (and an app with an SDK has the API). Without the API there is no tracer
 * anyone could export from, so there is nothing to say.
 * @example
 * const tracer = loadOtelApi()?.trace.getTracer('nodemailer-eml-api');
 */
export function loadOtelApi(): OtelApiModule | undefined {
  if (otelApi === undefined) {
    try {
      otelApi = requireFromHere('@opentelemetry/api') as OtelApiModule;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw err;
      otelApi = null;
    }
  }
  return otelApi ?? undefined;
}
