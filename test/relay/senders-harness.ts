/**
 * The real senders of docs/relay.md's "Pointing senders at it", as the senders test runs them: the
 * settings blocks read from the docs, the programs found on this machine, and a Postfix instance of
 * its own (configuration, queue and log in a temporary folder, `smtpd` on a free loopback port, no
 * chroot; the machine's Postfix configuration is neither read nor touched).
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually } from '../helpers/async.js';
import { freePort } from '../helpers/redis-server.js';

/** Where Debian puts programs, besides the PATH (Postfix's are in /usr/sbin). */
const SEARCH = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/lib/postfix/sbin'];

/** The path of a program, or undefined where it is not installed. */
export function findProgram(name: string): string | undefined {
  for (const dir of SEARCH) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Whether Cyrus SASL's PLAIN and LOGIN client modules are installed (Debian's libsasl2-modules). */
function saslModulesInstalled(): boolean {
  const roots = ['/usr/lib', '/usr/lib64'];
  const dirs = roots.flatMap((root) => {
    if (!existsSync(root)) return [];
    const arch = readdirSync(root).map((entry) => join(root, entry, 'sasl2'));
    return [join(root, 'sasl2'), ...arch];
  });
  return dirs.some((dir) => existsSync(dir) && readdirSync(dir).some((file) => file.startsWith('libplain.so')));
}

/** What the senders test cannot find here, with what to install; empty when it can run. */
export function missingSenders(): string[] {
  const missing = ['postfix', 'postconf', 'msmtp', 'swaks', 'python3', 'curl'].filter((p) => !findProgram(p));
  if (!saslModulesInstalled()) missing.push('libsasl2-modules');
  // Debian's swaks only recommends the module its --tls needs: without it, swaks refuses the docs' line.
  if (findProgram('swaks') && !swaksHasTls()) missing.push("libnet-ssleay-perl (swaks' --tls)");
  if (process.getuid?.() !== 0) missing.push("root (Postfix's master process starts as root)");
  return missing;
}

function swaksHasTls(): boolean {
  const support = spawnSync(findProgram('swaks')!, ['--support'], { encoding: 'utf8' });
  return /^=== TLS supported/m.test(`${support.stdout}${support.stderr}`);
}

/**
 * The settings block of one sender in docs/relay.md: the fenced block after its marker
 * `<!-- docs-check: skip: sender NAME (...) -->`.
 */
export function senderBlock(docs: string, name: string): string {
  const marker = docs.indexOf(`<!-- docs-check: skip: sender ${name} (`);
  if (marker === -1) throw new Error(`docs/relay.md has no settings block for the sender ${name}`);
  const open = docs.indexOf('```', marker);
  const start = docs.indexOf('\n', open) + 1;
  return docs.slice(start, docs.indexOf('\n```', start));
}

/** A running Postfix instance of the test's own. */
export interface PostfixInstance {
  /** The port its smtpd listens on, on 127.0.0.1 (mynetworks: it relays for loopback). */
  readonly port: number;
  /** Its log so far. */
  log(): Promise<string>;
  /** Stops it and removes its folder. */
  stop(): void;
}

/**
 * Starts Postfix with the machine-independent lines the test needs (its folders, loopback only,
 * no local delivery) followed by `lines` (the docs' settings), and waits for its greeting.
 */
export async function startPostfix(lines: string[]): Promise<PostfixInstance> {
  const postfix = findProgram('postfix')!;
  const postconf = (name: string) =>
    spawnSync(findProgram('postconf')!, ['-h', name], { encoding: 'utf8' }).stdout.trim();
  const owner = postconf('mail_owner');
  const id = (flag: string) => Number(spawnSync('id', [flag, owner], { encoding: 'utf8' }).stdout.trim());
  const dir = await mkdtemp(join(tmpdir(), 'eml-api-postfix-'));
  // Postfix's daemons run as mail_owner and must reach the queue through this folder.
  await chmod(dir, 0o755);
  const etc = join(dir, 'etc');
  const data = join(dir, 'data');
  await Promise.all([mkdir(etc), mkdir(join(dir, 'queue')), mkdir(data)]);
  await chown(data, id('-u'), id('-g'));
  const port = await freePort();
  const maillog = join(dir, 'maillog');
  await writeFile(
    join(etc, 'main.cf'),
    [
      'compatibility_level = 3.6',
      `queue_directory = ${join(dir, 'queue')}`,
      `data_directory = ${data}`,
      'myhostname = postfix.example.test',
      'mydestination =',
      'inet_interfaces = 127.0.0.1',
      'inet_protocols = ipv4',
      'mynetworks = 127.0.0.0/8',
      'smtpd_relay_restrictions = permit_mynetworks, reject',
      'alias_maps =',
      'alias_database =',
      'local_recipient_maps =',
      'biff = no',
      // `localhost` from /etc/hosts: no DNS server here.
      'smtp_host_lookup = native',
      `maillog_file = ${maillog}`,
      `maillog_file_prefixes = ${dir}`,
      ...lines,
      '',
    ].join('\n'),
  );
  // Debian's master.cf without chroot (a chroot needs a copy of /etc in the queue folder), smtpd on the test's port.
  const service = (name: string, type: string, priv: string, limit: string, command: string) =>
    `${name.padEnd(18)} ${type.padEnd(10)} ${priv} - n - ${limit} ${command}`;
  await writeFile(
    join(etc, 'master.cf'),
    [
      service(`127.0.0.1:${port}`, 'inet', 'n', '-', 'smtpd'),
      service('pickup', 'unix', 'n', '1', 'pickup'),
      service('cleanup', 'unix', 'n', '0', 'cleanup'),
      service('qmgr', 'unix', 'n', '1', 'qmgr'),
      service('tlsmgr', 'unix', '-', '1', 'tlsmgr'),
      service('rewrite', 'unix', '-', '-', 'trivial-rewrite'),
      service('bounce', 'unix', '-', '0', 'bounce'),
      service('defer', 'unix', '-', '0', 'bounce'),
      service('trace', 'unix', '-', '0', 'bounce'),
      service('verify', 'unix', '-', '1', 'verify'),
      service('flush', 'unix', 'n', '0', 'flush'),
      service('proxymap', 'unix', '-', '-', 'proxymap'),
      service('smtp', 'unix', '-', '-', 'smtp'),
      service('relay', 'unix', '-', '-', 'smtp'),
      service('showq', 'unix', 'n', '-', 'showq'),
      service('error', 'unix', '-', '-', 'error'),
      service('retry', 'unix', '-', '-', 'error'),
      service('discard', 'unix', '-', '-', 'discard'),
      service('anvil', 'unix', '-', '1', 'anvil'),
      service('scache', 'unix', '-', '1', 'scache'),
      service('tlsproxy', 'unix', '-', '0', 'tlsproxy'),
      service('postlog', 'unix-dgram', 'n', '1', 'postlogd'),
      '',
    ].join('\n'),
  );
  const control = (command: string) => spawnSync(postfix, ['-c', etc, command], { encoding: 'utf8' });
  const pidFile = join(dir, 'queue', 'pid', 'master.pid');
  const stop = () => {
    let pid: number | undefined;
    try {
      pid = Number(readFileSync(pidFile, 'utf8').trim());
    } catch {
      pid = undefined;
    }
    if (pid !== undefined) {
      control('stop');
      // `postfix stop` signals the master and returns: its daemons are gone once it is.
      const deadline = Date.now() + 10_000;
      while (alive(pid) && Date.now() < deadline) spawnSync('sleep', ['0.05']);
      if (alive(pid)) process.kill(pid, 'SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const log = () => readFile(maillog, 'utf8').catch(() => '');
  const started = control('start');
  if (started.status !== 0) {
    const text = await log();
    stop();
    throw new Error(`postfix start failed (${started.status}):\n${started.stderr}${text.slice(-2000)}`);
  }
  try {
    await untilGreeting(port);
  } catch (err) {
    const text = await log();
    stop();
    throw new Error(`${(err as Error).message}:\n${text.slice(-2000)}`);
  }
  return { port, log, stop };
}

/** Resolves once the port answers with a 220 greeting (Postfix's master starts smtpd on the first connection). */
async function untilGreeting(port: number): Promise<void> {
  let greeted = false;
  let trying = false;
  await eventually(
    () => {
      if (!greeted && !trying) {
        trying = true;
        const socket = connect(port, '127.0.0.1');
        socket.setTimeout(2000, () => socket.destroy());
        socket.once('data', (chunk: Buffer) => {
          greeted = chunk.toString('latin1').startsWith('220');
          socket.end('QUIT\r\n');
        });
        socket.once('error', () => socket.destroy());
        socket.once('close', () => (trying = false));
      }
      return greeted;
    },
    { timeout: 20_000 },
  );
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
