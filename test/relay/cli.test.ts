/** `eml-api relay`, run in-process through runCli with captured streams and a stop signal. */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/run-cli.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually } from '../helpers/async.js';
import { runCliCapturing } from '../helpers/cli-run.js';
import { SmtpDialog, TEST_CERT, TEST_KEY } from './relay-harness.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator();
});
afterAll(async () => {
  await emu?.close();
});

function cli(args: string[], env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const stop = new AbortController();
  const exit = runCli(['relay', ...args], {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    env,
    signal: stop.signal,
  });
  return { out, err, stop: () => stop.abort(), exit, text: () => out.join(''), errors: () => err.join('') };
}

describe('eml-api relay', () => {
  it('prints where it listens, logs each accepted message with its id, and stops gracefully', async () => {
    const run = cli(['--port', '0', '--url', emu.url, '--tls-cert', TEST_CERT, '--tls-key', TEST_KEY], {
      EML_API_KEY: emu.apiKey,
    });
    await eventually(() => /listening on/.test(run.text()));
    const port = Number(/listening on 127\.0\.0\.1:(\d+), STARTTLS/.exec(run.text())![1]);
    expect(run.text()).toContain('send without AUTH');
    const transporter = nodemailer.createTransport({ host: '127.0.0.1', port, ignoreTLS: true });
    const info = await transporter.sendMail({
      from: 'cron@example.test',
      to: 'ops@example.test',
      subject: 's',
      text: 't',
    });
    transporter.close();
    const id = emu.messages().at(-1)!.id;
    expect(info.response).toBe(`250 2.0.0 Ok: ${id}`);
    await eventually(() => run.text().includes(`Message accepted`));
    expect(run.text()).toMatch(new RegExp(`Message accepted .*id=${id}`));
    run.stop();
    expect(await run.exit).toBe(0);
    expect(run.text()).toContain('SMTP relay stopped');
    expect(run.text() + run.errors()).not.toContain(emu.apiKey);
  });

  it.each([
    [['--redis', 'redis://127.0.0.1:6379'], /needs the relay's own apiKey/],
    [['--tls-cert', TEST_CERT], /--tls-cert and --tls-key go together/],
    [['--allow', '10.0.0.0/8'], /--allow needs the relay's own key/],
    [['--port', '70000'], /--port: expected 0-65535/],
    [['--processes', '0'], /--processes: expected 1-1024, got "0"/],
    [['--max-size', 'big'], /--max-size/],
    [['--users', '/nonexistent/users'], /--users: cannot read \/nonexistent\/users/],
    [['--auth-failure-delay', '61'], /--auth-failure-delay: expected 0-60/],
    [['--tls-handshake-timeout', '0'], /--tls-handshake-timeout: expected 1-600/],
    [['--trusted', 'sidecar'], /trustedNetworks: "sidecar" is not an IP address/],
    [['--replicas', '1'], /--replicas goes with the outbox: pass --outbox \(with REDIS_URL\) or --redis/],
    [['--redis', 'redis://127.0.0.1:6379', '--key', 'k', '--replicas', '0'], /--replicas: expected 1-100/],
  ])('%j is a usage error (exit 2)', async (args, message) => {
    const run = cli(['--url', emu.url, '--port', '0', ...args]);
    expect(await run.exit).toBe(2);
    expect(run.errors()).toMatch(message);
  });

  it('needs a URL (exit 2); a port in use cannot start (exit 1)', async () => {
    const noUrl = cli([]);
    expect(await noUrl.exit).toBe(2);
    expect(noUrl.errors()).toMatch(/no service URL/);
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    try {
      const port = (busy.address() as AddressInfo).port;
      const run = cli(['--url', emu.url, '--port', String(port)]);
      expect(await run.exit).toBe(1);
      expect(run.errors()).toMatch(/could not listen on 127\.0\.0\.1:\d+.*EADDRINUSE/);
    } finally {
      busy.close();
    }
  });

  it('a --tls-key that does not match --tls-cert is a usage error naming both (exit 2)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'relay-tls-'));
    try {
      const other = join(dir, 'other-key.pem');
      const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
      await writeFile(other, privateKey.export({ type: 'pkcs8', format: 'pem' }));
      const run = cli(['--url', emu.url, '--port', '0', '--tls-cert', TEST_CERT, '--tls-key', other]);
      expect(await run.exit).toBe(2);
      expect(run.errors()).toMatch(/--tls-key .*other-key\.pem.* does not match --tls-cert .*test-cert\.pem/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('--hash-password hashes standard input; --users serves those users (they send with the relay key)', async () => {
    const hashed = await runCliCapturing(['relay', '--hash-password'], { env: {}, stdin: 'pw for billing\n' });
    expect(hashed.code).toBe(0);
    const hash = hashed.stdout.trim();
    expect(hash).toMatch(/^\$scrypt\$/);
    expect(hashed.stdout + hashed.stderr).not.toContain('pw for billing');
    const dir = await mkdtemp(join(tmpdir(), 'relay-users-'));
    const file = join(dir, 'users');
    await writeFile(file, `# SMTP users of the relay\nbilling:${hash}\n`);
    try {
      const run = cli(['--port', '0', '--url', emu.url, '--users', file, '--allow', '192.0.2.1'], {
        EML_API_KEY: emu.apiKey,
      });
      await eventually(() => /listening on/.test(run.text()));
      expect(run.text()).toMatch(/the 1 user\(s\) of --users send with it after AUTH/);
      const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(run.text())![1]);
      const send = (pass: string) => {
        const transporter = nodemailer.createTransport({ host: '127.0.0.1', port, auth: { user: 'billing', pass } });
        return transporter
          .sendMail({ from: 'billing@example.test', to: 'ann@example.test', text: 'x' })
          .finally(() => transporter.close());
      };
      expect((await send('pw for billing')).response).toMatch(/^250 2\.0\.0 Ok: /);
      run.stop();
      expect(await run.exit).toBe(0);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  it('--max-clients-per-address and --trusted: a second connection from an untrusted address gets 421', async () => {
    const run = cli(['--port', '0', '--url', emu.url, '--max-clients-per-address', '1', '--trusted', '127.0.0.1/32'], {
      EML_API_KEY: emu.apiKey,
    });
    await eventually(() => /listening on/.test(run.text()));
    const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(run.text())![1]);
    const first = await SmtpDialog.open(port, '127.0.0.1', { localAddress: '127.0.0.2' });
    const second = await SmtpDialog.open(port, '127.0.0.1', { localAddress: '127.0.0.2' });
    const trusted = await SmtpDialog.open(port, '127.0.0.1', { localAddress: '127.0.0.1' });
    const again = await SmtpDialog.open(port, '127.0.0.1', { localAddress: '127.0.0.1' });
    expect([first, second, trusted, again].map((d) => d.greeting.code)).toEqual([220, 421, 220, 220]);
    for (const { dialog } of [first, second, trusted, again]) dialog.close();
    run.stop();
    expect(await run.exit).toBe(0);
  });

  it.each([
    ['flags', ['--allow', 'none', '--trusted', 'none'], {}],
    ['environment variables', [], { EML_API_RELAY_ALLOW: 'none', EML_API_RELAY_TRUSTED: 'none' }],
  ])(
    '--allow none and --trusted none (%s): loopback clients must AUTH, over TLS only, and count against the per-address limit',
    async (_how, args, env) => {
      const run = cli(
        [
          '--port',
          '0',
          '--url',
          emu.url,
          '--tls-cert',
          TEST_CERT,
          '--tls-key',
          TEST_KEY,
          '--max-clients-per-address',
          '1',
          ...args,
        ],
        { EML_API_KEY: emu.apiKey, ...env },
      );
      await eventually(() => /listening on/.test(run.text()));
      expect(run.text()).toContain('No client sends without AUTH');
      const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(run.text())![1]);
      const { dialog } = await SmtpDialog.open(port);
      const ehlo = await dialog.command('EHLO client.example');
      expect(ehlo.lines.some((line) => line.startsWith('AUTH'))).toBe(false);
      expect((await dialog.command('MAIL FROM:<cron@example.test>')).code).toBe(530);
      const second = await SmtpDialog.open(port);
      expect(second.greeting.code).toBe(421);
      second.dialog.close();
      dialog.close();
      run.stop();
      expect(await run.exit).toBe(0);
    },
  );

  it.each([
    [['--allow', 'none', '--allow', '10.0.0.0/8'], /--allow none goes alone/],
    [['--trusted', 'none', '--trusted', '10.0.0.0/8'], /--trusted none goes alone/],
  ])('%j is a usage error (exit 2)', async (args, message) => {
    const run = cli(['--url', emu.url, '--port', '0', ...args], { EML_API_KEY: emu.apiKey });
    expect(await run.exit).toBe(2);
    expect(run.errors()).toMatch(message);
  });

  it('is listed in the help, and has its own', async () => {
    const help = cli(['--help']);
    expect(await help.exit).toBe(0);
    expect(help.text()).toContain('--tls-cert <file>');
    expect(help.text()).toMatch(/--allow <cidr\|none>[^]*EML_API_RELAY_ALLOW/);
    expect(help.text()).toMatch(/--trusted <cidr\|none>[^]*EML_API_RELAY_TRUSTED/);
    const out: string[] = [];
    await runCli(['--help'], { stdout: { write: (s: string) => out.push(s) } });
    expect(out.join('')).toMatch(/relay\s+run an SMTP relay/);
  });
});
