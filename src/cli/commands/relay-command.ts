import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createSecureContext } from 'node:tls';
import { parseArgs } from 'node:util';
import { EmlApiError } from '../../shared/eml-api-error.js';
import { isMissingPeer, type EmlApiLogger } from '../../shared/options-kit.js';
import { loadSmtpServer } from '../../relay/smtp-server-adapter.js';
import { startEmlApiRelay } from '../../relay/start-smtp-relay.js';
import type { EmlApiRelayOptions } from '../../relay/relay-options.js';
import { hashRelayPassword, keyFingerprint, parseUsersFile, type EmlApiRelayUser } from '../../relay/relay-users.js';
import { parseKeySendersFile, splitSenders } from '../../relay/sender-lists.js';
import { readAll, type CliIo, stopSignals, EXIT, UsageError, wholeFlag, terminalText } from '../cli-io.js';
import {
  outboxEncryption,
  OUTBOX_KEYS_HELP,
  redisConnection,
  isJsonIo,
  jsonIo,
  OPERATIONS_ARG_OPTIONS,
  operationsHelp,
  operationsOptions,
} from '../lib/ops-flags.js';
import type { EmlApiQueueTransportOptions } from '../../queue/queue-transport-options.js';
import type { OutboxClusterConnection } from '../../queue/redis-connection.js';
import { OUTBOX_DURABILITIES, redisPassword, type OutboxDurability } from '../../queue/redis-settings.js';
import { GroupStartError, groupRole, processesFlag, PROCESSES_HELP } from '../lib/process-group.js';
import { runRelayProcess, startRelayGroup } from '../lib/relay-group.js';

/** Help of `eml-api relay`. */
export const RELAY_HELP = `Usage: eml-api relay [options]

Runs an SMTP server that hands every message it accepts to the email service
(POST /v1/send/eml), or with --outbox to the outbox, for senders that still
speak SMTP (Postfix, PHP, Django, Rails, cron...). It answers 250 only once
the service accepted the message (with --outbox, once Redis stored it), 451
when the failure is transient (the client retries), 5xx when the message can
never be sent as it is. Runs until interrupted (Ctrl-C or SIGTERM), then
lets the messages it received finish (one still arriving gets 421, and its
sender retries).

Without a key, each client authenticates with its own API key as the SMTP
password (any user name). With --key (or EML_API_KEY), clients on --allow
(loopback by default) and the users of --users send with that key. In
store-and-forward (--outbox), AUTH accepts only the --users and the relay's
own key. AUTH is offered over TLS, or from --trusted networks (loopback by
default), only.

Options:
  --port <n>              port to listen on (default 2525; 0 picks a free one)
  --host <host>           interface to listen on (default 127.0.0.1)
  --url <url>             base URL of the service (or EML_API_URL)
  --key <key>             the relay's own API key (or EML_API_KEY; prefer the variable: flags show in ps)
  --allow <cidr|none>     client addresses that may send without AUTH, with the relay's key (repeatable;
                          default 127.0.0.0/8 and ::1; none: every client AUTHs; or EML_API_RELAY_ALLOW,
                          comma-separated)
  --trusted <cidr|none>   networks whose clients may AUTH without TLS and are exempt from the per-address
                          limits, e.g. a sidecar's 127.0.0.6 (repeatable; default 127.0.0.0/8 and ::1;
                          none: no client, loopback included; or EML_API_RELAY_TRUSTED, comma-separated)
  --proxy-protocol <ip>   a proxy in front of the relay that sends a PROXY v1 header (HAProxy send-proxy,
                          stunnel protocol = proxy): clients are known by the address in it (repeatable)
  --users <file>          the relay's own SMTP users, one name:hash per line; they send with the relay's key.
                          name:hash:senders lets the user send only as those addresses and domains
                          (billing:$scrypt$...:billing@shop.example, *@billing.shop.example)
  --hash-password         print the hash of the password read from standard input (for --users), and exit
  --allow-senders <addr>  the senders clients on --allow may use (repeatable: an address, *@domain,
                          *@*.domain for its subdomains, <> for an empty MAIL FROM; or
                          EML_API_RELAY_ALLOW_SENDERS, comma-separated); default any
  --key-senders <file>    the senders of API keys given as AUTH passwords, one key:<fingerprint>:senders
                          line per key (its login as logged); a key not listed sends as any address
  --key-login             print the login (key:<fingerprint>) of the API key read from standard input,
                          and exit
  --tls-cert <file>       PEM certificate: offers STARTTLS (with --tls-key)
  --tls-key <file>        PEM private key
  --tls-implicit          TLS from the first byte (as on port 465) instead of STARTTLS
  --tls-handshake-timeout <s>
                          seconds an implicit TLS client has for its handshake (default 10)
  --max-size <bytes>      largest message, advertised as SIZE (default 39244983: fits a 50 MiB request
                          with a Bcc field for every recipient)
  --max-recipients <n>    recipients per message (default 100)
  --max-clients <n>       SMTP connections at once (default 100)
  --max-clients-per-address <n>
                          connections at once from one client address, IPv6 per /64; --trusted exempt
                          (default 50, Postfix's smtpd_client_connection_count_limit)
  --idle-timeout <s>      seconds a client may stay silent (default 300)
  --stress-idle-timeout <s>
                          the same from 80% of --max-clients on (default 10, Postfix's stress mode)
  --data-timeout <s>      seconds a message may take to arrive after DATA (default 600)
  --min-data-rate <n>     bytes a second a message must arrive at, at least (default 500)
  --auth-failure-delay <s>
                          seconds before the reply to a failed AUTH (default 2)
  --max-auth-failures <n> failed AUTHs of one user name from one client address within
                          --auth-failure-window, then its wrong passwords get 454 (its right one still
                          235); the same wrong password again counts once; --trusted exempt (default 10)
  --max-auth-failures-per-address <n>
                          failed AUTHs of one client address, all names together, then every AUTH of it
                          gets 454 unchecked (a guessing storm; default 100)
  --auth-failure-window <s>
                          seconds (default 600)
  --outbox                store-and-forward through the outbox in the Redis of REDIS_URL (comma-
                          separated URLs: a Redis Cluster's nodes): 250 once stored, sent by
                          \`eml-api worker\` processes (needs the relay's own key). Without it the
                          relay uploads each message itself, REDIS_URL or not
  --redis <url>           the same, in this Redis (prefer REDIS_URL and --outbox: flags show in ps);
                          repeated, the nodes of a Redis Cluster
  --redis-cluster         the Redis URL is a node of a Redis Cluster (several URLs say so already);
                          the prefix then needs a hash tag, e.g. --prefix '{eml-api}'
  --replicas <n>          with the outbox: 250 only once n replicas of Redis hold the message (WAIT);
                          when fewer confirm in time, 451 (the sender retries, stored once)
  --replicas-timeout <ms> how long to wait for them (default 1000)
  --durability <level>    with the outbox, what Redis must keep before a 250: warn (the default: any
                          persistence, a warning without the append-only file), aof (refuses to start
                          without appendonly yes), aof-always (also appendfsync always: every message
                          on disk before its 250, as Postfix fsyncs)
  --queue <name>          the outbox's queue name (default eml-api)
  --prefix <prefix>       the outbox's Redis key prefix (default bull)
  --allow-insecure-http   allow http:// to a non-loopback service (keys cross the network in clear)
${PROCESSES_HELP}${operationsHelp('the messages in flight (arriving or being handed on)')}  --quiet                 log refusals and errors only, not every accepted message
  -h, --help              show this help

With the outbox, REDIS_PASSWORD is the password of its Redis (every node's) when the URLs give
none: a password in a flag shows in ps to every user of the machine.
${OUTBOX_KEYS_HELP}
On SIGTERM it stops taking connections and transactions (421), lets the messages in flight
finish within --grace, then (or on a second signal) gives up the ones left (421 or 451: their
senders retry) and exits.
Exit codes: 0 stopped, every message in flight finished; 1 could not start (port in use, key
refused, a URL that is not the service's, Redis that evicts...); 2 wrong usage; 4 stopped when
--grace ran out (or on a second signal), messages given up.
`;

/** `eml-api relay`: runs the SMTP relay until SIGINT/SIGTERM (or `io.signal`). */
export async function relayCommand(args: string[], io: CliIo): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      port: { type: 'string', default: '2525' },
      host: { type: 'string', default: '127.0.0.1' },
      url: { type: 'string' },
      key: { type: 'string' },
      allow: { type: 'string', multiple: true },
      trusted: { type: 'string', multiple: true },
      'proxy-protocol': { type: 'string', multiple: true },
      users: { type: 'string' },
      'hash-password': { type: 'boolean' },
      'allow-senders': { type: 'string', multiple: true },
      'key-senders': { type: 'string' },
      'key-login': { type: 'boolean' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      'tls-implicit': { type: 'boolean' },
      'tls-handshake-timeout': { type: 'string' },
      'max-size': { type: 'string' },
      'max-recipients': { type: 'string' },
      'max-clients': { type: 'string' },
      'max-clients-per-address': { type: 'string' },
      'idle-timeout': { type: 'string' },
      'stress-idle-timeout': { type: 'string' },
      'data-timeout': { type: 'string' },
      'min-data-rate': { type: 'string' },
      'auth-failure-delay': { type: 'string' },
      'max-auth-failures': { type: 'string' },
      'max-auth-failures-per-address': { type: 'string' },
      'auth-failure-window': { type: 'string' },
      outbox: { type: 'boolean' },
      redis: { type: 'string', multiple: true },
      'redis-cluster': { type: 'boolean' },
      replicas: { type: 'string' },
      'replicas-timeout': { type: 'string' },
      durability: { type: 'string' },
      queue: { type: 'string' },
      prefix: { type: 'string' },
      'allow-insecure-http': { type: 'boolean' },
      quiet: { type: 'boolean' },
      processes: { type: 'string' },
      ...OPERATIONS_ARG_OPTIONS,
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    io.stdout.write(RELAY_HELP);
    return EXIT.ok;
  }
  if (values['hash-password']) return hashPassword(io);
  if (values['key-login']) return keyLogin(io);
  // Says what to install (exit 1) when the optional peer is missing, before anything else.
  loadSmtpServer();
  const operations = operationsOptions(values, 'eml-api relay --http-port');
  // In JSON mode every line it prints is a JSON object, its parts' logs included.
  if (operations.logFormat === 'json') io = jsonIo(io, [values.key ?? io.env.EML_API_KEY ?? ''].filter(Boolean));
  const baseUrl = values.url ?? io.env.EML_API_URL;
  if (!baseUrl) throw new UsageError('no service URL: pass --url or set EML_API_URL');
  const apiKey = values.key ?? io.env.EML_API_KEY;
  if ((values['tls-cert'] === undefined) !== (values['tls-key'] === undefined))
    throw new UsageError('--tls-cert and --tls-key go together');
  if (values['tls-implicit'] && values['tls-cert'] === undefined)
    throw new UsageError('--tls-implicit needs --tls-cert and --tls-key');
  const allow = networksFlag(values.allow, io.env.EML_API_RELAY_ALLOW, '--allow');
  const trusted = networksFlag(values.trusted, io.env.EML_API_RELAY_TRUSTED, '--trusted');
  if (allow !== undefined && allow.length > 0 && !apiKey)
    throw new UsageError(
      "--allow needs the relay's own key (--key or EML_API_KEY): clients that do not AUTH send with it",
    );
  const redis = outboxRedis(values, io);
  const options: EmlApiRelayOptions = {
    baseUrl,
    port: wholeFlag(values.port, '--port', 0, 65535),
    host: values.host,
    allowInsecureHttp: values['allow-insecure-http'] ?? false,
    ...(operations.http ? { http: operations.http } : {}),
    ...(operations.metrics === false ? { metrics: false } : {}),
    logger: lineLogger(io, values.quiet ?? false),
    ...(apiKey ? { apiKey } : {}),
    ...(allow ? { allowUnauthenticatedFrom: allow } : {}),
    ...(trusted ? { trustedNetworks: trusted } : {}),
    ...(values['proxy-protocol'] ? { proxyProtocol: values['proxy-protocol'] } : {}),
    ...(values.users !== undefined ? { users: await readUsers(values.users) } : {}),
    ...optional('allowedSenders', allowSenders(values['allow-senders'], io.env.EML_API_RELAY_ALLOW_SENDERS)),
    ...(values['key-senders'] !== undefined ? { keySenders: await readKeySenders(values['key-senders']) } : {}),
    ...(values['max-size'] ? { maxMessageSize: wholeFlag(values['max-size'], '--max-size', 1, 2 ** 40) } : {}),
    ...(values['max-recipients']
      ? { maxRecipients: wholeFlag(values['max-recipients'], '--max-recipients', 1, 100_000) }
      : {}),
    ...(values['max-clients'] ? { maxClients: wholeFlag(values['max-clients'], '--max-clients', 1, 100_000) } : {}),
    ...limitOptions(values),
    ...(redis !== undefined
      ? {
          queue: {
            connection: redis,
            ...replicasOption(values),
            ...optional('durability', durabilityFlag(values.durability)),
            ...optional('encryption', outboxEncryption(io.env)),
            ...(values.queue === undefined ? {} : { queueName: values.queue }),
            ...(values.prefix === undefined ? {} : { prefix: values.prefix }),
          },
        }
      : {}),
  };
  if (values['tls-cert'] && values['tls-key']) {
    const cert = await readPem(values['tls-cert'], '--tls-cert');
    const key = await readPem(values['tls-key'], '--tls-key');
    try {
      // OpenSSL takes a key of another type than the certificate's, and STARTTLS would then fail for every client.
      if (!new X509Certificate(cert).checkPrivateKey(createPrivateKey(key))) throw new Error('another key pair');
      createSecureContext({ cert, key });
    } catch (err) {
      throw new UsageError(
        `--tls-key ${values['tls-key']} does not match --tls-cert ${values['tls-cert']}, or one of them is not a PEM ` +
          `certificate or key (${(err as Error).message})`,
      );
    }
    options.tls = { cert, key, implicit: values['tls-implicit'] ?? false };
  }
  const processes = processesFlag(values.processes);
  const secrets = [apiKey, redisPassword(redis)];
  const member = groupRole(io.env) === 'relay';
  // A stop sent as soon as it says it listens is a clean stop.
  const stop = member ? undefined : stopSignals(io.signal);
  let relay;
  try {
    if (member) return await runRelayProcess(options, operations.grace, io, secrets);
    relay =
      processes === undefined
        ? await startEmlApiRelay(options)
        : await startRelayGroup(options, processes, operations.grace, io, secrets);
  } catch (err) {
    stop?.dispose();
    if (err instanceof GroupStartError) return err.exitCode;
    // A bad option is a usage mistake; a port in use or a refused key is a failure to start.
    if (
      err instanceof EmlApiError &&
      err.code === 'ECONFIG' &&
      !listenFailure(err) &&
      !redisSetting(err) &&
      !isMissingPeer(err)
    ) {
      throw new UsageError(err.message);
    }
    throw err;
  }
  const tls = options.tls ? (options.tls.implicit ? ', implicit TLS' : ', STARTTLS') : '';
  const group = processes === undefined ? '' : ` (${processes} processes)`;
  io.stdout.write(`SMTP relay listening on ${relay.host}:${relay.port}${tls}${group}, forwarding to ${baseUrl}\n`);
  io.stdout.write(
    redis === undefined
      ? 'Mode: direct, each message is uploaded to the service before its 250\n'
      : `Mode: store-and-forward, each message is stored in the outbox at ${withoutCredentials(redis)} (queue ${
          values.queue ?? 'eml-api'
        }) before its 250; \`eml-api worker\` sends it\n`,
  );
  io.stdout.write(`${whoSends(apiKey !== undefined, allow ?? ['127.0.0.0/8', '::1'], options)}\n`);
  if (relay.http) {
    io.stdout.write(
      `Health and metrics on http://${relay.http.host}:${relay.http.port} (/healthz, /readyz, /metrics)\n`,
    );
  }
  await stop!.first;
  io.stdout.write(
    `Stopping: letting the messages in progress finish (up to ${operations.grace / 1000} s; signal again to stop at once)\n`,
  );
  let atOnce = false;
  void stop!.second.then(() => {
    atOnce = true;
    io.stdout.write('Stopping at once: giving up the messages in flight (their senders retry)\n');
    return relay.close({ abort: true });
  });
  const { givenUp } = await relay.close({ grace: operations.grace }).finally(() => stop!.done());
  if (givenUp > 0) {
    io.stdout.write(
      `SMTP relay stopped${atOnce ? ' at once:' : ': the grace period ran out,'} ${givenUp} message(s) in flight given up (their senders retry)\n`,
    );
    return EXIT.cutShort;
  }
  io.stdout.write('SMTP relay stopped\n');
  return EXIT.ok;
}

/** The startup line saying who sends, and with which key. */
function whoSends(hasKey: boolean, allowed: string[], options: EmlApiRelayOptions): string {
  if (!hasKey) return 'Clients AUTH with their own API key as the password (any user name)';
  const users = options.users ? `the ${options.users.length} user(s) of --users send with it after AUTH; ` : '';
  const others = options.queue
    ? "AUTH accepts only the relay's users and its own key (the outbox's workers send)"
    : 'others AUTH with their own API key as the password';
  return allowed.length > 0
    ? `Clients on ${allowed.join(', ')} send without AUTH, with the relay's key; ${users}${others}`
    : `No client sends without AUTH; ${users}${others}`;
}

/**
 * The outbox's Redis for store-and-forward, or undefined to run direct. REDIS_URL alone does not switch
 * to store-and-forward (it may be set for other programs, and answering 250 once Redis holds a message
 * needs workers): the operator says so with `--redis` or `--outbox`.
 */
function outboxRedis(
  values: {
    outbox?: boolean;
    redis?: string[];
    'redis-cluster'?: boolean;
    replicas?: string;
    'replicas-timeout'?: string;
    durability?: string;
    queue?: string;
    prefix?: string;
  },
  io: CliIo,
): string | OutboxClusterConnection | undefined {
  if (!values.outbox && values.redis === undefined) {
    for (const flag of ['redis-cluster', 'replicas', 'replicas-timeout', 'durability', 'queue', 'prefix'] as const) {
      if (values[flag] !== undefined) {
        throw new UsageError(`--${flag} goes with the outbox: pass --outbox (with REDIS_URL) or --redis`);
      }
    }
    if (io.env.REDIS_URL) {
      io.stderr.write(
        'note: REDIS_URL is set, but the relay runs direct (each message uploaded before its 250); pass --outbox to store messages in that Redis\n',
      );
    }
    return undefined;
  }
  if (values.outbox && values.redis === undefined && !io.env.REDIS_URL) {
    throw new UsageError('--outbox needs a Redis: set REDIS_URL (or pass --redis)');
  }
  const { connection, warning } = redisConnection(values, io.env);
  if (warning) io.stderr.write(`warning: ${warning}\n`);
  return connection;
}

/** `--allow` or `--trusted` (repeated), else its environment variable: `[]` for `none`, undefined for the default (loopback). */
function networksFlag(values: string[] | undefined, env: string | undefined, flag: string): string[] | undefined {
  const entries =
    values ??
    env
      ?.split(',')
      .map((entry) => entry.trim())
      .filter(Boolean);
  if (entries === undefined || entries.length === 0) return undefined;
  if (!entries.includes('none')) return entries;
  if (entries.length > 1) throw new UsageError(`${flag} none goes alone: it empties the list`);
  return [];
}

function replicasOption(values: {
  replicas?: string;
  'replicas-timeout'?: string;
}): Pick<EmlApiQueueTransportOptions, 'replicas'> {
  if (values.replicas === undefined) {
    if (values['replicas-timeout'] !== undefined) throw new UsageError('--replicas-timeout goes with --replicas');
    return {};
  }
  const count = wholeFlag(values.replicas, '--replicas', 1, 100);
  const timeout = values['replicas-timeout'];
  return {
    replicas: {
      count,
      ...(timeout === undefined ? {} : { timeoutMs: wholeFlag(timeout, '--replicas-timeout', 1, 3_600_000) }),
    },
  };
}

function durabilityFlag(value: string | undefined): OutboxDurability | undefined {
  if (value === undefined) return undefined;
  if (!(OUTBOX_DURABILITIES as readonly string[]).includes(value)) {
    throw new UsageError(`--durability: expected ${OUTBOX_DURABILITIES.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as OutboxDurability;
}

/** For the startup line. */
function withoutCredentials(connection: string | OutboxClusterConnection): string {
  const urls = typeof connection === 'string' ? [connection] : connection.cluster;
  const shown = urls.map((url) => {
    try {
      const parsed = new URL(url);
      parsed.username = '';
      parsed.password = '';
      return parsed.toString().replace(/\/$/, '');
    } catch {
      return 'the Redis given';
    }
  });
  return typeof connection === 'string' ? shown[0]! : `the Redis Cluster of ${shown.join(', ')}`;
}

/** Seconds become milliseconds. */
function limitOptions(values: Record<string, string | boolean | string[] | undefined>): Partial<EmlApiRelayOptions> {
  const flag = (name: string) => values[name] as string | undefined;
  const options: Partial<EmlApiRelayOptions> = {};
  const count = (
    name: string,
    option: 'maxClientsPerAddress' | 'minDataRate' | 'maxAuthFailures' | 'maxAuthFailuresPerAddress',
  ) => {
    const value = flag(name);
    if (value !== undefined) options[option] = wholeFlag(value, `--${name}`, 1, 1_000_000_000);
  };
  const seconds = (name: string, option: 'authFailureDelay' | 'authFailureWindow', min: number, max: number) => {
    const value = flag(name);
    if (value !== undefined) options[option] = wholeFlag(value, `--${name}`, min, max) * 1000;
  };
  const timeout = (name: string, field: 'idle' | 'stressIdle' | 'data' | 'tlsHandshake', max: number) => {
    const value = flag(name);
    if (value !== undefined)
      options.timeouts = { ...options.timeouts, [field]: wholeFlag(value, `--${name}`, 1, max) * 1000 };
  };
  count('max-clients-per-address', 'maxClientsPerAddress');
  count('min-data-rate', 'minDataRate');
  count('max-auth-failures', 'maxAuthFailures');
  count('max-auth-failures-per-address', 'maxAuthFailuresPerAddress');
  timeout('idle-timeout', 'idle', 86_400);
  timeout('stress-idle-timeout', 'stressIdle', 86_400);
  timeout('data-timeout', 'data', 604_800);
  seconds('auth-failure-delay', 'authFailureDelay', 0, 60);
  seconds('auth-failure-window', 'authFailureWindow', 1, 86_400);
  timeout('tls-handshake-timeout', 'tlsHandshake', 600);
  return options;
}

/** Accepted messages to standard output, the rest to standard error. */
function lineLogger(io: CliIo, quiet: boolean): EmlApiLogger {
  if (isJsonIo(io)) return io.jsonLogger;
  // Values may quote the service or an SMTP client.
  const line = (meta: Record<string, unknown>, message: string) =>
    `${new Date().toISOString()} ${terminalText(message)}${Object.entries(meta)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => ` ${k}=${terminalText(typeof v === 'string' && /\s/.test(v) ? JSON.stringify(v) : String(v))}`)
      .join('')}\n`;
  return {
    debug: () => {},
    info: (meta, message) => {
      if (!quiet && message === 'Message accepted') io.stdout.write(line(meta, message));
    },
    warn: (meta, message) => io.stderr.write(line(meta, `WARN ${message}`)),
    error: (meta, message) => io.stderr.write(line(meta, `ERROR ${message}`)),
  };
}

/** `--hash-password`: read from standard input, as a flag would show in `ps` and shell history. */
async function hashPassword(io: CliIo): Promise<number> {
  const password = (await readAll(io.stdin)).toString('utf8').replace(/\r?\n$/, '');
  if (password === '') throw new UsageError('--hash-password reads the password from standard input, and got none');
  io.stdout.write(`${await hashRelayPassword(password)}\n`);
  return EXIT.ok;
}

/** `--key-login`: the key is read from standard input. */
async function keyLogin(io: CliIo): Promise<number> {
  const key = (await readAll(io.stdin)).toString('utf8').replace(/\r?\n$/, '');
  if (key === '') throw new UsageError('--key-login reads the API key from standard input, and got none');
  io.stdout.write(`key:${keyFingerprint(key)}\n`);
  return EXIT.ok;
}

/** `--allow-senders` (repeated, each maybe comma-separated), else its environment variable. */
function allowSenders(values: string[] | undefined, env: string | undefined): string[] | undefined {
  const entries = (values ?? (env === undefined ? [] : [env])).flatMap(splitSenders);
  return entries.length === 0 ? undefined : entries;
}

/** `--users <file>`: `name:hash` or `name:hash:senders` lines. */
function readUsers(path: string): Promise<EmlApiRelayUser[]> {
  return readListFile(path, '--users', parseUsersFile);
}

/** `--key-senders <file>`: `key:<fingerprint>:senders` lines. */
function readKeySenders(path: string): Promise<Record<string, string[]>> {
  return readListFile(path, '--key-senders', parseKeySendersFile);
}

async function readListFile<T>(path: string, flag: string, parse: (text: string, source: string) => T): Promise<T> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsageError(`${flag}: cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    return parse(text, `${flag} ${path}`);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

function listenFailure(err: EmlApiError): boolean {
  // A process of `--processes` gets the primary's failure to bind the shared port.
  const syscall = (err.cause as NodeJS.ErrnoException | undefined)?.syscall;
  return syscall === 'listen' || syscall === 'bind';
}

/** A refusal of the outbox's Redis (its eviction policy, its persistence): a failure to start, not a usage mistake. */
function redisSetting(err: EmlApiError): boolean {
  return err.command?.startsWith('CONFIG GET ') === true;
}

async function readPem(path: string, flag: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new UsageError(`${flag}: cannot read ${path}: ${(err as Error).message}`);
  }
}

function optional<K extends string, V>(name: K, value: V | undefined): { [P in K]?: V } {
  return value === undefined ? {} : ({ [name]: value } as { [P in K]?: V });
}
