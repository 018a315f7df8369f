import { EmlApiClient } from '../../client/eml-api-client.js';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { UsageError } from './usage-error.js';

/**
 * `parseArgs` options shared by the commands that call the service
 * (`send`, `group add|remove|check`).
 */
export const SERVICE_ARG_OPTIONS = {
  url: { type: 'string' },
  key: { type: 'string' },
  'allow-insecure-http': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Help lines of {@link SERVICE_ARG_OPTIONS}, for the commands' `--help`. */
export const SERVICE_OPTIONS_HELP = `  --url <url>             base URL of the service (or EML_API_URL)
  --key <key>             API key (or EML_API_KEY; prefer the variable: flags show in ps)
  --allow-insecure-http   allow http:// to a non-loopback host (the key crosses the network in clear)
  -h, --help              show this help
`;

/** Flag values of {@link SERVICE_ARG_OPTIONS} after parsing. */
export interface ServiceFlags {
  url?: string | undefined;
  key?: string | undefined;
  'allow-insecure-http'?: boolean | undefined;
}

/**
 * Creates the client from flags, falling back to `EML_API_URL` and `EML_API_KEY`.
 *
 * @throws {UsageError} when the URL or the key is missing or invalid (exit code 2)
 */
export function createServiceClient(
  flags: ServiceFlags,
  env: Readonly<Record<string, string | undefined>>,
): EmlApiClient {
  const options = serviceOptions(flags, env);
  return asUsageError(() => new EmlApiClient(options));
}

/**
 * The service's URL and key from flags, falling back to `EML_API_URL` and `EML_API_KEY`.
 *
 * @throws {UsageError} when the URL or the key is missing (exit code 2)
 */
export function serviceOptions(
  flags: ServiceFlags,
  env: Readonly<Record<string, string | undefined>>,
): { apiKey: string; baseUrl: string; allowInsecureHttp: boolean } {
  const baseUrl = flags.url ?? env.EML_API_URL;
  const apiKey = flags.key ?? env.EML_API_KEY;
  if (!baseUrl) throw new UsageError('no service URL: pass --url or set EML_API_URL');
  if (!apiKey) throw new UsageError('no API key: set EML_API_KEY (or pass --key)');
  return { apiKey, baseUrl, allowInsecureHttp: flags['allow-insecure-http'] ?? false };
}

/**
 * Runs `make`, reporting an `ECONFIG` error (a bad URL, key or option) as a
 * usage error: a configuration mistake, reported like a wrong flag. Not
 * Redis's refusal of the connection (a wrong password, a cluster connection
 * to a Redis that is not one: `command` `AUTH` or `CLUSTER SLOTS`): the flags
 * were well formed and Redis said no, a failure (exit code 1) with its reason.
 */
export function asUsageError<T>(make: () => T): T {
  const convert = (err: unknown): never => {
    const refused = err instanceof EmlApiError && (err.command === 'AUTH' || err.command === 'CLUSTER SLOTS');
    if (err instanceof EmlApiError && err.code === 'ECONFIG' && !refused) throw new UsageError(err.message);
    throw err;
  };
  try {
    const made = make();
    return (made instanceof Promise ? made.catch(convert) : made) as T;
  } catch (err) {
    return convert(err);
  }
}
