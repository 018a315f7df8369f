import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
import { MailpitClient } from 'mailpit-api';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/run-cli.js';

/**
 * `eml-api serve` with the inbox's flags (SMTP in, retention, data
 * directory, faults, rate limit, login) and `eml-api inbox`, as a user runs
 * them: the CLI in this process, its output read as a user reads it.
 */

interface Serving {
  stdout: string;
  stderr: string;
  url: string;
  key: string;
  stop(): Promise<number>;
}

/** Runs `eml-api serve ARGS` until `stop()`, once it printed its URL and key. */
async function serve(args: string[], env: Record<string, string> = {}): Promise<Serving> {
  const controller = new AbortController();
  let stdout = '';
  let stderr = '';
  let announced!: () => void;
  let failed!: (err: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    announced = resolve;
    failed = reject;
  });
  const done = runCli(['serve', '--port', '0', ...args], {
    stdout: {
      write: (s: string) => {
        stdout += s;
        if (stdout.includes('Try:')) announced();
        return true;
      },
    },
    stderr: { write: (s: string) => ((stderr += s), true) },
    stdin: Readable.from([]),
    env,
    signal: controller.signal,
  });
  void done.then((code) => failed(new Error(`serve exited ${code}: ${stderr}`)));
  await ready;
  return {
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    url: /listening on (\S+)/.exec(stdout)![1]!,
    key: /API key \(all scopes, plus plan\): (\S+)/.exec(stdout)![1]!,
    stop: () => {
      controller.abort();
      return done;
    },
  };
}

async function cli(argv: string[], env: Record<string, string>) {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, {
    stdout: { write: (s: string) => ((stdout += s), true) },
    stderr: { write: (s: string) => ((stderr += s), true) },
    stdin: Readable.from([]),
    env,
  });
  return { code, stdout, stderr };
}

describe('eml-api serve --smtp-port and eml-api inbox', () => {
  it('takes SMTP mail into the inbox, lists it, clears a search and then everything', async () => {
    const server = await serve(['--smtp-port', '0']);
    try {
      const smtpUrl = /^SMTP: (smtp:\/\/127\.0\.0\.1:(\d+))$/m.exec(server.stdout);
      expect(smtpUrl, server.stdout).not.toBeNull();
      expect(server.stdout).toContain(`Mailpit API: ${server.url}/api/v1/`);
      const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: Number(smtpUrl![2]), ignoreTLS: true });
      for (const subject of ['Welcome Ann', 'Invoice 7', 'Welcome Bob']) {
        await smtp.sendMail({ from: 'app@example.test', to: 'ann@example.test', subject, text: subject });
      }
      smtp.close();
      const env = { EML_API_URL: server.url };
      const list = await cli(['inbox', 'list'], env);
      expect(list.code, list.stderr).toBe(0);
      expect(list.stdout).toMatch(/app@example\.test -> ann@example\.test {2}Welcome Bob\n/);
      expect(list.stdout).toMatch(/3 of 3 messages\n$/);
      expect((await cli(['inbox', 'clear', '--query', 'subject:welcome'], env)).stdout).toBe(
        'deleted 2 messages matching "subject:welcome"\n',
      );
      expect((await cli(['inbox', 'list', '--query', 'invoice'], env)).stdout).toMatch(/Invoice 7\n1 of 1 message\n$/);
      expect((await cli(['inbox', 'clear'], env)).stdout).toBe('deleted 1 message\n');
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('refuses wrong usage with exit code 2', async () => {
    for (const args of [
      ['serve', '--smtp-allow', '10.0.0.0/8'],
      ['serve', '--fault-unavailable', '2'],
      ['serve', '--rate-burst', '5'],
      ['serve', '--max-messages', '0'],
      ['inbox', 'list'],
      ['inbox', 'purge', '--url', 'http://127.0.0.1:1'],
    ]) {
      const r = await cli(args, {});
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    }
  });
});

describe('eml-api serve --max-messages, --data-dir, faults and rate limit', () => {
  it('keeps at most --max-messages, and the key and messages across restarts with --data-dir', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'eml-api-serve-'));
    try {
      const first = await serve(['--max-messages', '2', '--data-dir', dir]);
      const eml = (n: number) =>
        JSON.stringify({
          mail: Buffer.from(`From: a@x.test\r\nTo: b@x.test\r\nSubject: n${n}\r\n\r\nx\r\n`).toString('base64'),
        });
      for (let n = 1; n <= 3; n++) {
        const res = await request(`${first.url}/v1/send/eml`, {
          method: 'POST',
          headers: { 'x-api-key': first.key, 'content-type': 'application/json' },
          body: eml(n),
        });
        expect(res.statusCode).toBe(202);
        await res.body.text();
      }
      expect(first.stdout).toContain(`Data directory: ${dir}`);
      await first.stop();
      const second = await serve(['--max-messages', '2', '--data-dir', dir]);
      try {
        expect(second.key).toBe(first.key);
        const list = await new MailpitClient(second.url).listMessages();
        expect(list.messages.map((m) => m.Subject)).toEqual(['n3', 'n2']);
      } finally {
        await second.stop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('injects faults and limits the rate from flags', async () => {
    const server = await serve([
      '--fault-unavailable',
      '1',
      '--fault-retry-after',
      '7',
      '--rate-limit',
      '1/s',
      '--rate-burst',
      '1',
    ]);
    try {
      const check = () =>
        request(`${server.url}/v1/group/none/check/a%40b.test`, { headers: { 'x-api-key': server.key } });
      const first = await check();
      expect(first.statusCode).toBe(503);
      expect(first.headers['retry-after']).toBe('7');
      await first.body.text();
    } finally {
      await server.stop();
    }
    const limited = await serve(['--rate-limit', '1', '--rate-burst', '1']);
    try {
      const check = () =>
        request(`${limited.url}/v1/group/none/check/a%40b.test`, { headers: { 'x-api-key': limited.key } });
      const answers = [];
      for (let i = 0; i < 2; i++) {
        const res = await check();
        answers.push(res.statusCode);
        await res.body.text();
      }
      expect(answers).toEqual([404, 429]);
    } finally {
      await limited.stop();
    }
  });
});

describe('eml-api serve beyond loopback', () => {
  it('makes up an inbox login, prints it, and asks every client for it (a loopback Host included)', async () => {
    const server = await serve(['--host', '0.0.0.0']);
    try {
      const login = /^Inbox login: inbox \/ (\S+)$/m.exec(server.stdout)?.[1];
      expect(login, server.stdout).toBeDefined();
      const anonymous = await request(`${server.url}/api/v1/info`);
      expect(anonymous.statusCode).toBe(401);
      expect(anonymous.headers['www-authenticate']).toMatch(/^Basic /);
      await anonymous.body.text();
      for (const path of ['/', '/inbox/events', '/view/latest.html']) {
        const page = await request(`${server.url}${path}`);
        expect(page.statusCode, path).toBe(401);
        await page.body.text();
      }
      const mailpit = new MailpitClient(server.url, { auth: { username: 'inbox', password: login! } });
      expect((await mailpit.getInfo()).Messages).toBe(0);
      const wrong = new MailpitClient(server.url, { auth: { username: 'inbox', password: `${login}x` } });
      await expect(wrong.getInfo()).rejects.toThrow(/401/);
      const inbox = await cli(['inbox', 'list'], { EML_API_URL: server.url, EML_API_INBOX_LOGIN: `inbox:${login}` });
      expect(inbox.stdout).toBe('0 of 0 messages\n');
      const refused = await cli(['inbox', 'list'], { EML_API_URL: server.url });
      expect(refused).toMatchObject({
        code: 1,
        stderr: 'eml-api: the inbox asks for its login: set EML_API_INBOX_LOGIN=user:password\n',
      });
      const mistyped = await cli(['inbox', 'list'], {
        EML_API_URL: server.url,
        EML_API_INBOX_LOGIN: `inbox:${login}x`,
      });
      expect(mistyped).toMatchObject({
        code: 1,
        stderr:
          'eml-api: the inbox refused the login in EML_API_INBOX_LOGIN (user inbox): check its user and password\n',
      });
    } finally {
      await server.stop();
    }
  });

  it('keeps the login it made up in --data-dir (made with its parents), the same after a restart', async () => {
    const parent = await mkdtemp(join(tmpdir(), 'eml-api-serve-'));
    const dir = join(parent, 'a', 'b');
    try {
      const loginOf = (stdout: string) => /^Inbox login: inbox \/ (\S+)$/m.exec(stdout)?.[1];
      const first = await serve(['--host', '0.0.0.0', '--data-dir', dir]);
      const login = loginOf(first.stdout);
      await first.stop();
      expect(await readFile(join(dir, 'inbox-login'), 'utf8')).toBe(`${login}\n`);
      expect((await stat(join(dir, 'inbox-login'))).mode & 0o777).toBe(0o600);
      expect((await stat(join(parent, 'a'))).mode & 0o777).toBe(0o700);
      const second = await serve(['--host', '0.0.0.0', '--data-dir', dir]);
      await second.stop();
      expect(loginOf(second.stdout)).toBe(login);
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  });

  it('takes the login from EML_API_INBOX_LOGIN and never prints its password', async () => {
    const server = await serve([], { EML_API_INBOX_LOGIN: 'team:correct horse battery' });
    try {
      expect(server.stdout).toContain('Inbox login: team (password from EML_API_INBOX_LOGIN)');
      expect(server.stdout + server.stderr).not.toContain('correct horse');
      const mailpit = new MailpitClient(server.url, { auth: { username: 'team', password: 'correct horse battery' } });
      expect((await mailpit.listMessages()).total).toBe(0);
      const anonymous = await request(`${server.url}/api/v1/messages`);
      expect(anonymous.statusCode).toBe(401);
      await anonymous.body.text();
    } finally {
      await server.stop();
    }
  });
});
