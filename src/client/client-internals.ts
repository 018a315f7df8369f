import type { Requester } from '../http/requester.js';
import type { ResolvedClientOptions } from './client-options.js';

/**
 * What the transports built on a client reach besides its public methods:
 * its request engine, to build a message inside the same call that uploads
 * it. Kept in a module-private registry, so none of it is part of the
 * client's public type.
 */
export interface ClientInternals {
  readonly requester: Requester;
  readonly options: Readonly<ResolvedClientOptions>;
}

const registry = new WeakMap<object, ClientInternals>();

/** Records the internals of a client (its constructor calls this). */
export function registerClientInternals(client: object, internals: ClientInternals): void {
  registry.set(client, internals);
}

/** The internals of a client made by this package. */
export function clientInternals(client: object): ClientInternals {
  const internals = registry.get(client);
  if (!internals) throw new TypeError('not an EmlApiClient of this package');
  return internals;
}
