import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { EmlApiError } from '../../shared/eml-api-error.js';
import type { EmlApiLogger } from '../../shared/options-kit.js';
import { API_SCOPES, type ApiScope } from '../../protocol/api-types.js';
import { startEmulator } from '../../emulator/index.js';
import type { EmulatorApiKey, EmulatorInboxLogin, EmulatorOptions } from '../../emulator/emulator-options.js';
import type { EmulatorFaults } from '../../emulator/index.js';
import { type CliIo, untilStopped, EXIT, UsageError, wholeFlag, terminalText } from '../cli-io.js';

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
  --smtp-port <n>   also take mail over SMTP on this port (0 picks a free one), into
                    the same inbox; loopback clients send without AUTH
  --smtp-host <host>
                    interface of the SMTP port (default: --host)
  --smtp-allow <cidr>
                    clients that may send over SMTP without AUTH (repeatable; default
                    loopback), e.g. 172.16.0.0/12 for a docker-compose network
  --max-messages <n>
                    messages the inbox keeps; the oldest go first (default 10000)
  --data-dir <dir>  keep messages, groups, members, images and the API key in this
                    directory across restarts
  --fault-unavailable <share>, --fault-rate-limited <share>,
  --fault-reset-before <share>, --fault-reset-after <share>
                    share (0 to 1) of API requests answered 503, 429, or whose
                    connection is reset before or after processing
  --fault-latency <ms | min-max>
                    latency added to each API request
  --fault-retry-after <s>
                    Retry-After of injected 429 and 503 answers (default 1)
  --fault-seed <n>  seed of the faults' random draws (default 1)
  --rate-limit <n>  API requests each key may make per second (429 beyond)
  --rate-burst <n>  requests a key may make at once (default: --rate-limit)
  --inbox-login-file <file>
                    the web inbox's and the inspection API's login, one line
                    user:password (or EML_API_INBOX_LOGIN=user:password). Listening
                    beyond loopback without one, serve makes one up and prints it
  -h, --help        show this help

The inspection API is Mailpit's API v1 at /api/v1/ (mailpit-api, cypress-mailpit...).
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
      'smtp-port': { type: 'string' },
      'smtp-host': { type: 'string' },
      'smtp-allow': { type: 'string', multiple: true },
      'max-messages': { type: 'string' },
      'data-dir': { type: 'string' },
      'fault-unavailable': { type: 'string' },
      'fault-rate-limited': { type: 'string' },
      'fault-reset-before': { type: 'string' },
      'fault-reset-after': { type: 'string' },
      'fault-latency': { type: 'string' },
      'fault-retry-after': { type: 'string' },
      'fault-seed': { type: 'string' },
      'rate-limit': { type: 'string' },
      'rate-burst': { type: 'string' },
      'inbox-login-file': { type: 'string' },
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
  const dataDir = values['data-dir'];
  const beyondLoopback = !isLoopbackInterface(values.host);
  const login = await inboxLogin(values['inbox-login-file'], io.env, dataDir, beyondLoopback);
  const smtpPort = values['smtp-port'];
  const options: EmulatorOptions = {
    port,
    host: values.host,
    groups: values.group,
    apiKeys,
    allowedHosts: values['allow-host'],
    ...(values['public-url'] === undefined ? {} : { publicUrl: values['public-url'] }),
    maxMessages: wholeFlag(values['max-messages'], '--max-messages', 1, 10_000_000, 10_000),
    ...(dataDir === undefined ? {} : { dataDir }),
    ...(login === undefined ? {} : { inboxLogin: login.login }),
    ...faultOptions(values),
    ...(smtpPort === undefined
      ? {}
      : {
          smtp: {
            port: wholeFlag(smtpPort, '--smtp-port', 0, 65535),
            ...(values['smtp-host'] === undefined ? {} : { host: values['smtp-host'] }),
            ...(values['smtp-allow'] === undefined ? {} : { allowFrom: values['smtp-allow'] }),
            logger: smtpLogger(io),
          },
        }),
  };
  if (smtpPort === undefined && (values['smtp-host'] !== undefined || values['smtp-allow'] !== undefined)) {
    throw new UsageError('--smtp-host and --smtp-allow need --smtp-port');
  }
  // A stop sent as soon as it says it listens is a clean stop.
  const stopped = untilStopped(io.signal);
  let emu;
  try {
    emu = await startEmulator(options);
  } catch (err) {
    // Bad --allow-host or --public-url values are usage errors; a port in use is not.
    if (err instanceof EmlApiError && err.code === 'ECONFIG' && /^Invalid option /.test(err.message)) {
      throw new UsageError(flagMessage(err.message));
    }
    throw err;
  }
  if (beyondLoopback) {
    const where =
      values.host === '0.0.0.0' || values.host === '::' ? `${values.host} (every network interface)` : values.host;
    io.stderr.write(
      `eml-api: warning: listening on ${where}, so other machines can reach it: anyone who can reach this port can use the API key printed below and the public pages. The web inbox and the inspection API ask for the inbox login and still answer only localhost; open them under another name with --allow-host NAME, and set --public-url for the links in delivered mail.\n`,
    );
  }
  try {
    // Once the emulator has made the directory (and holds it).
    if (login?.saveTo !== undefined) await writeFile(login.saveTo, `${login.login.password}\n`, { mode: 0o600 });
    io.stdout.write(`Emulator listening on ${emu.url}\n`);
    io.stdout.write(`Web inbox: ${emu.url}/\n`);
    io.stdout.write(`Mailpit API: ${emu.url}/api/v1/\n`);
    if (emu.smtp) io.stdout.write(`SMTP: ${emu.smtp.url}\n`);
    io.stdout.write(`API key (all scopes, plus plan): ${emu.apiKey}\n`);
    if (login) io.stdout.write(`Inbox login: ${login.shown}\n`);
    if (dataDir !== undefined) io.stdout.write(`Data directory: ${dataDir}\n`);
    if (values.group.length > 0) io.stdout.write(`Groups: ${values.group.join(', ')}\n`);
    io.stdout.write(`Try: EML_API_URL=${emu.url} EML_API_KEY=${emu.apiKey} eml-api send message.eml\n`);
    await stopped;
  } finally {
    await emu.close();
  }
  return EXIT.ok;
}

/** For an `ECONFIG` error read as a usage error. */
const OPTION_FLAGS: Readonly<Record<string, string>> = {
  'smtp.allowFrom': '--smtp-allow',
  'smtp.host': '--smtp-host',
  'smtp.port': '--smtp-port',
  dataDir: '--data-dir',
  'faults.latencyMs': '--fault-latency',
  'faults.unavailable': '--fault-unavailable',
  'faults.rateLimited': '--fault-rate-limited',
  'faults.resetBeforeProcessing': '--fault-reset-before',
  'faults.resetAfterProcessing': '--fault-reset-after',
  'faults.retryAfterSeconds': '--fault-retry-after',
  'faults.seed': '--fault-seed',
  faults: '--fault-*',
  'rateLimit.requestsPerSecond': '--rate-limit',
  'rateLimit.burst': '--rate-burst',
  inboxLogin: 'the inbox login',
  'inboxLogin.username': 'the inbox login',
  'inboxLogin.password': 'the inbox login',
  allowedHosts: '--allow-host',
  publicUrl: '--public-url',
  groups: '--group',
  apiKeys: '--key',
  host: '--host',
  port: '--port',
};

/** `Invalid option allowedHosts: ...` as `--allow-host: ...`. */
function flagMessage(message: string): string {
  return message.replace(/^Invalid option ([\w.]+?)((?:\[\d+\])?): /, (whole, option: string, rest: string) =>
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

function isLoopbackInterface(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function shareFlag(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !(n >= 0 && n <= 1))
    throw new UsageError(`${flag}: expected a share from 0 to 1, got "${value}"`);
  return n;
}

type ServeValues = Record<string, string | string[] | boolean | undefined>;

/** The faults and rate limit of the --fault-* and --rate-* flags. */
function faultOptions(values: ServeValues): Pick<EmulatorOptions, 'faults' | 'rateLimit'> {
  const flag = (name: string) => values[name] as string | undefined;
  const faults: EmulatorFaults = {};
  const shares = [
    ['unavailable', '--fault-unavailable'],
    ['rateLimited', '--fault-rate-limited'],
    ['resetBeforeProcessing', '--fault-reset-before'],
    ['resetAfterProcessing', '--fault-reset-after'],
  ] as const;
  for (const [key, name] of shares) {
    const share = shareFlag(flag(name.slice(2)), name);
    if (share !== undefined) faults[key] = share;
  }
  const latency = flag('fault-latency');
  if (latency !== undefined) {
    const m = /^(\d{1,6})(?:-(\d{1,6}))?$/.exec(latency.trim());
    if (!m) throw new UsageError(`--fault-latency: expected milliseconds (50) or a range (0-200), got "${latency}"`);
    faults.latencyMs = m[2] === undefined ? Number(m[1]) : [Number(m[1]), Number(m[2])];
  }
  const retryAfter = flag('fault-retry-after');
  if (retryAfter !== undefined) faults.retryAfterSeconds = wholeFlag(retryAfter, '--fault-retry-after', 0, 86_400);
  const seed = flag('fault-seed');
  if (seed !== undefined) faults.seed = wholeFlag(seed, '--fault-seed', 0, 2 ** 32 - 1);
  const rate = flag('rate-limit');
  const burst = flag('rate-burst');
  if (burst !== undefined && rate === undefined) throw new UsageError('--rate-burst needs --rate-limit');
  let rateLimit: EmulatorOptions['rateLimit'];
  if (rate !== undefined) {
    const perSecond = Number(rate.replace(/\/s$/, ''));
    if (!(perSecond > 0 && Number.isFinite(perSecond))) {
      throw new UsageError(`--rate-limit: expected requests per second (50 or 50/s), got "${rate}"`);
    }
    rateLimit = {
      requestsPerSecond: perSecond,
      ...(burst === undefined ? {} : { burst: wholeFlag(burst, '--rate-burst', 1, 1_000_000) }),
    };
  }
  return {
    ...(Object.keys(faults).length === 0 ? {} : { faults }),
    ...(rateLimit === undefined ? {} : { rateLimit }),
  };
}

/**
 * The inbox login: from --inbox-login-file or EML_API_INBOX_LOGIN, else one made up when the emulator
 * listens beyond loopback (kept in the data directory, if any, so it stays the same).
 * @returns the login, how to show it, and where to keep a made-up one; undefined for none
 */
async function inboxLogin(
  file: string | undefined,
  env: CliIo['env'],
  dataDir: string | undefined,
  beyondLoopback: boolean,
): Promise<{ login: EmulatorInboxLogin; shown: string; saveTo?: string } | undefined> {
  let text: string | undefined;
  let from: string | undefined;
  if (file !== undefined) {
    text = await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new Error(`cannot read --inbox-login-file ${JSON.stringify(file)}: ${err.code ?? err.message}`);
    });
    from = `from ${file}`;
  } else if (env.EML_API_INBOX_LOGIN) {
    text = env.EML_API_INBOX_LOGIN;
    from = 'from EML_API_INBOX_LOGIN';
  }
  if (text !== undefined) {
    const line =
      text
        .split(/\r?\n/)
        .find((l) => l.trim() !== '')
        ?.trim() ?? '';
    const colon = line.indexOf(':');
    if (colon <= 0) throw new UsageError(`the inbox login ${from}: expected one line user:password`);
    return {
      login: { username: line.slice(0, colon), password: line.slice(colon + 1) },
      shown: `${line.slice(0, colon)} (password ${from})`,
    };
  }
  if (!beyondLoopback) return undefined;
  const saved = dataDir === undefined ? undefined : join(dataDir, 'inbox-login');
  const password =
    saved === undefined
      ? undefined
      : await readFile(saved, 'utf8').then(
          (t) => t.trim(),
          () => undefined,
        );
  const login = { username: 'inbox', password: password || randomBytes(18).toString('base64url') };
  return {
    login,
    shown: `inbox / ${login.password}`,
    ...(saved !== undefined && !password ? { saveTo: saved } : {}),
  };
}

/** One line on standard error per refusal of the SMTP port. */
function smtpLogger(io: CliIo): EmlApiLogger {
  const line = (meta: Record<string, unknown>, message: string) => {
    const reply = typeof meta.reply === 'string' ? `: ${meta.reply}` : '';
    io.stderr.write(
      `eml-api: SMTP ${terminalText(message)}${terminalText(reply)} (client ${terminalText(String(meta.client ?? '?'))})\n`,
    );
  };
  return { debug() {}, info() {}, warn: line, error: line };
}
