// EmlApiTransport inside @nestjs-modules/mailer: MailerModule.forRoot / forRootAsync
// with `transport: new EmlApiTransport(...)` and `verifyTransporters: true`.
// Runs against the packed nodemailer-eml-api, installed the way users install it.
import 'reflect-metadata';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import { MailerModule, MailerService, MailerHealthIndicator } from '@nestjs-modules/mailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';

const here = fileURLToPath(new URL('.', import.meta.url));

const FROM = 'Shop <shop@example.test>';

/** Installed version of a dependency (some packages do not export ./package.json). */
const versionOf = (name) => JSON.parse(readFileSync(`${here}node_modules/${name}/package.json`, 'utf8')).version;

/** A Nest LoggerService that records every line, so the mailer's own log can be asserted. */
function captureLogger() {
  const lines = [];
  const record =
    (level) =>
    (message, ...rest) =>
      lines.push({ level, message: String(message), context: rest.at(-1) });
  return {
    lines,
    log: record('log'),
    error: record('error'),
    warn: record('warn'),
    debug: record('debug'),
    verbose: record('verbose'),
    fatal: record('fatal'),
  };
}

async function waitFor(predicate, what, ms = 5000) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const found = predicate();
    if (found) return found;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function appModule(mailerImport) {
  class AppModule {}
  Module({ imports: [mailerImport] })(AppModule);
  return AppModule;
}

function headerOf(raw, name) {
  const head = raw
    .toString('latin1')
    .split(/\r?\n\r?\n/, 1)[0]
    .replace(/\r?\n[ \t]+/g, ' ');
  const m = new RegExp(`^${name}:[ \\t]*(.*)$`, 'im').exec(head);
  return m ? m[1].trim() : undefined;
}

let emu;
before(async () => {
  emu = await startEmulator();
  console.log(
    `nodemailer ${versionOf('nodemailer')}, @nestjs-modules/mailer ${versionOf('@nestjs-modules/mailer')}, @nestjs/core ${versionOf('@nestjs/core')}, nodemailer-eml-api ${versionOf('nodemailer-eml-api')}`,
  );
});
after(async () => {
  await emu?.close();
});

test('forRoot + verifyTransporters: verify succeeds, sendMail delivers, info matches the MIME, close reaches the transport', async () => {
  emu.reset();
  const logger = captureLogger();
  const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
  const app = await NestFactory.createApplicationContext(
    appModule(MailerModule.forRoot({ transport, verifyTransporters: true, defaults: { from: FROM } })),
    { logger },
  );
  let closed = false;
  try {
    // verifyTransporters runs transporter.verify() (no callback, a Promise) in the background.
    await waitFor(() => logger.lines.find((l) => /Transporter is ready/.test(l.message)), '"Transporter is ready"');
    assert.deepEqual(
      logger.lines.filter((l) => l.level === 'error'),
      [],
    );

    const mailer = app.get(MailerService);
    assert.equal(await mailer.verifyAllTransporters(), true);
    const health = await app.get(MailerHealthIndicator).isHealthy();
    assert.equal(health.mailer.status, 'up');

    const info = await mailer.sendMail({
      to: 'Ann <ann@example.test>',
      cc: 'bob@example.test',
      bcc: 'carol@example.test',
      subject: 'Order {{order}} shipped',
      context: { order: 42 },
      text: 'Your order shipped.',
      html: '<p>Your order <b>{{order}}</b> shipped.</p>',
      attachments: [{ filename: 'invoice.txt', content: 'Invoice 42\n', contentType: 'text/plain' }],
    });

    const messages = emu.messages();
    assert.equal(messages.length, 1);
    const [msg] = messages;
    assert.equal(msg.endpoint, '/v1/send/eml');
    assert.equal(msg.from, 'shop@example.test'); // MailerModule `defaults` reached Nodemailer
    assert.equal(msg.subject, 'Order 42 shipped'); // the module's {{ }} interpolation ran
    assert.match(msg.html, /Your order <b>42<\/b> shipped\./);
    assert.match(msg.text, /Your order shipped\./);
    assert.deepEqual(
      msg.attachments.map((a) => [a.filename, a.contentType, a.size]),
      [['invoice.txt', 'text/plain', 11]],
    );
    assert.deepEqual([...msg.recipients].sort(), ['ann@example.test', 'bob@example.test', 'carol@example.test']);
    // Bcc is kept in the upload (the service strips it), and absent from delivered copies.
    assert.match(headerOf(msg.raw, 'Bcc'), /carol@example\.test/);
    assert.equal(emu.mailbox('carol@example.test').length, 1);
    assert.equal(headerOf(emu.mailbox('ann@example.test')[0].raw, 'Bcc'), undefined);

    const rawMessageId = headerOf(msg.raw, 'Message-ID');
    assert.match(rawMessageId, /^<[^<>@]+@[^<>]+>$/);
    assert.equal(info.messageId, rawMessageId);
    assert.equal(info.messageId, msg.messageId);
    assert.deepEqual([...info.accepted].sort(), ['ann@example.test', 'bob@example.test', 'carol@example.test']);
    assert.deepEqual(info.rejected, []);
    assert.deepEqual(info.pending, []);
    assert.equal(info.response, '202 Accepted');
    assert.equal(info.id, msg.id);
    assert.deepEqual(info.envelope, { from: 'shop@example.test', to: info.accepted });

    await app.close();
    closed = true;
    // MailerService.onModuleDestroy called transporter.close(): the transport refuses new sends.
    await assert.rejects(
      () => mailer.sendMail({ to: 'ann@example.test', subject: 'late', text: 'x' }),
      (err) => err.code === 'ECONNECTION',
    );
    assert.equal(emu.messages().length, 1);
  } finally {
    if (!closed) await app.close();
  }
});

test('forRoot + verifyTransporters with a wrong key: startup still succeeds, the module logs the EAUTH error, health is down, sends fail with EAUTH', async () => {
  emu.reset();
  const logger = captureLogger();
  const transport = new EmlApiTransport({ apiKey: 'emu_wrong_key', baseUrl: emu.url, retry: false });
  // @nestjs-modules/mailer does not await verify(): bootstrap resolves, the failure is only logged.
  const app = await NestFactory.createApplicationContext(
    appModule(MailerModule.forRoot({ transport, verifyTransporters: true, defaults: { from: FROM } })),
    { logger },
  );
  try {
    const line = await waitFor(
      () => logger.lines.find((l) => l.level === 'error' && /verifying the transporter/.test(l.message)),
      'the verify error log line',
    );
    assert.equal(line.context, 'MailerService');
    assert.match(line.message, /^Error occurred while verifying the transporter: /);
    console.log(`wrong key, logged: ${JSON.stringify(line.message)}`);
    assert.equal(
      logger.lines.some((l) => /Transporter is ready/.test(l.message)),
      false,
    );

    // The error verify() rejects with is the transport's EAUTH.
    const transporter = app.get(MailerService).getTransporter();
    await assert.rejects(
      () => transporter.verify(),
      (err) =>
        err.code === 'EAUTH' &&
        err.message === line.message.replace(/^Error occurred while verifying the transporter: /, ''),
    );

    const mailer = app.get(MailerService);
    assert.equal(await mailer.verifyAllTransporters(), false);
    const health = await app.get(MailerHealthIndicator).isHealthy();
    assert.equal(health.mailer.status, 'down');
    assert.equal(health.mailer.transporters, 'down');

    await assert.rejects(
      () => mailer.sendMail({ to: 'ann@example.test', subject: 'x', text: 'x' }),
      (err) => err.code === 'EAUTH',
    );
    assert.equal(emu.messages().length, 0);
  } finally {
    await app.close();
  }
});

test('app.close() leaves no open handles: a process that boots (forRootAsync), sends and closes exits by itself', async () => {
  emu.reset();
  const child = spawn(process.execPath, [`${here}lifecycle.mjs`], {
    env: { ...process.env, EMU_URL: emu.url, EMU_KEY: emu.apiKey },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const [code, signal] = await once(child, 'exit');
  const exitedAt = Date.now();
  clearTimeout(timer);
  assert.equal(signal, null, `the process did not exit by itself within 30 s:\n${stdout}\n${stderr}`);
  assert.equal(code, 0, `the process failed:\n${stdout}\n${stderr}`);
  const result = JSON.parse(stdout.trim().split('\n').at(-1));
  const [msg] = emu.messages();
  assert.equal(result.messageId, msg.messageId);
  // Idle keep-alive sockets would hold the process for seconds (undici keeps them 4 s).
  const lingered = exitedAt - result.closedAt;
  assert.ok(lingered < 2000, `the process lingered ${lingered} ms after app.close()`);
});
