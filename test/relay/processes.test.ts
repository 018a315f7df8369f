/**
 * `eml-api relay --processes 2`: real processes (the CLI, node:cluster), real
 * SMTP sessions. Which process holds a connection is read from the kernel
 * (/proc), so that the tests know their connections are spread over both
 * processes: per-client limits and AUTH budgets hold across them, /metrics
 * sums them, a killed process is replaced with nothing acknowledged lost,
 * and SIGTERM drains both.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashRelayPassword } from '../../src/relay/relay-users.js';
import { eventually } from '../helpers/async.js';
import { childPids, holderOf as holdingPid } from '../helpers/processes.js';
import { promtoolMissing, promtoolProblems } from '../helpers/telemetry.js';
import { SmtpDialog, TEST_CERT, TEST_KEY } from './relay-harness.js';
import { nodeArgs } from '../helpers/compiled.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const KEY = 'relay-key-0000000000000000';

/**
 * The service: answers the key check (an empty send) with 400, every message with 202 after
 * noting its Message-ID, or holds the messages while `holding`.
 */
interface Service {
  url: string;
  /** Message-IDs the service answered 202. */
  accepted: Set<string>;
  holding: boolean;
  held: { res: ServerResponse; messageId: string }[];
  /** The Idempotency-Key of every message sent. */
  keys: string[];
  /** Breaks the connection of every message sent while set, once it has been read: the relay cannot tell the outcome. */
  resetting: boolean;
  /** Holds the key checks (the empty sends) while set: a process starting waits on its own. */
  holdingChecks: boolean;
  heldChecks: ServerResponse[];
  release(): void;
  close(): Promise<void>;
}

async function startService(): Promise<Service> {
  const service: Service = {
    url: '',
    accepted: new Set(),
    holding: false,
    held: [],
    keys: [],
    resetting: false,
    holdingChecks: false,
    heldChecks: [],
    release() {
      for (const { res, messageId } of this.held.splice(0)) answer(res, messageId);
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  const answer = (res: ServerResponse, messageId: string) => {
    if (res.destroyed) return;
    service.accepted.add(messageId);
    res.writeHead(202, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: `id-${messageId}`, messageId, recipients: 1 }));
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString();
      const b64 = /"([A-Za-z0-9+/=]{40,})"/.exec(text)?.[1];
      if (!b64 && service.holdingChecks) {
        service.heldChecks.push(res);
        return;
      }
      if (!b64) {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { code: 'invalid_request', message: 'no eml' } }));
        return;
      }
      service.keys.push(String(req.headers['idempotency-key']));
      if (service.resetting) {
        req.socket.destroy();
        return;
      }
      const messageId = /^Message-ID: <([^>]+)>/im.exec(Buffer.from(b64, 'base64').toString())?.[1] ?? '?';
      if (service.holding) service.held.push({ res, messageId });
      else answer(res, messageId);
    });
  });
  server.keepAliveTimeout = 500;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  service.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return service;
}

let service: Service;
let dir: string;
let relay: ChildProcess;
let output = '';
let port: number;
let opsPort: number;
const dialogs: SmtpDialog[] = [];
/** Message-IDs the relay answered 250. */
const acknowledged = new Set<string>();

beforeAll(async () => {
  service = await startService();
  dir = mkdtempSync(join(tmpdir(), 'relay-processes-'));
  const users = join(dir, 'users');
  writeFileSync(users, `app:${await hashRelayPassword('right-password')}\n`);
  relay = spawn(
    process.execPath,
    nodeArgs([
      '--import',
      'tsx',
      'src/cli/main.ts',
      'relay',
      '--processes',
      '2',
      '--port',
      '0',
      '--http-port',
      '0',
      '--url',
      service.url,
      '--tls-cert',
      TEST_CERT,
      '--tls-key',
      TEST_KEY,
      // Loopback is counted as any client here: by default it is exempt from the per-address limits.
      '--trusted',
      'none',
      '--users',
      users,
      '--max-clients-per-address',
      '3',
      '--max-auth-failures-per-address',
      '2',
      '--auth-failure-delay',
      '0',
      '--grace',
      '20',
    ]),
    { cwd: ROOT, env: { ...process.env, EML_API_KEY: KEY }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  relay.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  relay.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await eventually(() => /Health and metrics on/.test(output), { timeout: 30_000, what: () => output });
  port = Number(/listening on 127\.0\.0\.1:(\d+), STARTTLS \(2 processes\)/.exec(output)![1]);
  opsPort = Number(/Health and metrics on http:\/\/127\.0\.0\.1:(\d+)/.exec(output)![1]);
}, 60_000);

afterAll(async () => {
  for (const dialog of dialogs.splice(0)) dialog.close();
  if (relay && relay.exitCode === null && relay.signalCode === null) {
    for (const pid of workerPids()) process.kill(pid, 'SIGKILL');
    relay.kill('SIGKILL');
  }
  await service?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The relay's processes (the primary's children running the CLI; tsx has an esbuild child too). */
function workerPids(): number[] {
  return childPids(relay.pid!, 'src/cli/main.');
}

/** The pid of the process that holds the relay's side of a client's connection. */
function holderOf(dialog: SmtpDialog): number {
  return holdingPid(workerPids(), port, dialog.localPort!);
}

async function open(): Promise<{ dialog: SmtpDialog; greeting: { code: number; text: string } }> {
  const opened = await SmtpDialog.open(port);
  dialogs.push(opened.dialog);
  return opened;
}

/** Opens a connection once the slots of closed ones are given back (the primary hears of it a moment later). */
async function admitted(): Promise<SmtpDialog> {
  let dialog: SmtpDialog | undefined;
  await eventually(async () => {
    const opened = await open();
    if (opened.greeting.code === 220) dialog = opened.dialog;
    else opened.dialog.close();
    return dialog !== undefined;
  });
  return dialog!;
}

/**
 * An admitted connection on each process. The primary hands connections to the processes in turn, but a connection
 * {@link admitted} retried (a slot not yet given back) takes a turn too.
 */
async function onBothProcesses(): Promise<SmtpDialog[]> {
  const byPid = new Map<number, SmtpDialog>();
  for (let tries = 0; byPid.size < 2; tries++) {
    if (tries === 20) throw new Error(`20 connections all went to process ${[...byPid.keys()].join()}`);
    const dialog = await admitted();
    const pid = holderOf(dialog);
    if (byPid.has(pid)) dialog.close();
    else byPid.set(pid, dialog);
  }
  return [...byPid.values()];
}

async function send(dialog: SmtpDialog, messageId: string): Promise<number> {
  await dialog.command('EHLO client.example');
  expect((await dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(250);
  expect((await dialog.command('RCPT TO:<ops@example.test>')).code).toBe(250);
  const reply = await dialog.data(
    `From: cron@example.test\r\nTo: ops@example.test\r\nSubject: s\r\nMessage-ID: <${messageId}>\r\n\r\nbody\r\n`,
  );
  if (reply.code === 250) acknowledged.add(messageId);
  return reply.code;
}

async function ops(path: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${opsPort}${path}`);
  return { status: res.status, text: await res.text() };
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => !l.startsWith('#') && l.startsWith(name));
  return line === undefined ? NaN : Number(line.split(' ').at(-1));
}

function closeAll(): void {
  for (const dialog of dialogs.splice(0)) dialog.close();
}

describe('eml-api relay --processes 2', () => {
  it('spreads connections over both processes; /metrics sums them', async () => {
    expect(workerPids()).toHaveLength(2);
    const [first, second] = await onBothProcesses();
    expect(new Set([holderOf(first!), holderOf(second!)])).toEqual(new Set(workerPids()));
    expect(await send(first!, 'm1@example.test')).toBe(250);
    expect(await send(second!, 'm2@example.test')).toBe(250);
    const { status, text } = await ops('/metrics');
    expect(status).toBe(200);
    expect(metric(text, 'eml_api_relay_messages_total{outcome="accepted",code="250"}')).toBe(2);
    expect(metric(text, 'eml_api_relay_connections')).toBe(2);
    expect(metric(text, 'eml_api_processes{component="relay"}')).toBe(2);
    expect(metric(text, 'eml_api_build_info{version')).toBe(1);
    if (!promtoolMissing) expect(promtoolProblems(text)).toBe('');
    closeAll();
  });

  it('counts the connections of a client address across processes: the fourth gets 421', async () => {
    const held = [...(await onBothProcesses()), await admitted()];
    // Neither process holds three alone: only a count shared between them refuses the fourth.
    expect(new Set(held.map(holderOf)).size).toBe(2);
    const fourth = await open();
    expect(fourth.greeting.code).toBe(421);
    expect(fourth.greeting.text).toMatch(/^4\.7\.0 Too many connections from your address \(at most 3\)/);
    held[0]!.close();
    // Its slot is given back: another connection is admitted.
    await admitted();
    closeAll();
  });

  it('counts failed AUTHs of a client address across processes: the same password once, the third other gets 454', async () => {
    const auth = async (dialog: SmtpDialog, password: string) => {
      await dialog.command('EHLO client.example');
      expect((await dialog.starttls()).code).toBe(220);
      await dialog.command('EHLO client.example');
      return (await dialog.command(`AUTH PLAIN ${Buffer.from(`\0app\0${password}`).toString('base64')}`)).code;
    };
    // The same wrong password on both processes (a sender's queue retrying a stale one) counts once.
    const both = await onBothProcesses();
    expect(new Set(both.map(holderOf)).size).toBe(2);
    expect([await auth(both[0]!, 'stale'), await auth(both[1]!, 'stale')]).toEqual([535, 535]);
    closeAll();
    expect(await auth(await admitted(), 'wrong-1')).toBe(535);
    closeAll();
    // Two failures of the address's budget of 2, on whichever process: every AUTH of it is 454 now.
    expect(await auth(await admitted(), 'wrong-2')).toBe(454);
    closeAll();
  });

  it('/readyz is ready only when every process answers ready', async () => {
    expect((await ops('/readyz')).status).toBe(200);
    const [stuck] = workerPids();
    process.kill(stuck!, 'SIGSTOP');
    try {
      const { status, text } = await ops('/readyz');
      expect(status).toBe(503);
      expect(text).toMatch(/1 of 2 processes ready; process \d+: .*no answer/);
    } finally {
      process.kill(stuck!, 'SIGCONT');
    }
    await eventually(async () => (await ops('/readyz')).status === 200);
  }, 20_000);

  it('a process killed with a message in flight is replaced; its client gets no 250, and every 250 was delivered', async () => {
    const before = metric((await ops('/metrics')).text, 'eml_api_relay_messages_total{outcome="accepted",code="250"}');
    service.holding = true;
    const dialog = await admitted();
    const victim = holderOf(dialog);
    void send(dialog, 'in-flight@example.test').catch(() => undefined);
    await eventually(() => service.held.length === 1);
    process.kill(victim, 'SIGKILL');
    // The connection ends without a reply: the client keeps the message and sends it again.
    await eventually(() => dialog.closed);
    expect(dialog.hasUnreadReply()).toBe(false);
    service.holding = false;
    service.release();
    await eventually(async () => {
      const text = (await ops('/metrics')).text;
      return (
        metric(text, 'eml_api_processes{component="relay"}') === 2 &&
        metric(text, 'eml_api_process_restarts_total{component="relay"}') === 1
      );
    });
    expect(workerPids()).not.toContain(victim);
    await eventually(async () => (await ops('/readyz')).status === 200);
    // The counters of the process that died stay in the sums.
    const after = metric((await ops('/metrics')).text, 'eml_api_relay_messages_total{outcome="accepted",code="250"}');
    expect(after).toBeGreaterThanOrEqual(before);
    // Both processes take mail again, and the killed one's slot is free: the address has all three.
    const next = [...(await onBothProcesses()), await admitted()];
    expect(new Set(next.map(holderOf))).toEqual(new Set(workerPids()));
    expect(await send(next[0]!, 'm3@example.test')).toBe(250);
    expect(await send(next[1]!, 'm4@example.test')).toBe(250);
    expect(acknowledged.has('in-flight@example.test')).toBe(false);
    for (const id of acknowledged) expect(service.accepted.has(id), id).toBe(true);
    expect(output).toMatch(new RegExp(`relay process ${victim} died \\(signal SIGKILL\\)`));
    closeAll();
  }, 30_000);

  it('a message without Message-ID or Date that got a 451 keeps its identity when retried on the other process', async () => {
    const [first, second] = await onBothProcesses();
    expect(new Set([holderOf(first!), holderOf(second!)]).size).toBe(2);
    const bare = async (dialog: SmtpDialog) => {
      await dialog.command('EHLO client.example');
      expect((await dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(250);
      expect((await dialog.command('RCPT TO:<ops@example.test>')).code).toBe(250);
      return (
        await dialog.data('From: cron@example.test\r\nTo: ops@example.test\r\nSubject: disk full\r\n\r\n/var\r\n')
      ).code;
    };
    const sent = service.keys.length;
    service.resetting = true;
    try {
      // The service took it, but its answer was lost.
      expect(await bare(first!)).toBe(451);
    } finally {
      service.resetting = false;
    }
    expect(await bare(second!)).toBe(250);
    const [tried, retried] = service.keys.slice(sent);
    expect(retried).toBe(tried);
    closeAll();
  });

  it('SIGTERM drains every process: the messages in flight on both get their 250, then all exit 0', async () => {
    service.holding = true;
    const dialogsInFlight = await onBothProcesses();
    expect(new Set(dialogsInFlight.map(holderOf)).size).toBe(2);
    const replies = dialogsInFlight.map((dialog, i) => send(dialog, `draining-${i}@example.test`));
    await eventually(() => service.held.length === 2);
    const pids = workerPids();
    const exit = new Promise<number | null>((resolve) => relay.once('exit', (code) => resolve(code)));
    relay.kill('SIGTERM');
    await eventually(() => /Stopping/.test(output));
    expect((await ops('/readyz')).status).toBe(503);
    service.holding = false;
    service.release();
    expect(await Promise.all(replies)).toEqual([250, 250]);
    expect(await exit).toBe(0);
    expect(output).toContain('SMTP relay stopped');
    for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
    for (const id of acknowledged) expect(service.accepted.has(id), id).toBe(true);
  }, 30_000);
});

/** `eml-api relay` as a process of its own, with the relay's key; what it says (stdout and stderr) and its exit. */
function relayCli(args: string[]) {
  const child = spawn(process.execPath, nodeArgs(['--import', 'tsx', 'src/cli/main.ts', 'relay', ...args]), {
    cwd: ROOT,
    env: { ...process.env, EML_API_KEY: KEY },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let said = '';
  child.stdout!.on('data', (chunk: Buffer) => (said += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (said += chunk.toString()));
  const exit = new Promise<number | null>((resolve) => child.once('exit', resolve));
  return {
    child,
    exit,
    said: () => said,
    /** Kills it and its processes if still there. */
    kill(): void {
      if (child.exitCode !== null || child.signalCode !== null) return;
      for (const pid of childPids(child.pid!, 'src/cli/main.')) process.kill(pid, 'SIGKILL');
      child.kill('SIGKILL');
    },
  };
}

describe('eml-api relay (one process or --processes 2) that cannot start', () => {
  it.each([[[]], [['--processes', '2']]])(
    'a port in use: exit 1, the reason said once (%j)',
    async (processes) => {
      const taken = createTcpServer();
      await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
      const busy = (taken.address() as AddressInfo).port;
      try {
        const relay = relayCli([...processes, '--port', String(busy), '--url', service.url]);
        const code = await relay.exit;
        const said = relay.said();
        expect(code, said).toBe(1);
        expect(said.match(/could not listen on 127\.0\.0\.1:\d+: .*EADDRINUSE/g)).toHaveLength(1);
        expect(
          said.split('\n').filter((line) => line.includes('EADDRINUSE')),
          said,
        ).toHaveLength(1);
        expect(said).not.toContain('listening on');
      } finally {
        taken.close();
      }
    },
    30_000,
  );
});

describe('eml-api relay --processes 2 stopped while a process is replaced', () => {
  it('SIGTERM while the replacement still starts: exit 0, nothing said to be given up', async () => {
    // A grace longer than the test: a process that waited out the grace period would not do.
    const relay = relayCli(['--processes', '2', '--port', '0', '--url', service.url, '--grace', '60']);
    const { child, exit } = relay;
    try {
      await eventually(() => /listening on/.test(relay.said()), { timeout: 30_000, what: relay.said });
      const [victim] = childPids(child.pid!, 'src/cli/main.');
      service.holdingChecks = true;
      process.kill(victim!, 'SIGKILL');
      // The replacement waits on its key check: it has started nothing.
      await eventually(() => service.heldChecks.length === 1, { timeout: 20_000, what: relay.said });
      child.kill('SIGTERM');
      expect(await exit, relay.said()).toBe(0);
      expect(relay.said()).toContain('SMTP relay stopped\n');
      expect(relay.said()).not.toMatch(/given up/);
    } finally {
      service.holdingChecks = false;
      for (const res of service.heldChecks.splice(0)) res.destroy();
      relay.kill();
    }
  }, 40_000);
});

describe('eml-api relay --processes 1 without --http-port', () => {
  it('a process killed is replaced: the primary waits for its replacement instead of exiting', async () => {
    const relay = relayCli(['--processes', '1', '--port', '0', '--url', service.url]);
    const { child, exit, said } = relay;
    let exited = false;
    void exit.then(() => (exited = true));
    try {
      await eventually(() => /listening on 127\.0\.0\.1:(\d+)/.test(said()), { timeout: 30_000, what: said });
      const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(said())![1]);
      const [victim] = childPids(child.pid!, 'src/cli/main.');
      process.kill(victim!, 'SIGKILL');
      await eventually(() => exited || /relay process \d+ started/.test(said()), { timeout: 20_000, what: said });
      expect(exited, said()).toBe(false);
      const { dialog, greeting } = await SmtpDialog.open(port);
      dialog.close();
      expect(greeting.code).toBe(220);
      child.kill('SIGTERM');
      expect(await exit, said()).toBe(0);
    } finally {
      relay.kill();
    }
  }, 40_000);
});

describe('eml-api relay --processes 2 signalled twice', () => {
  /** A group with a message held at the service on each process, then the first signal; resolves once it is stopping. */
  async function stoppingWithMessagesHeld(signal: (child: ChildProcess, members: number[]) => void) {
    // A grace longer than the test: only the second signal can end the wait.
    const relay = relayCli(['--processes', '2', '--port', '0', '--url', service.url, '--grace', '60']);
    const { child, exit, said } = relay;
    await eventually(() => /listening on 127\.0\.0\.1:(\d+)/.test(said()), { timeout: 30_000, what: said });
    const groupPort = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(said())![1]);
    const members = childPids(child.pid!, 'src/cli/main.');
    const held = new Map<number, SmtpDialog>();
    for (let tries = 0; held.size < 2; tries++) {
      if (tries === 20) throw new Error('20 connections all went to one process');
      const { dialog, greeting } = await SmtpDialog.open(groupPort);
      dialogs.push(dialog);
      const pid = holdingPid(members, groupPort, dialog.localPort!);
      if (greeting.code !== 220 || held.has(pid)) dialog.close();
      else held.set(pid, dialog);
    }
    service.holding = true;
    const replies = [...held.values()].map((dialog, i) => send(dialog, `twice-${i}@example.test`));
    await eventually(() => service.held.length === 2, { what: said });
    signal(child, members);
    await eventually(() => /Stopping/.test(said()), { timeout: 20_000, what: said });
    return { relay, child, members, replies, exit, said };
  }

  function cleanUp(relay: ReturnType<typeof relayCli>): void {
    service.holding = false;
    for (const { res } of service.held.splice(0)) res.destroy();
    closeAll();
    relay.kill();
  }

  it('a second SIGTERM to the primary stops every process at once: 451 to the messages held, exit 4', async () => {
    const run = await stoppingWithMessagesHeld((child) => child.kill('SIGTERM'));
    try {
      expect(run.said()).toContain('signal again to stop at once');
      run.child.kill('SIGTERM');
      expect(await Promise.all(run.replies), run.said()).toEqual([451, 451]);
      expect(await run.exit, run.said()).toBe(4);
      expect(run.said()).toMatch(/given up/);
      for (const pid of run.members) expect(() => process.kill(pid, 0)).toThrow();
    } finally {
      cleanUp(run.relay);
    }
  }, 40_000);

  it("a terminal's Ctrl-C twice (SIGINT to every process, twice) stops at once: 451 to the messages held, exit 4", async () => {
    const everyProcess = (child: ChildProcess, members: number[]) => {
      child.kill('SIGINT');
      for (const pid of members) process.kill(pid, 'SIGINT');
    };
    const run = await stoppingWithMessagesHeld(everyProcess);
    try {
      everyProcess(run.child, run.members);
      expect(await Promise.all(run.replies), run.said()).toEqual([451, 451]);
      expect(await run.exit, run.said()).toBe(4);
    } finally {
      cleanUp(run.relay);
    }
  }, 40_000);
});

describe('eml-api relay --processes 2 signalled twice with nothing in flight', () => {
  it('Ctrl-C twice (SIGINT to every process, twice): exit 0, nothing said to be given up', async () => {
    const relay = relayCli(['--processes', '2', '--port', '0', '--url', service.url]);
    const { child, exit, said } = relay;
    const everyProcess = (members: number[]) => {
      child.kill('SIGINT');
      for (const pid of members) process.kill(pid, 'SIGINT');
    };
    try {
      await eventually(() => /listening on 127\.0\.0\.1:(\d+)/.test(said()), { timeout: 30_000, what: said });
      const members = childPids(child.pid!, 'src/cli/main.');
      everyProcess(members);
      await eventually(() => /Stopping/.test(said()), { timeout: 20_000, what: said });
      try {
        everyProcess(members);
      } catch {
        // A process already gone has nothing to give up.
      }
      expect(await exit, said()).toBe(0);
      expect(said()).not.toMatch(/given up/);
    } finally {
      relay.kill();
    }
  }, 40_000);
});
