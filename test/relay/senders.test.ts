/**
 * The senders' settings of docs/relay.md work as written: real Postfix (as a relayhost), msmtp,
 * swaks, Python's smtplib and curl each run the lines of their block in the docs, with only
 * `relay.internal` (by `localhost`, the name the test certificate carries), `2525`, the API key and
 * the CA file replaced, against a relay that trusts no address (as for senders on other machines:
 * STARTTLS and AUTH required). Each message is delivered once, to its recipients.
 *
 * The programs come from Debian packages (.ci/run installs them): without them the file is skipped
 * with a notice here, and fails on CI.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { eventually } from '../helpers/async.js';
import { TEST_CERT, testTls } from './relay-harness.js';
import { missingSenders, senderBlock, startPostfix, type PostfixInstance } from './senders-harness.js';

const run = promisify(execFile);
const DOCS = readFileSync(new URL('../../docs/relay.md', import.meta.url), 'utf8');

const missing = missingSenders();
if (missing.length > 0) {
  const why = `the senders test needs ${missing.join(', ')}: apt-get install -y postfix libsasl2-modules msmtp swaks libnet-ssleay-perl python3 curl, as root`;
  if (Boolean(process.env.CI) && process.env.CI !== 'false') throw new Error(`On CI, ${why}`);
  console.warn(`\n\u001b[33mSKIPPING test/relay/senders.test.ts: ${why}\u001b[0m\n`);
}

let emu: Emulator;
let relay: EmlApiRelay;
let dir: string;

beforeAll(async () => {
  if (missing.length > 0) return;
  emu = await startEmulator();
  relay = await startEmlApiRelay({
    baseUrl: emu.url,
    port: 0,
    retry: false,
    tls: testTls(),
    trustedNetworks: [],
    allowUnauthenticatedFrom: [],
  });
  dir = await mkdtemp(join(tmpdir(), 'relay-senders-'));
});
afterAll(async () => {
  await relay?.close();
  await emu?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A sender's block of the docs, with the reader's own values in: host, port, key, CA file. */
function asWritten(name: string): string {
  return senderBlock(DOCS, name)
    .replaceAll('relay.internal', 'localhost')
    .replaceAll('2525', String(relay.port))
    .replaceAll('<API key>', emu.apiKey)
    .replaceAll('/etc/ssl/certs/ca-certificates.crt', TEST_CERT);
}

/** The environment a reader's shell has: the key in EML_API_KEY, the relay's CA trusted. */
const environment = () => ({
  ...process.env,
  EML_API_KEY: emu.apiKey,
  SSL_CERT_FILE: TEST_CERT,
  CURL_CA_BUNDLE: TEST_CERT,
});

/** Runs `send`, then waits for the messages it should deliver; returns those. */
async function delivered(count: number, send: () => Promise<unknown>) {
  const before = emu.messages().length;
  await send();
  await eventually(() => emu.messages().length >= before + count, { timeout: 60_000 });
  return emu.messages().slice(before);
}

describe.skipIf(missing.length > 0)("the senders' settings of docs/relay.md, as written", () => {
  it('swaks', async () => {
    const [message] = await delivered(1, () =>
      run('bash', ['-c', asWritten('swaks')], { env: environment(), timeout: 60_000 }),
    );
    expect(message).toMatchObject({ from: 'app@example.com', recipients: ['ann@example.com'] });
  });

  it("Python's smtplib", async () => {
    const [message] = await delivered(1, async () => {
      const child = run('python3', ['-'], { env: environment(), timeout: 60_000 });
      child.child.stdin!.end(asWritten('smtplib'));
      await child;
    });
    expect(message).toMatchObject({ subject: 'Hello', recipients: ['ann@example.com'] });
  });

  it('curl', async () => {
    await writeFile(
      join(dir, 'message.eml'),
      'From: app@example.com\r\nTo: ann@example.com\r\nSubject: from curl\r\n\r\nHi Ann\r\n',
    );
    const [message] = await delivered(1, () =>
      run('bash', ['-c', asWritten('curl')], { cwd: dir, env: environment(), timeout: 60_000 }),
    );
    expect(message).toMatchObject({ subject: 'from curl', recipients: ['ann@example.com'] });
  });

  it('msmtp, as cron or PHP run it (msmtp -t)', async () => {
    const config = join(dir, 'msmtprc');
    await writeFile(config, `${asWritten('msmtp')}\n`, { mode: 0o600 });
    const [message] = await delivered(1, async () => {
      const child = run('msmtp', ['-C', config, '-t'], { env: environment(), timeout: 60_000 });
      child.child.stdin!.end('To: ann@example.com\nSubject: from cron\n\nDisk 91% full\n');
      await child;
    });
    expect(message).toMatchObject({ from: 'app@example.com', subject: 'from cron', recipients: ['ann@example.com'] });
  });

  describe('Postfix as relayhost', () => {
    let postfix: PostfixInstance;
    beforeAll(async () => {
      postfix = await startPostfix(asWritten('postfix').split('\n'));
    }, 60_000);
    afterAll(() => postfix?.stop());

    it('delivers each message once over TLS (through tlsproxy, for connection reuse), 60 recipients in one transaction', async () => {
      const submit = nodemailer.createTransport({ host: '127.0.0.1', port: postfix.port, ignoreTLS: true });
      const many = Array.from({ length: 60 }, (_, i) => `reader${i}@example.com`);
      const messages = await delivered(3, async () => {
        await submit.sendMail({ from: 'app@example.com', to: 'ann@example.com', subject: 'via Postfix 1', text: '1' });
        await submit.sendMail({ from: 'app@example.com', to: 'bob@example.com', subject: 'via Postfix 2', text: '2' });
        await submit.sendMail({ from: 'app@example.com', to: many, subject: 'to 60 readers', text: 'all' });
      }).catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}; Postfix's log:\n${(await postfix.log()).slice(-3000)}`);
      });
      submit.close();
      expect(messages.map((m) => [m.subject, m.recipients.length]).sort()).toEqual([
        ['to 60 readers', 60],
        ['via Postfix 1', 1],
        ['via Postfix 2', 1],
      ]);
      // The 60 were not split into transactions (smtp_destination_recipient_limit), and nothing waits to be retried.
      const log = await postfix.log();
      expect(log).toMatch(/relay=localhost\[127\.0\.0\.1\]:\d+, .*status=sent \(250 2\.0\.0 Ok: msg_/);
      expect(log).not.toMatch(/status=(deferred|bounced)/);
    }, 90_000);
  });
});
