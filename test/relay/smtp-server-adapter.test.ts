/**
 * The smtp-server the relay supports, and the internals src/relay/smtp-server-adapter.ts
 * touches, checked on the installed release: an upgrade that moves one fails
 * here, naming it, before a relay test fails for a reason nobody can see.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { connect as netConnect, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { afterEach, describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };
import { SUPPORTED_SMTP_SERVER, SmtpServerAdapter } from '../../src/relay/smtp-server-adapter.js';
import type { EmlApiLogger } from '../../src/shared/options-kit.js';
import { eventually } from '../helpers/async.js';
import { SmtpDialog, testTls } from './relay-harness.js';

const installed = (
  JSON.parse(readFileSync(new URL('../../node_modules/smtp-server/package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;

/** `^X.Y.Z` as [X, Y, Z]; anything else fails the test. */
function caretFloor(range: string | undefined): [number, number, number] {
  const match = /^\^(\d+)\.(\d+)\.(\d+)$/.exec(range ?? '');
  expect(match, `expected a caret range, got ${range}`).not.toBeNull();
  return [Number(match![1]), Number(match![2]), Number(match![3])];
}

function version(text: string): [number, number, number] {
  const [major, minor, patch] = text.split('-')[0]!.split('.').map(Number);
  return [major!, minor!, patch!];
}

function atLeast(a: [number, number, number], b: [number, number, number]): boolean {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i]! > b[i]!;
  return true;
}

/** What the adapter reads of an smtp-server connection. */
interface RawConnection {
  session: { envelope?: unknown; disabledCommands?: string[] };
  send(code: number, data?: unknown, context?: unknown): void;
  connectionReady(next?: () => void): void;
  _socket: Socket;
  _parser: { _write: unknown; _dataMode: boolean; isClosed: boolean } | false;
  _createParser(): unknown;
  _onCommand(command: Buffer, callback?: () => void): unknown;
  _ready: boolean;
  _handlerPending: boolean;
  _dataStream: unknown;
  _closing: boolean;
  _closed: boolean;
}

const servers: SMTPServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
});

/** A stock smtp-server on port 0; `onConnection` sees each connection right after connect(), as the adapter does. */
async function stock(
  options: SMTPServerOptions,
  onConnection: (connection: RawConnection, socket: Socket) => void = () => undefined,
): Promise<{ server: SMTPServer; port: number }> {
  const server = new SMTPServer({ logger: false, disabledCommands: ['STARTTLS'], authOptional: true, ...options });
  servers.push(server);
  // A client that leaves during its TLS handshake is an error of the server's.
  server.on('error', () => undefined);
  const connect = server.connect.bind(server);
  server.connect = (socket, socketOptions) => {
    connect(socket, socketOptions);
    const connections = [...server.connections] as unknown as RawConnection[];
    onConnection(connections.at(-1)!, socket as Socket);
  };
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.server.address() as { port: number }).port };
}

describe('the smtp-server release', () => {
  it("package.json's peer range is the adapter's, the development copy is within it, and the installed one is too", () => {
    expect(pkg.peerDependencies['smtp-server'], 'the peer range (package.json) and SUPPORTED_SMTP_SERVER').toBe(
      SUPPORTED_SMTP_SERVER,
    );
    const floor = caretFloor(SUPPORTED_SMTP_SERVER);
    const dev = caretFloor(pkg.devDependencies['smtp-server']);
    expect(dev[0], 'devDependencies smtp-server: the same major').toBe(floor[0]);
    expect(atLeast(dev, floor), 'devDependencies smtp-server: at least the supported floor').toBe(true);
    const have = version(installed);
    expect(
      have[0] === floor[0] && atLeast(have, floor),
      `smtp-server ${installed} is installed, outside ${SUPPORTED_SMTP_SERVER}`,
    ).toBe(true);
  });
});

describe(`the internals the adapter touches, on smtp-server ${installed}`, () => {
  it('SMTPServer accepts through one connection listener and keeps a socket in its TLS handshake in _pendingSockets, mapped to its TLS socket', async () => {
    const { server, port } = await stock({ ...testTls(), secure: true, disabledCommands: [] });
    expect(server.server.listeners('connection'), 'the listeners of server.server "connection"').toHaveLength(1);
    const pending = (server as unknown as { _pendingSockets: unknown })._pendingSockets;
    expect(pending, 'SMTPServer._pendingSockets').toBeInstanceOf(Map);
    const client = netConnect({ port, host: '127.0.0.1' });
    client.on('error', () => undefined);
    try {
      await eventually(() => [...(pending as Map<Socket, Socket>).values()].some((top) => top instanceof TLSSocket), {
        what: 'a raw socket in _pendingSockets mapped to its TLSSocket',
      });
    } finally {
      client.destroy();
    }
  });

  it("SMTPConnection right after connect(): last in server.connections, on the accepted socket, not ready, no envelope, with its parser, command dispatch and the greeting's hook", async () => {
    const seen: Record<string, unknown>[] = [];
    let readyCalls = 0;
    const { port } = await stock({}, (connection, socket) => {
      const parser = connection._parser;
      seen.push({
        'connection._socket is the accepted socket': connection._socket === socket,
        'connection._ready': connection._ready,
        'connection.session.envelope': connection.session.envelope,
        'connection._closing': connection._closing,
        'connection._closed': connection._closed,
        'connection._handlerPending': connection._handlerPending,
        'connection._dataStream': connection._dataStream,
        'typeof connection.connectionReady': typeof connection.connectionReady,
        'typeof connection._createParser': typeof connection._createParser,
        'typeof connection._onCommand': typeof connection._onCommand,
        'typeof connection._parser._write': parser && typeof parser._write,
        'connection._parser._dataMode': parser && parser._dataMode,
        'connection._parser.isClosed': parser && parser.isClosed,
      });
      // The greeting patch replaces it on the instance: init()'s timer must look it up there.
      const ready = connection.connectionReady;
      connection.connectionReady = (next) => {
        readyCalls++;
        ready.call(connection, next);
      };
    });
    const { dialog, greeting } = await SmtpDialog.open(port);
    dialog.close();
    expect(greeting.code).toBe(220);
    expect(seen).toEqual([
      {
        'connection._socket is the accepted socket': true,
        'connection._ready': false,
        'connection.session.envelope': undefined,
        'connection._closing': false,
        'connection._closed': false,
        'connection._handlerPending': false,
        'connection._dataStream': false,
        'typeof connection.connectionReady': 'function',
        'typeof connection._createParser': 'function',
        'typeof connection._onCommand': 'function',
        'typeof connection._parser._write': 'function',
        'connection._parser._dataMode': false,
        'connection._parser.isClosed': false,
      },
    ]);
    expect(readyCalls, "init()'s timer calls connection.connectionReady()").toBe(1);
  });

  it('SMTPConnection in a session: _onCommand gets each line, _handlerPending is set while a handler runs, _dataStream while a message arrives and is decided, _parser._dataMode while it arrives', async () => {
    let connection: RawConnection | undefined;
    const lines: string[] = [];
    const states: Record<string, unknown> = {};
    const { port } = await stock(
      {
        onMailFrom(_address, _session, callback) {
          states['connection._handlerPending in onMailFrom'] = connection!._handlerPending;
          callback();
        },
        onData(stream, _session, callback) {
          const parser = connection!._parser as { _dataMode: boolean };
          states['connection._dataStream is the stream onData gets'] = connection!._dataStream === stream;
          states['connection._parser._dataMode while the message arrives'] = parser._dataMode;
          stream.resume();
          stream.once('end', () => {
            states['connection._parser._dataMode once it arrived'] = parser._dataMode;
            states['connection._dataStream once it arrived'] = Boolean(connection!._dataStream);
            callback();
          });
        },
      },
      (raw) => {
        connection = raw;
        const onCommand = raw._onCommand;
        raw._onCommand = (command, callback) => {
          lines.push(command.toString());
          return onCommand.call(raw, command, callback);
        };
      },
    );
    const { dialog } = await SmtpDialog.open(port);
    try {
      await dialog.command('EHLO client.example');
      expect((await dialog.command('MAIL FROM:<a@example.test>')).code).toBe(250);
      expect((await dialog.command('RCPT TO:<b@example.test>')).code).toBe(250);
      expect((await dialog.data('Subject: x\r\n\r\nbody\r\n')).code).toBe(250);
    } finally {
      dialog.close();
    }
    expect(lines).toEqual(['EHLO client.example', 'MAIL FROM:<a@example.test>', 'RCPT TO:<b@example.test>', 'DATA']);
    expect(states).toEqual({
      'connection._handlerPending in onMailFrom': true,
      'connection._dataStream is the stream onData gets': true,
      'connection._parser._dataMode while the message arrives': true,
      'connection._parser._dataMode once it arrived': false,
      'connection._dataStream once it arrived': true,
    });
  });

  it('replies go through connection.send(code, text, context): a disabled AUTH as send(500, _, "AUTH"), and a handler\'s own enhanced code gets one of smtp-server\'s before it', async () => {
    const sent: unknown[][] = [];
    const { port } = await stock(
      {
        hideENHANCEDSTATUSCODES: false,
        onConnect(session, callback) {
          session.disabledCommands = ['STARTTLS', 'AUTH'];
          callback();
        },
        onRcptTo(_address, _session, callback) {
          callback(Object.assign(new Error('5.7.1 Not here'), { responseCode: 550 }));
        },
      },
      (connection) => {
        const send = connection.send.bind(connection);
        connection.send = (code, data, context) => {
          sent.push([code, data, context]);
          send(code, data, context);
        };
      },
    );
    const { dialog } = await SmtpDialog.open(port);
    try {
      await dialog.command('EHLO client.example');
      expect((await dialog.command('AUTH PLAIN AGEAYg==')).code).toBe(500);
      await dialog.command('MAIL FROM:<a@example.test>');
      const refused = await dialog.command('RCPT TO:<b@example.test>');
      // The adapter sends a text with its own code as it is: still needed while this holds.
      expect(refused.text, 'smtp-server adds an enhanced code to a handler error that has one').toMatch(
        /^\d\.\d{1,3}\.\d{1,3} 5\.7\.1 Not here$/,
      );
    } finally {
      dialog.close();
    }
    expect(sent.find(([code]) => code === 500)).toEqual([500, 'Error: command not recognized', 'AUTH']);
  });

  it("the idle timeout is the socket's (connection._socket.setTimeout), re-armed from server.options.socketTimeout after it fell while a handler ran", async () => {
    let connection: RawConnection | undefined;
    let release: (() => void) | undefined;
    const { server, port } = await stock(
      {
        socketTimeout: 60_000,
        onMailFrom(_address, _session, callback) {
          release = () => callback();
        },
      },
      (raw) => (connection = raw),
    );
    const { dialog } = await SmtpDialog.open(port);
    try {
      await dialog.command('EHLO client.example');
      dialog.write('MAIL FROM:<a@example.test>\r\n');
      await eventually(() => release !== undefined, { what: 'onMailFrom' });
      server.options.socketTimeout = 50;
      const socket = connection!._socket;
      const fell = new Promise((resolve) => socket.once('timeout', resolve));
      socket.setTimeout(50);
      await fell;
      release!();
      expect((await dialog.reply()).code).toBe(250);
      // Silent now: the timeout re-armed with 50 ms closes it, long before the 60 s it started with.
      const timeout = await dialog.reply();
      expect(timeout.code).toBe(421);
      expect(timeout.text).toMatch(/Timeout/);
    } finally {
      dialog.close();
    }
  });
});

/** A logger that keeps its warnings. */
function warnings(): { logger: EmlApiLogger; warned: { meta: Record<string, unknown>; message: string }[] } {
  const warned: { meta: Record<string, unknown>; message: string }[] = [];
  const ignore = () => undefined;
  return {
    logger: { debug: ignore, info: ignore, error: ignore, warn: (meta, message) => warned.push({ meta, message }) },
    warned,
  };
}

async function adapterServer(logger: EmlApiLogger, options: SMTPServerOptions = {}): Promise<SmtpServerAdapter> {
  const adapter = new SmtpServerAdapter(
    { logger: false, disabledCommands: ['STARTTLS'], authOptional: true, closeTimeout: 1, ...options },
    { handshakeTimeout: 10_000, authDisabledReply: { code: 538, text: '5.7.11 TLS first' }, logger },
  );
  await adapter.listen(0, '127.0.0.1');
  return adapter;
}

describe('SmtpServerAdapter', () => {
  it('watches each connection once: one refused for maxClients is not taken for the one before it; the installed release lacks nothing', async () => {
    const { logger, warned } = warnings();
    const adapter = await adapterServer(logger, { maxClients: 1 });
    let watched = 0;
    adapter.watchConnections(() => {
      watched++;
      return { commandBytes: () => undefined, command: () => undefined, reply: () => undefined };
    });
    const { port } = adapter.address();
    const first = await SmtpDialog.open(port);
    const second = await SmtpDialog.open(port);
    try {
      expect(first.greeting.code).toBe(220);
      expect(second.greeting.code).toBe(421);
      expect(watched).toBe(1);
      expect(adapter.connectionCount).toBe(1);
      expect(warned).toEqual([]);
    } finally {
      first.dialog.close();
      second.dialog.close();
      await adapter.close();
    }
  });

  it('says once which internal a release lacks (here _onCommand), and still greets without it', async () => {
    // A release without SMTPConnection._onCommand cannot be installed here: it is taken off the prototype
    // of the copy the adapter loads (CommonJS), for this test only.
    const { SMTPConnection } = createRequire(import.meta.url)('smtp-server/lib/smtp-connection.js') as {
      SMTPConnection: { prototype: Record<string, unknown> };
    };
    const onCommand = SMTPConnection.prototype._onCommand;
    const { logger, warned } = warnings();
    const adapter = await adapterServer(logger);
    const { port } = adapter.address();
    try {
      delete SMTPConnection.prototype._onCommand;
      const first = await SmtpDialog.open(port);
      const second = await SmtpDialog.open(port);
      first.dialog.close();
      second.dialog.close();
    } finally {
      SMTPConnection.prototype._onCommand = onCommand;
      await adapter.close();
    }
    expect(warned).toEqual([
      {
        meta: { missing: '_onCommand (MAIL and RCPT as written, command deadlines)', supported: SUPPORTED_SMTP_SERVER },
        message: "smtp-server lacks internals the relay patches: it keeps smtp-server's own behaviour there",
      },
    ]);
  });
});
