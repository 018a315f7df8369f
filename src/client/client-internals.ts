import type { Requester } from '../http/requester.js';
import { privateRegistry } from '../shared/private-registry.js';
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

const registry = privateRegistry<ClientInternals>('EmlApiClient');

/** Records the internals of a client (its constructor calls this). */
export const registerClientInternals = registry.register;

/** The internals of a client made by this package. */
export const clientInternals = registry.get;
