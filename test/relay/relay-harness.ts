/**
 * Helpers of the relay tests: a raw SMTP dialog (to read exact replies), the
 * real clients nobody on this project wrote (Python's smtplib, curl), and a
 * network namespace that gives a client a non-loopback address.
 */
import { execFile, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

export const FIXTURES = fileURLToPath(new URL('../fixtures/relay/', import.meta.url));
export const TEST_CERT = `${FIXTURES}test-cert.pem`;
export const TEST_KEY = `${FIXTURES}test-key.pem`;
export const testTls = () => ({ cert: readFileSync(TEST_CERT), key: readFileSync(TEST_KEY) });

/** One SMTP reply: its code and its lines' text (without the code). */
export interface Reply {
  code: number;
  lines: string[];
  /** The last line, e.g. `2.0.0 Ok: msg_...`. */
  text: string;
}

/**
 * A hand-driven SMTP session, for asserting exact replies (the clients under
 * test hide them). Reads multi-line replies; `starttls()` upgrades in place.
 */
export class SmtpDialog {
  #socket: Socket | TLSSocket;
  #buffer = '';
  #waiters: ((reply: Reply) => void)[] = [];
  #replies: Reply[] = [];
  #pending: { code: number; lines: string[] } | undefined;
  closed = false;

  private constructor(socket: Socket | TLSSocket) {
    this.#socket = socket;
    this.#listen(socket);
  }

  /**
   * Connects and reads the greeting. `proxyHeader` is written first, as a
   * proxy speaking the PROXY protocol does (e.g. `PROXY TCP4 198.51.100.7 127.0.0.1 40000 2525`).
   */
  static async open(
    port: number,
    host = '127.0.0.1',
    options: { implicitTls?: boolean; localAddress?: string; proxyHeader?: string } = {},
  ) {
    const local = options.localAddress ? { localAddress: options.localAddress } : {};
    const socket = options.implicitTls
      ? tlsConnect({ port, host, ca: readFileSync(TEST_CERT), servername: 'localhost', ...local })
      : netConnect({ port, host, ...local });
    if (options.proxyHeader !== undefined) socket.write(`${options.proxyHeader}\r\n`);
    const dialog = new SmtpDialog(socket);
    const greeting = await dialog.reply();
    return { dialog, greeting };
  }

  /** The client's local port (names the connection in `ss`). */
  get localPort(): number | undefined {
    return this.#socket.localPort;
  }

  /** Sends one line and reads its reply. */
  async command(line: string): Promise<Reply> {
    this.#socket.write(`${line}\r\n`);
    return this.reply();
  }

  /** Sends raw bytes (a message after DATA) without reading. */
  write(bytes: string | Buffer): void {
    this.#socket.write(bytes);
  }

  /** The next reply. */
  reply(): Promise<Reply> {
    const ready = this.#replies.shift();
    if (ready) return Promise.resolve(ready);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no SMTP reply in 20 s')), 20_000);
      this.#waiters.push((reply) => {
        clearTimeout(timer);
        resolve(reply);
      });
    });
  }

  /** Whether a reply arrived that nobody has read yet (without waiting for one). */
  hasUnreadReply(): boolean {
    return this.#replies.length > 0;
  }

  /** Sends a whole message after DATA (dot-stuffed, terminated) and reads the final reply. */
  async data(message: string | Buffer): Promise<Reply> {
    const go = await this.command('DATA');
    if (go.code !== 354) return go;
    // Byte-preserving: UTF-8 text becomes bytes first, then latin1 maps each byte to one character.
    const text = (Buffer.isBuffer(message) ? message : Buffer.from(message, 'utf8')).toString('latin1');
    const stuffed = text.replace(/^\./gm, '..');
    this.write(Buffer.from(`${stuffed}${stuffed.endsWith('\r\n') ? '' : '\r\n'}.\r\n`, 'latin1'));
    return this.reply();
  }

  async starttls(): Promise<Reply> {
    const reply = await this.command('STARTTLS');
    if (reply.code !== 220) return reply;
    const plain = this.#socket;
    plain.removeAllListeners('data');
    const secure = tlsConnect({ socket: plain, ca: readFileSync(TEST_CERT), servername: 'localhost' });
    await new Promise<void>((resolve, reject) => {
      secure.once('secureConnect', () => resolve());
      secure.once('error', reject);
    });
    this.#socket = secure;
    this.#listen(secure);
    return reply;
  }

  close(): void {
    this.#socket.destroy();
  }

  #listen(socket: Socket | TLSSocket): void {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.#buffer += chunk;
      let end: number;
      while ((end = this.#buffer.indexOf('\r\n')) !== -1) {
        const line = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end + 2);
        const code = Number(line.slice(0, 3));
        this.#pending ??= { code, lines: [] };
        this.#pending.lines.push(line.slice(4));
        if (line[3] !== '-') {
          const reply = { ...this.#pending, text: this.#pending.lines.at(-1)! };
          this.#pending = undefined;
          const waiter = this.#waiters.shift();
          if (waiter) waiter(reply);
          else this.#replies.push(reply);
        }
      }
    });
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => undefined);
  }
}

/** What `clients/smtplib_send.py` printed. */
export interface SmtplibResult {
  /** Base64 of the bytes smtplib sent. */
  sent: string;
  rcpts: string[];
  features?: string[];
  features_tls?: string[];
  refused?: Record<string, [number, string]>;
  error?: { type: string; code?: number; message?: string };
}

/** Runs Python's smtplib `send_message` (optionally inside a network namespace, through `prefix`). */
export async function smtplibSend(spec: Record<string, unknown>, prefix: string[] = []): Promise<SmtplibResult> {
  const script = fileURLToPath(new URL('./clients/smtplib_send.py', import.meta.url));
  const [command, ...args] = [...prefix, 'python3', script, JSON.stringify(spec)];
  const { stdout } = await run(command!, args, { timeout: 30_000 });
  return JSON.parse(stdout) as SmtplibResult;
}

/**
 * Runs `clients/starttls_sessions.py`: smtplib sessions (STARTTLS, `login()`, which tries PLAIN then LOGIN
 * after a 535, one message, QUIT), in turn and in threads; resolves with how many ended with each outcome.
 */
export async function starttlsSessions(spec: {
  host: string;
  port: number;
  user: string;
  password: string;
  sequential?: number;
  parallel?: number;
  perThread?: number;
}): Promise<Record<string, number>> {
  const script = fileURLToPath(new URL('./clients/starttls_sessions.py', import.meta.url));
  const { sequential = 0, parallel = 0, perThread = 0, ...rest } = spec;
  const args = { ...rest, cafile: TEST_CERT, sequential, parallel, per_thread: perThread };
  const { stdout } = await run('python3', [script, JSON.stringify(args)], { timeout: 120_000 });
  return JSON.parse(stdout) as Record<string, number>;
}

/** Runs curl as an SMTP client; returns its exit code and the server replies it logged (`< 250 ...`). */
export async function curlSend(args: string[]): Promise<{ exitCode: number; replies: string[] }> {
  try {
    const { stderr } = await run('curl', ['-sS', '-v', ...args], { timeout: 30_000 });
    return { exitCode: 0, replies: serverLines(stderr) };
  } catch (err) {
    const e = err as { code?: number; stderr?: string };
    return { exitCode: typeof e.code === 'number' ? e.code : -1, replies: serverLines(e.stderr ?? '') };
  }
}

function serverLines(stderr: string): string[] {
  return stderr
    .split('\n')
    .filter((l) => l.startsWith('< '))
    .map((l) => l.slice(2).trim());
}

/**
 * A network namespace with a veth pair, so a client gets an address that is
 * not loopback on this machine: the relay listens on `hostAddress` (this
 * side), clients run inside the namespace (`prefix` before their command)
 * and connect from `clientAddress`. Addresses come from 198.18.0.0/15, the
 * range set aside for network tests (RFC 2544); nothing leaves the machine.
 * Returns undefined, with the reason, where namespaces cannot be made (no
 * root, no iproute2).
 */
export function makeNetns(): { hostAddress: string; clientAddress: string; prefix: string[]; remove(): void } | string {
  const tag = `${process.pid % 10000}${Math.floor(Math.random() * 100)}`;
  const ns = `emlrelay${tag}`;
  const hostIf = `er${tag}h`;
  const nsIf = `er${tag}n`;
  const octet = 1 + (Number(tag) % 250);
  const hostAddress = `198.18.${octet}.1`;
  const clientAddress = `198.18.${octet}.2`;
  const ip = (...args: string[]) => spawnSync('ip', args, { encoding: 'utf8' });
  const steps = [
    ['netns', 'add', ns],
    ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf],
    ['link', 'set', nsIf, 'netns', ns],
    ['addr', 'add', `${hostAddress}/30`, 'dev', hostIf],
    ['link', 'set', hostIf, 'up'],
    ['netns', 'exec', ns, 'ip', 'addr', 'add', `${clientAddress}/30`, 'dev', nsIf],
    ['netns', 'exec', ns, 'ip', 'link', 'set', nsIf, 'up'],
    ['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up'],
  ];
  const remove = () => {
    ip('link', 'del', hostIf);
    ip('netns', 'del', ns);
  };
  for (const step of steps) {
    const result = ip(...step);
    if (result.error || result.status !== 0) {
      remove();
      return `ip ${step.join(' ')} failed: ${result.error?.message ?? result.stderr.trim()}`;
    }
  }
  return { hostAddress, clientAddress, prefix: ['ip', 'netns', 'exec', ns], remove };
}
