import { it } from 'vitest';
import { startEmulator } from '../../src/emulator/index.js';
import { startEmlApiRelay } from '../../src/relay/index.js';
import { SmtpDialog } from './relay-harness.js';
const plain = Buffer.from('\0billing\0billing-secret-pw').toString('base64');
it('attack', { timeout: 120_000 }, async () => {
  const emu = await startEmulator({});
  const relay = await startEmlApiRelay({ baseUrl: emu.url, apiKey: emu.apiKey, port: 0, retry: false, logger: false, maxClientsPerAddress: 1000,
    users: [{ username: 'billing', password: 'billing-secret-pw', senders: ['billing@shop.example', '*@billing.shop.example'] }] });
  let n = 0;
  const mail = async (mailFrom: string, head: string) => {
    const { dialog } = await SmtpDialog.open(relay.port, '127.0.0.1');
    await dialog.command('EHLO x');
    await dialog.command(`AUTH PLAIN ${plain}`);
    const m = await dialog.command(`MAIL FROM:${mailFrom}`);
    if (m.code !== 250) { dialog.close(); return `MAIL ${m.code} ${m.text}`; }
    await dialog.command('RCPT TO:<ann@example.test>');
    const id = `<atk-${++n}@example.test>`;
    const r = await dialog.data(Buffer.concat([Buffer.from(head, 'latin1').length ? Buffer.from(head, 'utf8') : Buffer.alloc(0), Buffer.from(`\r\nTo: ann@example.test\r\nMessage-ID: ${id}\r\n\r\nhi\r\n`)]));
    dialog.close();
    const got = emu.messages().at(-1) && r.code === 250 ? emu.messages().at(-1) : undefined;
    return `DATA ${r.code} ${r.text.slice(0, 110)}${got ? ` | DELIVERED from=${JSON.stringify(got.from ?? '')} raw=${JSON.stringify(got.raw.toString().slice(0, 200))}` : ''}`;
  };
  const ok = '<billing@shop.example>';
  const cases: [string, string][] = [
    [ok, ('X-Pad: ' + 'x'.repeat(900) + '\r\n').repeat(110) + 'From: billing@shop.example\r\nFrom: ceo@bank.example'],
    [ok, 'From: billing@shop.example\r\n' + ('X-Pad: ' + 'x'.repeat(900) + '\r\n').repeat(110) + 'From: ceo@bank.example'],
    [ok, 'From: billing@shop.example\n\nFrom: ceo@bank.example'],
    [ok, 'From: billing@shop.example\r\n\nFrom: ceo@bank.example'],
    [ok, 'From: billing@shop.example\n\r\nFrom: ceo@bank.example'],
    [ok, 'From: billing@shop.example\r\rFrom: ceo@bank.example'],
    [ok, 'From: =?utf-7?Q?ceo+AEA-bank.example?= <billing@shop.example>'],
    [ok, 'From: =?utf-16le?B?' + Buffer.from('ceo@bank.example', 'utf16le').toString('base64') + '?= <billing@shop.example>'],
    [ok, 'From: "\u202eelpmaxe.knab@oec" <billing@shop.example>'],
    [ok, 'From: billing@shop.example\r\nFrom: '],
    [ok, 'From: billing@shop.example\r\nFrom: undisclosed:;'],
    [ok, 'From: billing@shop.example\x00ceo@bank.example'],
    [ok, 'From: billing@shop.example\r\nSender: billing@shop.example\r\nSender: ceo@bank.example'],
    [ok, 'From:\r\n ceo@bank.example'],
    ['<>', 'From: ceo@bank.example'],
    [ok, 'From: billing@xn--shop-.example'],
    [ok, 'From: billing@sh\u00adop.example'],
    [ok, 'From: billing@shop.example\r\n\tFrom: ceo@bank.example'],
  ];
  for (const [m, h] of cases) console.log(JSON.stringify(m), JSON.stringify(h), '=>', await mail(m, h));
  await relay.close(); await emu.close();
});
