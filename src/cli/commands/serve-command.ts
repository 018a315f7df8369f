import { parseArgs } from 'node:util';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { isMissingPeer } from '../../shared/options-kit.js';
import { API_SCOPES, type ApiScope } from '../../protocol/api-types.js';
import { startEmulator } from '../../emulator/index.js';
import type { EmulatorApiKey } from '../../emulator/emulator-options.js';
import { type CliIo, untilStopped, EXIT, UsageError, wholeFlag } from '../cli-io.js';

/** Help of `eml-api serve`. */
export const SERVE_HELP = `Usage: eml-api serve [options]

Runs the emulator of the email service until interrupted (Ctrl-C), and prints
its URL and a ready API key holding every scope.

Options:
  --port <n>        port to listen on (default 8025; 0 picks a free one)
  --host <host>     interface to listen on (default 127.0.0.1; 0.0.0.0 for every
                    interface: the API and the public pages are then reachable
                    from the network)
  --allow-host <name>
                    a host name under which the web inbox answers, besides
                    localhost and loopback addresses (repeatable)
  --public-url <url>
                    the emulator's URL as recipients reach it, for the links
                    in delivered mail (default: the URL it listens on)
  --group <id>      create a group (repeatable)
  --key <spec>      extra API key: KEY or KEY:scope,scope[:plan] (repeatable)
                    scopes: ${API_SCOPES.join(', ')}; plan: free or plus
  -h, --help        show this help

Exit codes: 0 stopped, 1 could not start (port in use...), 2 wrong usage.
`;

/** `eml-api serve`: starts the emulator and keeps it running until SIGINT/SIGTERM (or `io.signal`). */
export async function serveCommand(args: string[], io: CliIo): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      port: { type: 'string', default: '8025' },
      host: { type: 'string', default: '127.0.0.1' },
      'allow-host': { type: 'string', multiple: true, default: [] },
      'public-url': { type: 'string' },
      group: { type: 'string', multiple: true, default: [] },
      key: { type: 'string', multiple: true, default: [] },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    io.stdout.write(SERVE_HELP);
    return EXIT.ok;
  }
  const port = wholeFlag(values.port, '--port', 0, 65535);
  const apiKeys = values.key.map(parseKeySpec);
  // Listening for SIGTERM before it says it listens: a stop sent at once is a clean stop.
  const stopped = untilStopped(io.signal);
  let emu;
  try {
    emu = await startEmulator({
      port,
      host: values.host,
      groups: values.group,
      apiKeys,
      allowedHosts: values['allow-host'],
      ...(values['public-url'] === undefined ? {} : { publicUrl: values['public-url'] }),
    });
  } catch (err) {
    // Bad --allow-host or --public-url values are usage errors; a port in use is not.
    if (err instanceof EmlApiError && err.code === 'ECONFIG' && !isMissingPeer(err))
      throw new UsageError(flagMessage(err.message));
    throw err;
  }
  if (!isLoopbackInterface(values.host)) {
    const where =
      values.host === '0.0.0.0' || values.host === '::' ? `${values.host} (every network interface)` : values.host;
    io.stderr.write(
      `eml-api: warning: listening on ${where}, so other machines can reach it: anyone who can reach this port can use the API key printed below and the public pages. The web inbox still answers only localhost; open it under another name with --allow-host NAME, and set --public-url for the links in delivered mail.\n`,
    );
  }
  try {
    io.stdout.write(`Emulator listening on ${emu.url}\n`);
    io.stdout.write(`Web inbox: ${emu.url}/\n`);
    io.stdout.write(`API key (all scopes, plus plan): ${emu.apiKey}\n`);
    if (values.group.length > 0) io.stdout.write(`Groups: ${values.group.join(', ')}\n`);
    io.stdout.write(`Try: EML_API_URL=${emu.url} EML_API_KEY=${emu.apiKey} eml-api send message.eml\n`);
    await stopped;
  } finally {
    await emu.close();
  }
  return EXIT.ok;
}

/** The flags of the emulator's options, for an `ECONFIG` error read as a usage error. */
const OPTION_FLAGS: Readonly<Record<string, string>> = {
  allowedHosts: '--allow-host',
  publicUrl: '--public-url',
  groups: '--group',
  apiKeys: '--key',
  host: '--host',
  port: '--port',
};

/** `Invalid option allowedHosts: ...` as `--allow-host: ...`. */
function flagMessage(message: string): string {
  return message.replace(/^Invalid option (\w+)(\S*): /, (whole, option: string, rest: string) =>
    OPTION_FLAGS[option] ? `${OPTION_FLAGS[option]}${rest}: ` : whole,
  );
}

function parseKeySpec(spec: string): EmulatorApiKey {
  const [key, scopeList, plan] = spec.split(':');
  if (!key) throw new UsageError(`--key: expected KEY or KEY:scope,scope[:plan], got "${spec}"`);
  const scopes = (scopeList ? scopeList.split(',') : [...API_SCOPES]) as ApiScope[];
  const unknown = scopes.filter((s) => !API_SCOPES.includes(s));
  if (unknown.length > 0) throw new UsageError(`--key: unknown scope "${unknown[0]}"; known: ${API_SCOPES.join(', ')}`);
  if (plan !== undefined && plan !== 'free' && plan !== 'plus')
    throw new UsageError(`--key: plan must be free or plus, got "${plan}"`);
  return { key, scopes, plan: plan ?? 'free' };
}

/** Whether the emulator would listen on a loopback interface only. */
function isLoopbackInterface(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
