/**
 * A header the relay reads as `a@x.test` is delivered to `a@x.test` only,
 * over real sockets to the emulator (mailparser, with the Nodemailer
 * address parser it bundles): comments and groups that parsers split
 * differently are refused, and a mailbox is one spelling, ASCII case aside,
 * so one `RCPT TO` is never mailed once per Unicode look-alike.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startEmlApiRelay, type EmlApiRelay } from '../../src/relay/index.js';
import { SmtpDialog } from './relay-harness.js';

let emu: Emulator;
let relay: EmlApiRelay;
const opened: SmtpDialog[] = [];

beforeAll(async () => {
  emu = await startEmulator();
  relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false, maxRecipients: 3 });
});
afterEach(() => {
  for (const dialog of opened.splice(0)) dialog.close();
});
afterAll(async () => {
  await relay?.close();
  await emu?.close();
});

/** Sends a message whose recipient fields are `head` to `rcpts`, and reads the reply to its final dot. */
async function sendHead(head: string, rcpts: string[], id: string, mailParameters = '') {
  const { dialog } = await SmtpDialog.open(relay.port);
  opened.push(dialog);
  await dialog.command('EHLO client.example');
  expect((await dialog.command(`MAIL FROM:<s@attacker.test>${mailParameters}`)).code).toBe(250);
  for (const rcpt of rcpts) expect((await dialog.command(`RCPT TO:<${rcpt}>`)).code).toBe(250);
  return dialog.data(
    Buffer.from(`From: s@attacker.test\r\n${head}Subject: ${id}\r\nMessage-ID: <${id}@attacker.test>\r\n\r\nhi\r\n`),
  );
}

/** Every copy the emulator delivered of the message `id`, to whichever mailbox. */
const copiesOf = (id: string) =>
  emu
    .messages()
    .filter((m) => m.messageId === `<${id}@attacker.test>`)
    .flatMap((m) => [...new Set(m.recipients)].flatMap((r) => emu.mailbox(r).filter((c) => c.messageRef === m.id)));

describe('comments and groups that parsers split differently are refused (554 5.6.0), never delivered', () => {
  const evil = (n: number) => Array.from({ length: n }, (_, i) => `<e${i}@y.test>`).join(', ');
  it.each([
    ['a nested comment holding an address', 'To: a@x.test (c (d) <evil@y.test>)\r\n'],
    ['a backslash in a comment', 'To: a@x.test (\\) <evil@y.test>)\r\n'],
    ['a nested comment before the address', 'To: (c (d) <evil@y.test>) <a@x.test>\r\n'],
    ['a nested comment holding 150 addresses', `To: a@x.test (c (d) ${evil(150)} (z))\r\n`],
    ['; in a comment inside a group', 'Cc: G: a@x.test (;<evil@y.test>, <e2@y.test>, <e3@y.test>) ;\r\n'],
    ['; in a quoted display name inside a group', 'Cc: G: "x;<evil@y.test>" <a@x.test>;\r\n'],
    ['; in a quoted local part inside a group', 'Cc: G: "a;b"@x.test;\r\n'],
    ['an address in a plain comment', 'To: a@x.test (evil@y.test)\r\n'],
  ])('%s', async (label, head) => {
    const id = `split-${label.replace(/\W+/g, '-')}`;
    const reply = await sendHead(head, ['a@x.test'], id);
    expect(reply.code, reply.text).toBe(554);
    expect(reply.text).toMatch(/^5\.6\.0 .*(comment|quoted string holding ;)/);
    expect(copiesOf(id)).toEqual([]);
  });

  it('a comment of plain text beside an address, and a quoted name with ; outside a group, are read and delivered', async () => {
    const reply = await sendHead(
      'To: a@x.test (Sales team), Ann (desk 4) <b@x.test>\r\nCc: "Doe; Ann" <c@x.test>\r\n',
      ['a@x.test', 'b@x.test', 'c@x.test'],
      'plain-comments',
    );
    expect(reply.code, reply.text).toBe(250);
    expect(
      copiesOf('plain-comments')
        .map((c) => c.to)
        .sort(),
    ).toEqual(['a@x.test', 'b@x.test', 'c@x.test']);
  });
});

describe('one RCPT TO is one mailbox: spellings that differ beyond ASCII case are other recipients', () => {
  const bold = (text: string) => [...text].map((c) => String.fromCodePoint(0x1d41a + c.charCodeAt(0) - 97)).join('');
  const full = (text: string) => [...text].map((c) => String.fromCodePoint(0xff41 + c.charCodeAt(0) - 97)).join('');

  it.each([
    ['without SMTPUTF8', ''],
    ['with SMTPUTF8', ' SMTPUTF8'],
  ])(
    'a To header of 200 Unicode look-alikes of the one RCPT TO (%s) is refused, nothing delivered',
    async (label, parameters) => {
      const spellings: string[] = [];
      for (let i = 0; spellings.length < 200; i++) {
        const letters = [...'example'].map((c, j) => ((i >> j) & 1 ? bold(c) : (i >> (j + 7)) & 1 ? full(c) : c));
        spellings.push(`victim@${letters.join('')}.test`);
      }
      const id = `lookalikes-${label.replace(/\W+/g, '-')}`;
      const reply = await sendHead(`To: ${spellings.join(',\r\n ')}\r\n`, ['victim@example.test'], id, parameters);
      expect(reply.code, reply.text).toBe(550);
      expect(reply.text).toMatch(/^5\.7\.1 The headers name recipients .*not in RCPT TO: victim@𝐞xample/u);
      expect(copiesOf(id)).toEqual([]);
    },
  );

  it('RCPT TO in xn-- form is the mailbox it spells, not the one UTS #46 maps its decoded form to', async () => {
    // smtp-server hands the handlers xn--victimexample-882l decoded: "victim。example", which UTS #46 reads as victim.example.
    const reply = await sendHead('To: ceo@victim.example.test\r\n', ['ceo@xn--victimexample-882l.test'], 'puny-mapped');
    expect(reply.code, reply.text).toBe(550);
    expect(reply.text).toMatch(/^5\.7\.1 .*ceo@victim\.example\.test/);
    expect(emu.mailbox('ceo@victim.example.test')).toEqual([]);
  });

  it('an IDN written as xn-- in RCPT TO and in the header is delivered once; written in Unicode in the header it is refused', async () => {
    const same = await sendHead('To: ceo@xn--bcher-kva.example\r\n', ['ceo@xn--bcher-kva.example'], 'idn-same');
    expect(same.code, same.text).toBe(250);
    expect(copiesOf('idn-same')).toHaveLength(1);
    // Nothing was added as Bcc (the envelope recipient is the header's) in Unicode, which the client never wrote.
    expect(copiesOf('idn-same')[0]!.raw.toString()).not.toMatch(/^bcc:/im);
    const other = await sendHead('To: ceo@bücher.example\r\n', ['ceo@xn--bcher-kva.example'], 'idn-other', ' SMTPUTF8');
    expect(other.code, other.text).toBe(550);
    expect(copiesOf('idn-other')).toEqual([]);
  });

  it('an envelope-only RCPT TO in xn-- form is written into Bcc as the client wrote it', async () => {
    const reply = await sendHead('To: a@x.test\r\n', ['a@x.test', 'ceo@xn--bcher-kva.example'], 'idn-bcc');
    expect(reply.code, reply.text).toBe(250);
    const message = emu.messages().find((m) => m.messageId === '<idn-bcc@attacker.test>')!;
    expect(message.raw.toString('latin1')).toContain('Bcc: ceo@xn--bcher-kva.example\r\n');
  });

  it('ASCII case variants are one recipient, delivered once; past maxRecipients spellings, refused', async () => {
    const ok = await sendHead('To: Victim@example.test, VICTIM@example.test\r\n', ['victim@EXAMPLE.test'], 'case-ok');
    expect(ok.code, ok.text).toBe(250);
    expect(copiesOf('case-ok')).toHaveLength(1);
    // The relay takes 3 recipients per message: 4 spellings of one are refused.
    const head = 'To: Victim@example.test, VICTIM@example.test, victim@example.test, vIctim@example.test\r\n';
    const many = await sendHead(head, ['victim@example.test'], 'case-many');
    expect(many.code, many.text).toBe(554);
    expect(many.text).toMatch(/^5\.6\.0 .*spell their recipients in 4 different ways, more than the relay's 3/);
    expect(copiesOf('case-many')).toEqual([]);
  });
});
