// EmlApiTransport inside email-templates with `send: true`: the template is
// rendered (lodash engine, bundled with email-templates), inlined by juice,
// given a text part by html-to-text, and sent through the transport.
// Runs against the packed nodemailer-eml-api, installed the way users install it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Email from 'email-templates';
import nodemailer from 'nodemailer';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';

const here = fileURLToPath(new URL('.', import.meta.url));
const versionOf = (name) => JSON.parse(readFileSync(`${here}node_modules/${name}/package.json`, 'utf8')).version;

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
    `email-templates ${versionOf('email-templates')}, nodemailer ${versionOf('nodemailer')}, nodemailer-eml-api ${versionOf('nodemailer-eml-api')}`,
  );
});
after(async () => {
  await emu?.close();
});

function makeEmail(transport) {
  return new Email({
    send: true,
    preview: false,
    transport,
    message: { from: 'Shop <shop@example.test>' },
    views: {
      root: `${here}emails`,
      options: { extension: 'tmpl', map: { tmpl: 'lodash' } },
    },
    juiceResources: { applyStyleTags: true, removeStyleTags: true },
  });
}

const RECIPIENTS = ['ann@example.test', 'bob@example.test', 'carol@example.test'];

async function sendOrderShipped(email) {
  return email.send({
    template: 'order-shipped',
    message: {
      to: 'Ann <ann@example.test>',
      cc: 'bob@example.test',
      bcc: 'carol@example.test',
      attachments: [{ filename: 'invoice.txt', content: 'Invoice 42\n', contentType: 'text/plain' }],
    },
    locals: { name: 'Ann', order: { number: 42, items: ['Teapot', 'Two cups'] } },
  });
}

function assertDelivered(info) {
  const messages = emu.messages();
  assert.equal(messages.length, 1);
  const [msg] = messages;
  assert.equal(msg.endpoint, '/v1/send/eml');
  assert.equal(msg.from, 'shop@example.test');
  assert.equal(msg.subject, 'Order #42 shipped');
  // The template's html, with the <style> inlined by juice and removed.
  assert.match(msg.html, /<p class="lead" style="color: #336699;">Hi Ann,<\/p>/);
  assert.match(msg.html, /<li>Teapot<\/li><li>Two cups<\/li>/);
  assert.doesNotMatch(msg.html, /<style/);
  // The text part email-templates made from the html with html-to-text.
  assert.match(msg.text, /Hi Ann,/);
  assert.match(msg.text, /Your order #42 is on its way\./);
  assert.match(msg.text, /\* Teapot/);
  assert.deepEqual(
    msg.attachments.map((a) => [a.filename, a.contentType, a.size]),
    [['invoice.txt', 'text/plain', 11]],
  );
  assert.deepEqual([...msg.recipients].sort(), RECIPIENTS);
  assert.match(headerOf(msg.raw, 'Bcc'), /carol@example\.test/);
  assert.equal(headerOf(emu.mailbox('ann@example.test')[0].raw, 'Bcc'), undefined);
  assert.equal(emu.mailbox('carol@example.test').length, 1);

  const rawMessageId = headerOf(msg.raw, 'Message-ID');
  assert.match(rawMessageId, /^<[^<>@]+@[^<>]+>$/);
  assert.equal(info.messageId, rawMessageId);
  assert.equal(info.messageId, msg.messageId);
  assert.deepEqual([...info.accepted].sort(), RECIPIENTS);
  assert.deepEqual(info.rejected, []);
  assert.deepEqual(info.pending, []);
  assert.equal(info.response, '202 Accepted');
  assert.equal(info.id, msg.id);
  // email-templates adds the message it built.
  assert.equal(info.originalMessage.subject, 'Order #42 shipped');
}

test('transport: nodemailer.createTransport(new EmlApiTransport(...)) — verify, send, close', async () => {
  emu.reset();
  const transporter = nodemailer.createTransport(new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url }));
  const email = makeEmail(transporter);
  assert.equal(email.config.transport, transporter); // used as is (it has sendMail)

  assert.equal(await email.config.transport.verify(), true);
  const viaCallback = await new Promise((resolve, reject) =>
    email.config.transport.verify((err, ok) => (err ? reject(err) : resolve(ok))),
  );
  assert.equal(viaCallback, true);

  const info = await sendOrderShipped(email);
  assertDelivered(info);

  await email.config.transport.close();
  await assert.rejects(() => sendOrderShipped(email), { code: 'ECONNECTION' });
  assert.equal(emu.messages().length, 1);
});

test('transport: new EmlApiTransport(...) — email-templates wraps it with its own createTransport', async () => {
  emu.reset();
  const transport = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
  const email = makeEmail(transport);
  assert.equal(typeof email.config.transport.sendMail, 'function');
  assert.equal(email.config.transport.transporter, transport);
  assert.equal(await email.config.transport.verify(), true);

  const info = await sendOrderShipped(email);
  assertDelivered(info);
  await email.config.transport.close();
});

test('transport: { ...new EmlApiTransport(...) } — a plain copy, deep-merged by lodash into the config, still works', async () => {
  emu.reset();
  const original = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
  const email = makeEmail({ ...original });
  assert.notEqual(email.config.transport.transporter, original);
  assert.equal(await email.config.transport.verify(), true);

  const info = await sendOrderShipped(email);
  assertDelivered(info);
  await email.config.transport.close();
  assert.equal(original.isIdle(), false); // closing the copy closed the transport it was made from
});

test('a wrong key: verify() rejects with EAUTH and send() rejects with EAUTH, nothing is delivered', async () => {
  emu.reset();
  const email = makeEmail(
    nodemailer.createTransport(new EmlApiTransport({ apiKey: 'emu_wrong_key', baseUrl: emu.url, retry: false })),
  );
  await assert.rejects(() => email.config.transport.verify(), { code: 'EAUTH' });
  await assert.rejects(() => sendOrderShipped(email), { code: 'EAUTH' });
  assert.equal(emu.messages().length, 0);
  await email.config.transport.close();
});
