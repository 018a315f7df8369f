// The same packed EmlApiTransport under each Nodemailer major's Mail class
// (npm aliases, pinned in package.json): createTransport(instance),
// createTransport({ ...copy }), verify() as a Promise and with a callback,
// sendMail (Promise and callback) with To/Cc/Bcc and an attachment, close().
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { EmlApiTransport } from 'nodemailer-eml-api';
import { startEmulator } from 'nodemailer-eml-api/emulator';

const here = fileURLToPath(new URL('.', import.meta.url));
const pkg = JSON.parse(readFileSync(`${here}package.json`, 'utf8'));
const versionOf = (name) => JSON.parse(readFileSync(`${here}node_modules/${name}/package.json`, 'utf8')).version;

/** Every `nodemailer-*` alias in package.json, with the version it pins. */
const MATRIX = Object.entries(pkg.dependencies)
  .filter(([name, spec]) => name.startsWith('nodemailer-') && spec.startsWith('npm:nodemailer@'))
  .map(([alias, spec]) => ({ alias, pinned: spec.slice('npm:nodemailer@'.length) }));
/** Each alias's module (Nodemailer is CommonJS: its exports are the default export). */
const loaded = new Map(await Promise.all(MATRIX.map(async ({ alias }) => [alias, (await import(alias)).default])));

const RECIPIENTS = ['ann@example.test', 'bob@example.test', 'carol@example.test'];

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
    `nodemailer-eml-api ${versionOf('nodemailer-eml-api')}; matrix: ${MATRIX.map((m) => m.pinned).join(', ')}`,
  );
});
after(async () => {
  await emu?.close();
});

const mail = (subject) => ({
  from: 'Shop <shop@example.test>',
  to: 'Ann <ann@example.test>',
  cc: 'bob@example.test',
  bcc: 'carol@example.test',
  subject,
  text: 'Hello from the matrix',
  html: '<p>Hello from the <b>matrix</b></p>',
  attachments: [{ filename: 'invoice.txt', content: 'Invoice 42\n', contentType: 'text/plain' }],
});

/** Asserts the last accepted message against the info sendMail resolved with. */
function assertDelivered(info, subject) {
  const msg = emu.messages().at(-1);
  assert.ok(msg, 'the emulator received nothing');
  assert.equal(msg.endpoint, '/v1/send/eml');
  assert.equal(msg.subject, subject);
  assert.equal(msg.from, 'shop@example.test');
  assert.match(msg.text, /Hello from the matrix/);
  assert.match(msg.html, /<b>matrix<\/b>/);
  assert.deepEqual(
    msg.attachments.map((a) => [a.filename, a.contentType, a.size]),
    [['invoice.txt', 'text/plain', 11]],
  );
  assert.deepEqual([...msg.recipients].sort(), RECIPIENTS);
  assert.match(headerOf(msg.raw, 'Bcc'), /carol@example\.test/);
  const rawMessageId = headerOf(msg.raw, 'Message-ID');
  assert.match(rawMessageId, /^<[^<>@]+@[^<>]+>$/);
  assert.equal(info.messageId, rawMessageId);
  assert.deepEqual([...info.accepted].sort(), RECIPIENTS);
  assert.deepEqual(info.rejected, []);
  assert.deepEqual(info.pending, []);
  assert.deepEqual(info.envelope.from, 'shop@example.test');
  assert.deepEqual([...info.envelope.to].sort(), RECIPIENTS);
  assert.equal(info.response, '202 Accepted');
  assert.equal(info.id, msg.id);
}

for (const { alias, pinned } of MATRIX) {
  describe(`nodemailer ${pinned} (${alias})`, () => {
    const nodemailer = loaded.get(alias);
    const newTransport = () => new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });

    test('the alias resolves to the pinned version', () => {
      assert.equal(versionOf(alias), pinned);
    });

    const shapes = {
      'createTransport(new EmlApiTransport(...))': (t) => t,
      'createTransport({ ...transport }) (spread copy)': (t) => ({ ...t }),
      'createTransport(Object.assign({}, transport)) (assign copy)': (t) => Object.assign({}, t),
    };
    for (const [label, shape] of Object.entries(shapes)) {
      test(`${label}: verify (Promise and callback), sendMail (Promise and callback), close`, async () => {
        const transport = newTransport();
        const transporter = nodemailer.createTransport(shape(transport));
        assert.equal(transporter.transporter.name, 'EmlApiTransport');

        assert.equal(await transporter.verify(), true);
        const [cbErr, cbOk] = await new Promise((resolve) => transporter.verify((err, ok) => resolve([err, ok])));
        assert.equal(cbErr, null);
        assert.equal(cbOk, true);
        assert.equal(transporter.isIdle(), true);

        const before = emu.messages().length;
        const subject = `Promise ${pinned} ${label}`;
        const info = await transporter.sendMail(mail(subject));
        assertDelivered(info, subject);

        const cbSubject = `Callback ${pinned} ${label}`;
        const cbInfo = await new Promise((resolve, reject) =>
          transporter.sendMail(mail(cbSubject), (err, i) => (err ? reject(err) : resolve(i))),
        );
        assertDelivered(cbInfo, cbSubject);
        assert.notEqual(cbInfo.messageId, info.messageId);
        assert.equal(emu.messages().length, before + 2);

        const closing = transporter.close();
        assert.equal(typeof closing?.then, 'function', 'close() hands back the transport Promise');
        await closing;
        assert.equal(transporter.isIdle(), false);
        await assert.rejects(() => transporter.sendMail(mail('after close')), { code: 'ECONNECTION' });
        assert.equal(emu.messages().length, before + 2);
      });
    }

    test('close(callback) is called once; verify with a wrong key rejects with EAUTH both ways', async () => {
      const transporter = nodemailer.createTransport(newTransport());
      const calls = [];
      await new Promise((resolve) =>
        transporter.close((err) => {
          calls.push(err);
          resolve();
        }),
      );
      await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(calls, [null]);

      const wrong = nodemailer.createTransport(
        new EmlApiTransport({ apiKey: 'emu_wrong_key', baseUrl: emu.url, retry: false }),
      );
      await assert.rejects(() => wrong.verify(), { code: 'EAUTH' });
      const cbErr = await new Promise((resolve) => wrong.verify((err) => resolve(err)));
      assert.equal(cbErr?.code, 'EAUTH');
      await assert.rejects(() => wrong.sendMail(mail('wrong key')), { code: 'EAUTH' });
      await wrong.close();
    });
  });
}
