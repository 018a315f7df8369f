import { EmlApiClient, type EmlApiClientOptions } from '../../src/index.js';

/**
 * A `makeClient` that applies a test file's defaults and keeps every client it
 * made, and `closeClients` to close them all (in the file's afterEach).
 * `defaults` is called for each client, so it can read a service started in beforeAll.
 * @example
 * const { makeClient, closeClients } = clientFactory(() => ({ apiKey: 'k', baseUrl: service.url }));
 * afterEach(() => closeClients({ abort: true }));
 * const client = makeClient({ maxConnections: 1 });
 */
export function clientFactory(defaults: () => EmlApiClientOptions) {
  const made: EmlApiClient[] = [];
  return {
    makeClient(options: Partial<EmlApiClientOptions> = {}): EmlApiClient {
      const client = new EmlApiClient({ ...defaults(), ...options });
      made.push(client);
      return client;
    },
    async closeClients(options: { abort?: boolean } = {}): Promise<void> {
      await Promise.all(made.splice(0).map((client) => client.close(options)));
    },
  };
}
