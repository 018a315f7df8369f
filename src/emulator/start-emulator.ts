import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { API_SCOPES } from '../protocol/api-types.js';
import { DEFAULT_EMULATOR_ACCOUNT, resolveEmulatorOptions, type EmulatorOptions } from './emulator-options.js';
import type { DeliveredMessage, EmulatorMember, EmulatorMessage } from './state/records.js';
import { EmulatorState } from './state/emulator-state.js';
import { FaultInjector, type EmulatorFaults } from './http/fault-injector.js';
import { createRequestHandler, type ServerContext } from './http/api-router.js';
import { inboxSection } from './inbox/inbox-section.js';
import { inspectionApi } from './inbox/inspection-api.js';
import { WebAccess } from './inbox/web-access.js';
import { loadMimeParser } from './operations/send-operations.js';
import { publicPages } from './pages/public-pages.js';
import { startSmtpIngest } from './smtp-ingest.js';
import { DataDir } from './state/data-dir.js';

/**
 * A running emulator of the email service.
 * @example
 * const emu = await startEmulator();
 * // ... send through new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url })
 * expect(emu.mailbox('ann@example.test')).toHaveLength(1);
 * await emu.close();
 */
export interface Emulator {
  /** Base URL for clients on this machine, e.g. `http://127.0.0.1:39123` (loopback also when listening on every interface). */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** A ready API key holding every scope, on the `plus` plan, of the account `'default'`. */
  readonly apiKey: string;
  /**
   * The SMTP listener, when the `smtp` option asked for one (`url`: `smtp://HOST:PORT`, a host that
   * reaches it from this machine).
   * @example const { host, port, url } = emu.smtp!; // url: 'smtp://127.0.0.1:40123'
   */
  readonly smtp: { readonly host: string; readonly port: number; readonly url: string } | undefined;
  /** Accepted messages, oldest first. */
  messages(): EmulatorMessage[];
  /** Copies delivered to one address (case-insensitive), oldest first; Bcc removed. */
  mailbox(address: string): DeliveredMessage[];
  /**
   * Creates a group, as the service's dashboard would (the API never creates groups); nothing when it exists.
   * @example emu.createGroup('newsletter');
   */
  createGroup(groupId: string): void;
  /**
   * Members of a group in the order they were added, substitution keys written `{{key}}`.
   * @throws {Error} when the group does not exist
   * @example expect(emu.members('newsletter')).toEqual([{ email: 'ann@x.test', name: 'Ann', substitutions: { '{{first_name}}': 'Ann' } }]);
   */
  members(groupId: string): EmulatorMember[];
  /** Ids of the groups that exist. */
  groups(): string[];
  /** Forgets messages, mailboxes, members, hosted images and idempotency keys. Groups and API keys stay. */
  reset(): void;
  /**
   * Sets the faults injected into API requests from now on (counts start again), or removes them.
   * @example
   * emu.setFaults({ seed: 3, unavailable: 0.1 }); // from now on
   * emu.setFaults(undefined); // none
   */
  setFaults(faults: EmulatorFaults | undefined): void;
  /**
   * How many requests got each fault since the faults were set; undefined without faults.
   * @example const stats = emu.faultStats(); // { none: 180, unavailable: 12, rateLimited: 5, ... }
   */
  faultStats():
    | Record<'none' | 'unavailable' | 'rateLimited' | 'resetBeforeProcessing' | 'resetAfterProcessing', number>
    | undefined;
  /** Stops the server and drops its connections (open inbox event streams included). */
  close(): Promise<void>;
}

/**
 * Starts an emulator of the email service on a real HTTP server, with a ready all-scopes key in `apiKey`.
 * @example
 * import { startEmulator } from 'nodemailer-eml-api/emulator';
 *
 * const emu = await startEmulator({ apiKeys: [{ key: 'k-send', scopes: ['sender'] }] });
 * console.log(emu.url, emu.apiKey);
 */
export async function startEmulator(options: EmulatorOptions = {}): Promise<Emulator> {
  const resolved = resolveEmulatorOptions(options);
  // Fails here, saying what to install, rather than on the first message.
  loadMimeParser();
  const state = new EmulatorState(resolved.now, resolved.groups, resolved.maxMessages);
  let apiKey = `emu_${randomBytes(18).toString('base64url')}`;
  let dataDir: DataDir | undefined;
  if (resolved.dataDir !== undefined) {
    ({ dataDir, apiKey } = await DataDir.open(resolved.dataDir, state, apiKey, resolved.onInternalError));
    state.dataDir = dataDir.path;
  }
  state.keys.add(apiKey, API_SCOPES, 'plus', DEFAULT_EMULATOR_ACCOUNT);
  for (const key of resolved.apiKeys) state.keys.add(key.key, key.scopes, key.plan, key.account);

  // The composition root: the only place that knows which sections the site has.
  const publicHost = resolved.publicUrl === undefined ? [] : [new URL(resolved.publicUrl).hostname.toLowerCase()];
  const access = new WebAccess([...resolved.allowedHosts, ...publicHost], resolved.inboxLogin);
  const sections = [
    publicPages(state),
    inspectionApi(state, access, Date.now(), resolved.maxRequestSize),
    inboxSection(state, access),
  ];
  const context: ServerContext = {
    state,
    maxRequestSize: resolved.maxRequestSize,
    onInternalError: resolved.onInternalError,
    rateLimiter: resolved.rateLimiter,
    faults: resolved.faults,
  };
  const handleRequest = createRequestHandler(context, sections);
  const server = createServer({ maxHeaderSize: 16 * 1024, requestTimeout: 120_000 }, (req, res) => {
    handleRequest(req, res).catch((err: unknown) => {
      resolved.onInternalError(err);
      res.destroy();
    });
  });
  // A client that sends garbage instead of HTTP gets a 400 from Node; never crash.
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Same answers as Node's default handler (431 for oversized headers, else 400), without its crash-prone paths.
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    else socket.destroy();
  });
  try {
    await listen(server, resolved.port, resolved.host);
  } catch (err) {
    await dataDir?.close();
    throw err;
  }
  const address = server.address() as AddressInfo;
  const url = `http://${hostForUrl(address)}:${address.port}`;
  state.baseUrl = resolved.publicUrl ?? url;
  let closing: Promise<void> | undefined;
  const closeHttp = () =>
    new Promise<void>((resolve, reject) => {
      for (const section of sections) section.close?.();
      server.close((err) => (err ? reject(err) : resolve()));
      server.closeAllConnections();
    });
  let ingest: Awaited<ReturnType<typeof startSmtpIngest>> | undefined;
  if (resolved.smtp) {
    // The relay checks its key on start: not through the injected faults (nobody else knows the URL yet).
    const faults = context.faults;
    context.faults = undefined;
    try {
      ingest = await startSmtpIngest(resolved.smtp, state, url, apiKey, resolved.host);
    } catch (err) {
      await closeHttp();
      await dataDir?.close();
      throw err;
    } finally {
      context.faults = faults;
    }
  }

  return {
    url,
    host: address.address,
    port: address.port,
    apiKey,
    smtp: ingest?.smtp,
    messages: () => state.mail.messages(),
    mailbox: (addr: string) => state.mail.mailbox(addr),
    createGroup: (groupId: string) => {
      if (typeof groupId !== 'string' || groupId.length === 0)
        throw new TypeError('createGroup: expected a non-empty group id');
      state.groups.create(groupId);
    },
    members: (groupId: string) => {
      const members = state.groups.members(groupId);
      if (!members) throw new Error(`members: no group ${JSON.stringify(groupId)}; create it with createGroup()`);
      return members.map((m) => ({ email: m.email, name: m.name, substitutions: { ...m.substitutions } }));
    },
    groups: () => state.groups.ids(),
    reset: () => state.reset(),
    setFaults: (faults: EmulatorFaults | undefined) => {
      context.faults = faults === undefined ? undefined : new FaultInjector(faults);
    },
    faultStats: () => (context.faults ? { ...context.faults.stats } : undefined),
    close: () =>
      (closing ??= (async () => {
        // SMTP first: the messages it still hands to the API arrive before the API stops.
        await ingest?.close();
        await closeHttp();
        await dataDir?.close();
      })()),
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** A host that reaches the server from this machine: clients cannot connect to `0.0.0.0` or `::`, so loopback. */
function hostForUrl(address: AddressInfo): string {
  if (address.address === '0.0.0.0') return '127.0.0.1';
  if (address.address === '::') return '[::1]';
  return address.family === 'IPv6' ? `[${address.address}]` : address.address;
}
