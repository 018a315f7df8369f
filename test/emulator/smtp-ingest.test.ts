import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { MailpitClient } from 'mailpit-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/**
 * SMTP in: the emulator takes mail over SMTP into the same inbox, as
 * Mailpit's port 1025, through the package's relay (so an SMTP client gets the
 * replies the relay gives in production).
 */

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

let emu: Emulator;
let mailpit: MailpitClient;

beforeAll(async () => {
  emu = await startEmulator({ smtp: { port: 0 } });
  mailpit = new MailpitClient(emu.url);
});
afterAll(() => emu?.close());

describe('the smtp option', () => {
  it('listens on a free loopback port and says where', () => {
    expect(emu.smtp).toEqual({
      host: '127.0.0.1',
      port: expect.any(Number),
      url: `smtp://127.0.0.1:${emu.smtp!.port}`,
    });
    expect(emu.smtp!.port).toBeGreaterThan(0);
  });

  it('takes a message from Nodemailer over SMTP without AUTH: one message, envelope-only recipients as Bcc', async () => {
    const smtp = nodemailer.createTransport({ host: emu.smtp!.host, port: emu.smtp!.port, ignoreTLS: true });
    const info = await smtp.sendMail({
      from: 'Legacy App <legacy@example.test>',
      to: 'ann@example.test',
      subject: 'Sent over SMTP',
      text: 'hello from SMTP',
      envelope: { from: 'legacy@example.test', to: ['ann@example.test', 'archive@example.test'] },
    });
    smtp.close();
    expect(info.response).toMatch(/^250 /);
    const message = await mailpit.waitForMessage({ query: 'subject:"Sent over SMTP"' }, { interval: 20 });
    expect(message.From).toEqual({ Name: 'Legacy App', Address: 'legacy@example.test' });
    expect(message.To).toEqual([{ Name: '', Address: 'ann@example.test' }]);
    expect(message.Bcc.map((a) => a.Address)).toEqual(['archive@example.test']);
    expect(message.Text.trim()).toBe('hello from SMTP');
    expect(emu.mailbox('archive@example.test')).toHaveLength(1);
    expect(emu.mailbox('archive@example.test')[0]!.raw.toString()).not.toMatch(/^bcc:/im);
    const info2 = await mailpit.getInfo();
    expect(info2.RuntimeStats).toMatchObject({ SMTPAccepted: 1, SMTPRejected: 0 });
    expect(info2.RuntimeStats.SMTPAcceptedSize).toBeGreaterThan(100);
  });

  it('takes mail from Python smtplib too', async () => {
    const script = `
import smtplib, sys
s = smtplib.SMTP('127.0.0.1', int(sys.argv[1]))
s.sendmail('cron@example.test', ['ops@example.test'], 'From: cron@example.test\\r\\nTo: ops@example.test\\r\\nSubject: nightly job\\r\\n\\r\\nall good\\r\\n')
s.quit()
`;
    await run('python3', ['-c', script, String(emu.smtp!.port)]);
    const message = await mailpit.waitForMessage({ query: 'subject:"nightly job"' }, { interval: 20 });
    expect(message.To).toEqual([{ Name: '', Address: 'ops@example.test' }]);
  });

  it('refuses what the relay refuses in production: a header recipient the envelope does not name', async () => {
    const smtp = nodemailer.createTransport({ host: emu.smtp!.host, port: emu.smtp!.port, ignoreTLS: true });
    const error = await smtp
      .sendMail({
        from: 'legacy@example.test',
        to: 'ann@example.test, bob@example.test',
        subject: 'Only Ann in the envelope',
        text: 'x',
        envelope: { from: 'legacy@example.test', to: ['ann@example.test'] },
      })
      .then(
        () => undefined,
        (err: { responseCode?: number }) => err,
      );
    smtp.close();
    expect(error?.responseCode).toBeGreaterThanOrEqual(500);
    expect((await mailpit.getInfo()).RuntimeStats.SMTPRejected).toBe(1);
  });

  it('starts its SMTP port without meeting the injected faults, which SMTP mail meets afterwards', async () => {
    const faulty = await startEmulator({ smtp: { port: 0 }, faults: { unavailable: 1 } });
    try {
      // The relay's key check on start went around the faults.
      expect(faulty.faultStats()).toMatchObject({ none: 0, unavailable: 0 });
      const smtp = nodemailer.createTransport({ host: faulty.smtp!.host, port: faulty.smtp!.port, ignoreTLS: true });
      const error = await smtp.sendMail({ from: 'a@example.test', to: 'b@example.test', subject: 'x', text: 'x' }).then(
        () => undefined,
        (err: { responseCode?: number }) => err,
      );
      smtp.close();
      expect(error?.responseCode).toBe(451);
      expect(faulty.faultStats()!.unavailable).toBeGreaterThan(0);
    } finally {
      await faulty.close();
    }
  });

  it('names the option of a bad setting', async () => {
    await expect(startEmulator({ smtp: { allowFrom: ['not a network'] } })).rejects.toThrow(/smtp\.allowFrom/);
    await expect(startEmulator({ smtp: { port: 70000 } })).rejects.toThrow(/smtp\.port/);
  });
});

describe('an emulator without smtp', () => {
  it('never loads smtp-server', async () => {
    const script = `
import { createRequire } from 'node:module';
const { startEmulator } = await import('./src/emulator/index.ts');
const emu = await startEmulator();
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((k) => k.includes('/smtp-server/'));
console.log(JSON.stringify({ smtp: emu.smtp ?? null, loaded }));
await emu.close();
`;
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
    });
    expect(JSON.parse(stdout)).toEqual({ smtp: null, loaded: [] });
  }, 60_000);
});
