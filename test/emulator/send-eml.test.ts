import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  b64,
  call,
  type CallOptions,
  checkAnswer,
  eml,
  emulatorApi,
  expectAccepted,
  expectError,
  mailBody,
} from '../helpers/emulator-api.js';

/**
 * Real HTTP requests against the emulator's POST /v1/send/eml, checked against
 * the error table and success shapes of ../shared/CONTRACT.md.
 */

const SEND_EML = '/v1/send/eml';
const GROUPS_KEY = 'k-groups';
const SENDER_KEY = 'k-sender';
/** A key of another account than the ready key's. */
const OTHER_ACCOUNT_KEY = 'k-other-account';

let emu: Emulator;
const { post } = emulatorApi(() => emu);

beforeAll(async () => {
  emu = await startEmulator({
    apiKeys: [
      { key: GROUPS_KEY, scopes: ['group:insert'] },
      { key: SENDER_KEY, scopes: ['sender'] },
      { key: OTHER_ACCOUNT_KEY, scopes: ['sender'], account: 'other' },
    ],
  });
});

afterAll(() => emu.close());

describe('POST /v1/send/eml authentication', () => {
  it('answers 401 missing_api_key when the X-API-KEY header is absent', async () => {
    const answer = await call(emu.url, SEND_EML, {
      body: mailBody(),
      headers: { 'content-type': 'application/json' },
    });
    expect(expectError(answer, 401, 'missing_api_key')).toMatch(/X-API-KEY/i);
  });

  it('answers 401 missing_api_key when the X-API-KEY header is empty', async () => {
    const answer = await post(SEND_EML, mailBody(), { 'x-api-key': '' });
    expectError(answer, 401, 'missing_api_key');
  });

  it('answers 401 invalid_api_key for a key the emulator does not know', async () => {
    const answer = await post(SEND_EML, mailBody(), { 'x-api-key': 'not-a-real-key' });
    const message = expectError(answer, 401, 'invalid_api_key');
    expect(message).not.toContain('not-a-real-key');
  });

  it('answers 403 missing_scope naming "sender" for a key without that scope', async () => {
    const before = emu.messages().length;
    const answer = await post(SEND_EML, mailBody(), { 'x-api-key': GROUPS_KEY });
    expect(expectError(answer, 403, 'missing_scope')).toContain('sender');
    expect(emu.messages()).toHaveLength(before);
  });

  it('accepts a key that holds only the "sender" scope', async () => {
    expectAccepted(await post(SEND_EML, mailBody(), { 'x-api-key': SENDER_KEY }));
  });
});

describe('POST /v1/send/eml content type', () => {
  it('answers 415 unsupported_media_type for text/plain', async () => {
    const answer = await post(SEND_EML, mailBody(), { 'content-type': 'text/plain' });
    expect(expectError(answer, 415, 'unsupported_media_type')).toContain('application/json');
  });

  it('answers 415 unsupported_media_type when there is no Content-Type header', async () => {
    const answer = await call(emu.url, SEND_EML, { body: mailBody(), headers: { 'x-api-key': emu.apiKey } });
    expectError(answer, 415, 'unsupported_media_type');
  });

  it('accepts application/json with a charset parameter', async () => {
    expectAccepted(await post(SEND_EML, mailBody(), { 'content-type': 'application/json; charset=utf-8' }));
  });

  it('accepts the media type in any letter case', async () => {
    expectAccepted(await post(SEND_EML, mailBody(), { 'content-type': 'Application/JSON' }));
  });
});

describe('POST /v1/send/eml request body', () => {
  it('answers 400 invalid_json for malformed JSON', async () => {
    expectError(await post(SEND_EML, '{"mail": '), 400, 'invalid_json');
  });

  it('answers 400 invalid_json for an empty body', async () => {
    expectError(await post(SEND_EML, ''), 400, 'invalid_json');
  });

  it('answers 400 invalid_json for a body that is not UTF-8 (RFC 8259), delivering nothing', async () => {
    const before = emu.messages().length;
    const latin1Name = JSON.stringify({
      to: [{ email: 'latin1@example.test', name: 'Andr\u00e9' }],
      from: { email: 'shop@example.test' },
      subject: 'Caf\u00e9',
      textContent: { text: 'x' },
    });
    for (const [path, bytes] of [
      [SEND_EML, Buffer.concat([Buffer.from('{"mail":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')])],
      [SEND_EML, Buffer.concat([Buffer.from('{"mail":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')])],
      ['/v1/send/email', Buffer.from(latin1Name, 'latin1')],
    ] as const) {
      const answer = await call(emu.url, path, {
        body: Readable.from([bytes]),
        headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
      });
      expect(expectError(answer, 400, 'invalid_json')).toContain('UTF-8');
    }
    expect(emu.messages()).toHaveLength(before);
    expect(emu.mailbox('latin1@example.test')).toHaveLength(0);
  });

  it('answers 400 invalid_request for a JSON array body', async () => {
    expectError(await post(SEND_EML, JSON.stringify([{ mail: b64(eml()) }])), 400, 'invalid_request');
  });

  it('answers 400 invalid_request for a JSON string or null body', async () => {
    expectError(await post(SEND_EML, JSON.stringify(b64(eml()))), 400, 'invalid_request');
    expectError(await post(SEND_EML, 'null'), 400, 'invalid_request');
  });

  it('answers 400 invalid_request naming mail when mail is missing', async () => {
    expect(expectError(await post(SEND_EML, '{}'), 400, 'invalid_request')).toContain('mail');
  });

  it('answers 400 invalid_request naming mail when mail is not a string', async () => {
    for (const mail of [42, null, true, [b64(eml())], { data: b64(eml()) }]) {
      const answer = await post(SEND_EML, JSON.stringify({ mail }));
      expect(expectError(answer, 400, 'invalid_request')).toContain('mail');
    }
  });

  it('answers 400 invalid_request naming an unknown field such as a misspelt "mial"', async () => {
    const alone = await post(SEND_EML, JSON.stringify({ mial: b64(eml()) }));
    expect(expectError(alone, 400, 'invalid_request')).toContain('mial');
    const before = emu.messages().length;
    const beside = await post(SEND_EML, JSON.stringify({ mail: b64(eml()), mial: 'x' }));
    expect(expectError(beside, 400, 'invalid_request')).toContain('mial');
    expect(emu.messages()).toHaveLength(before);
  });
});

describe('POST /v1/send/eml URL length', () => {
  const padded = (length: number) => `${SEND_EML}?${'p'.repeat(length - SEND_EML.length - 1)}`;

  it('serves a URL of 2,048 characters, its documented limit, and refuses one of 2,049 with 400 invalid_request', async () => {
    expect(padded(2048)).toHaveLength(2048);
    expectAccepted(await post(padded(2048), mailBody(eml(['To: url-limit@example.test']))));
    const over = await post(padded(2049), mailBody(eml(['To: url-limit-b@example.test'])));
    expect(expectError(over, 400, 'invalid_request')).toContain('2048');
    expect(emu.mailbox('url-limit-b@example.test')).toHaveLength(0);
  });
});

describe('rate limit', () => {
  it("answers 429 rate_limited with Retry-After in whole seconds past a key's burst, delivering nothing; other keys go on", async () => {
    // A refill of one request per 1,000 s: nothing comes back while the test runs.
    const limited = await startEmulator({
      rateLimit: { requestsPerSecond: 0.001, burst: 2 },
      apiKeys: [{ key: SENDER_KEY, scopes: ['sender'] }],
    });
    try {
      const send = (to: string, key = limited.apiKey) =>
        call(limited.url, SEND_EML, {
          body: mailBody(eml([`To: ${to}`])),
          headers: { 'x-api-key': key, 'content-type': 'application/json' },
        });
      expectAccepted(await send('rate-1@example.test'));
      expectAccepted(await send('rate-2@example.test'));
      const over = await send('rate-3@example.test');
      expectError(over, 429, 'rate_limited');
      expect(over.headers['retry-after']).toMatch(/^[1-9]\d*$/);
      expect(Number(over.headers['retry-after'])).toBeGreaterThan(900);
      expect(limited.mailbox('rate-3@example.test')).toHaveLength(0);
      expectAccepted(await send('rate-4@example.test', SENDER_KEY));
    } finally {
      await limited.close();
    }
  });
});

describe('POST /v1/send/eml Base64', () => {
  const sendMail = (mail: string) => post(SEND_EML, JSON.stringify({ mail }));

  it('answers 400 invalid_base64 for a character outside the Base64 alphabet', async () => {
    const valid = b64(eml());
    const message = expectError(await sendMail(`${valid.slice(0, 8)}*${valid.slice(9)}`), 400, 'invalid_base64');
    expect(message).toContain('mail');
    expect(message).toContain('*');
  });

  it('answers 400 invalid_base64 for URL-safe Base64 ("-" and "_")', async () => {
    // 0xfb 0xff encodes to "+/8=" in standard Base64 and "-_8" in base64url.
    const standard = b64(Buffer.concat([Buffer.from(eml()), Buffer.from([0xfb, 0xff])]));
    expect(standard).toMatch(/[+/]/);
    for (const urlSafe of [standard.replace(/\+/g, '-'), standard.replace(/\//g, '_'), 'ab-_']) {
      expect(expectError(await sendMail(urlSafe), 400, 'invalid_base64')).toContain('mail');
    }
  });

  it('answers 400 invalid_base64 when the length is not a multiple of 4', async () => {
    // "Hello" is "SGVsbG8=" padded; without the padding it has 7 characters.
    expect(expectError(await sendMail('SGVsbG8'), 400, 'invalid_base64')).toContain('mail');
    const valid = b64(eml());
    expectError(await sendMail(`${valid}A`), 400, 'invalid_base64');
  });

  it('answers 400 invalid_base64 for padding in the middle', async () => {
    expectError(await sendMail(`SGVsbG8=${b64(eml())}`), 400, 'invalid_base64');
  });

  it('answers 400 invalid_base64 for an empty string or only whitespace', async () => {
    expect(expectError(await sendMail(''), 400, 'invalid_base64')).toContain('mail');
    expectError(await sendMail('\r\n  \r\n'), 400, 'invalid_base64');
  });

  it('accepts MIME-style Base64 wrapped with CRLF every 76 characters', async () => {
    const text = eml(['To: ann@example.test'], 'A body long enough to need several Base64 lines. '.repeat(10));
    const encoded = b64(text);
    expect(encoded.length).toBeGreaterThan(76 * 3);
    const wrapped = encoded.match(/.{1,76}/g)!.join('\r\n');
    const before = emu.messages().length;
    expectAccepted(await sendMail(wrapped));
    expect(emu.messages()).toHaveLength(before + 1);
    expect(emu.messages().at(-1)!.raw.equals(Buffer.from(text))).toBe(true);
  });
});

describe('POST /v1/send/eml message checks', () => {
  it('answers 400 invalid_eml when the decoded bytes have no header fields', async () => {
    const message = expectError(
      await post(SEND_EML, JSON.stringify({ mail: b64('just some text without headers') })),
      400,
      'invalid_eml',
    );
    expect(message).toContain('mail');
  });

  it('answers 400 invalid_eml for several lines none of which is a header field', async () => {
    const text = ['no colon on this line', 'nor on this one', '', 'body'].join('\r\n');
    expectError(await post(SEND_EML, JSON.stringify({ mail: b64(text) })), 400, 'invalid_eml');
  });

  it('answers 400 invalid_eml naming From for a message without a From header', async () => {
    const text = ['To: ann@example.test', 'Subject: No sender', '', 'Hello'].join('\r\n');
    const message = expectError(await post(SEND_EML, JSON.stringify({ mail: b64(text) })), 400, 'invalid_eml');
    expect(message).toContain('From');
  });

  it('answers 400 invalid_address naming the header for To: not-an-address', async () => {
    const before = emu.messages().length;
    const message = expectError(await post(SEND_EML, mailBody(eml(['To: not-an-address']))), 400, 'invalid_address');
    expect(message).toContain('To');
    expect(message).toContain('not-an-address');
    expect(emu.messages()).toHaveLength(before);
  });

  it('answers 400 invalid_address when one of several recipients is invalid, and delivers to none', async () => {
    const before = emu.mailbox('valid-one@example.test').length;
    const answer = await post(SEND_EML, mailBody(eml(['To: valid-one@example.test', 'Cc: broken@'])));
    expectError(answer, 400, 'invalid_address');
    expect(emu.mailbox('valid-one@example.test')).toHaveLength(before);
  });

  it('answers 400 no_recipients for a message with only From and Subject', async () => {
    const text = ['From: shop@example.test', 'Subject: Nobody', '', 'Hello'].join('\r\n');
    expectError(await post(SEND_EML, JSON.stringify({ mail: b64(text) })), 400, 'no_recipients');
  });
});

describe('POST /v1/send/eml body limit', () => {
  let small: Emulator;
  beforeAll(async () => {
    small = await startEmulator({ maxRequestSize: 1024 });
  });
  afterAll(() => small.close());

  const headers = (): Record<string, string> => ({ 'x-api-key': small.apiKey, 'content-type': 'application/json' });

  it('answers 413 payload_too_large for a body over the configured limit', async () => {
    const body = mailBody(eml(['To: ann@example.test'], 'x'.repeat(4096)));
    expect(Buffer.byteLength(body)).toBeGreaterThan(1024);
    const answer = await call(small.url, SEND_EML, { body, headers: headers() });
    expect(expectError(answer, 413, 'payload_too_large')).toContain('1024');
    expect(small.messages()).toHaveLength(0);
  });

  it('answers 413 payload_too_large for a chunked body with no Content-Length', async () => {
    const body = mailBody(eml(['To: ann@example.test'], 'y'.repeat(3000)));
    const stream = Readable.from([body.slice(0, 900), body.slice(900)]);
    const answer = await call(small.url, SEND_EML, { body: stream, headers: headers() });
    expectError(answer, 413, 'payload_too_large');
    expect(small.messages()).toHaveLength(0);
  });

  it('still accepts a body under the limit afterwards', async () => {
    const body = mailBody();
    expect(Buffer.byteLength(body)).toBeLessThan(1024);
    expectAccepted(await call(small.url, SEND_EML, { body, headers: headers() }));
    expect(small.messages()).toHaveLength(1);
  });
});

describe('POST /v1/send/eml success', () => {
  const message = [
    'From: Shop <shop@example.test>',
    'To: Ann <ann@example.test>, ANN@Example.test',
    'Cc: bob@example.test, ann@example.test',
    'Bcc: hidden@example.test, Bob@example.test',
    'Subject: Hi',
    'Message-ID: <success-1@example.test>',
    '',
    'Hello',
  ].join('\r\n');

  it('answers 202 { id, messageId, recipients } counting To, Cc and Bcc once each, case-insensitively', async () => {
    const before = emu.messages().length;
    const accepted = expectAccepted(await post(SEND_EML, mailBody(message)));
    expect(accepted.messageId).toBe('<success-1@example.test>');
    expect(accepted.recipients).toBe(3);
    const messages = emu.messages();
    expect(messages).toHaveLength(before + 1);
    const stored = messages.at(-1)!;
    expect(stored.id).toBe(accepted.id);
    expect(stored.endpoint).toBe(SEND_EML);
    expect(stored.from).toBe('shop@example.test');
    expect(stored.recipients.map((r) => r.toLowerCase()).sort()).toEqual([
      'ann@example.test',
      'bob@example.test',
      'hidden@example.test',
    ]);
  });

  it('delivers one copy to each recipient without the Bcc header, and keeps Bcc in the uploaded raw', async () => {
    const accepted = expectAccepted(await post(SEND_EML, mailBody(message.replace('success-1', 'success-2'))));
    const stored = emu.messages().find((m) => m.id === accepted.id)!;
    expect(stored.raw.toString()).toMatch(/^bcc:/im);
    for (const address of ['ann@example.test', 'BOB@example.test', 'hidden@example.test']) {
      const copies = emu.mailbox(address).filter((c) => c.messageRef === accepted.id);
      expect(copies, address).toHaveLength(1);
      const raw = copies[0]!.raw.toString();
      expect(raw).not.toMatch(/^bcc:/im);
      expect(raw).not.toContain('hidden@example.test');
      expect(raw).toMatch(/^to:/im);
      expect(raw).toMatch(/^cc:/im);
      expect(raw).toMatch(/\r\n\r\nHello$/);
    }
  });

  it('removes a folded Bcc header entirely and delivers to each of its addresses', async () => {
    const text = eml(['To: ann@example.test', 'Bcc: secret-one@example.test,', '\tsecret-two@example.test']);
    const accepted = expectAccepted(await post(SEND_EML, mailBody(text)));
    expect(accepted.recipients).toBe(3);
    for (const address of ['ann@example.test', 'secret-one@example.test', 'secret-two@example.test']) {
      const [copy] = emu.mailbox(address).filter((c) => c.messageRef === accepted.id);
      expect(copy, address).toBeDefined();
      expect(copy!.raw.toString()).not.toMatch(/^bcc:/im);
      expect(copy!.raw.toString()).not.toContain('secret-');
    }
  });

  it('strips Bcc from a message with bare LF line endings too', async () => {
    const text = ['From: shop@example.test', 'To: lf-to@example.test', 'Bcc: lf-bcc@example.test', '', 'LF only'].join(
      '\n',
    );
    const accepted = expectAccepted(await post(SEND_EML, mailBody(text)));
    expect(accepted.recipients).toBe(2);
    for (const address of ['lf-to@example.test', 'lf-bcc@example.test']) {
      const [copy] = emu.mailbox(address).filter((c) => c.messageRef === accepted.id);
      expect(copy, address).toBeDefined();
      expect(copy!.raw.toString()).not.toMatch(/^bcc:/im);
      expect(copy!.raw.toString()).toMatch(/\n\nLF only$/);
    }
  });

  it('leaves a "Bcc:" line in the body untouched', async () => {
    const text = eml(['To: body-bcc@example.test'], 'Bcc: this line is body text\r\n');
    const accepted = expectAccepted(await post(SEND_EML, mailBody(text)));
    const [copy] = emu.mailbox('body-bcc@example.test').filter((c) => c.messageRef === accepted.id);
    expect(copy!.raw.toString()).toBe(text);
  });

  it('does not deliver to a .invalid recipient of any header and records it in failed, as /v1/send/email does', async () => {
    const text = eml(['To: eml-good@example.test, eml-bad@nowhere.invalid', 'Bcc: eml-hidden@also.INVALID']);
    const accepted = expectAccepted(await post(SEND_EML, mailBody(text)));
    expect(accepted.recipients).toBe(3);
    const record = emu.messages().find((m) => m.id === accepted.id)!;
    expect(record.recipients).toEqual(['eml-good@example.test']);
    expect(record.failed).toEqual(['eml-bad@nowhere.invalid', 'eml-hidden@also.INVALID']);
    expect(emu.mailbox('eml-bad@nowhere.invalid')).toHaveLength(0);
    expect(emu.mailbox('eml-hidden@also.INVALID')).toHaveLength(0);
    expect(emu.mailbox('eml-good@example.test').filter((c) => c.messageRef === accepted.id)).toHaveLength(1);
  });

  it('accepts a message whose every recipient is undeliverable and delivers no copy', async () => {
    const accepted = expectAccepted(await post(SEND_EML, mailBody(eml(['To: eml-only@nowhere.invalid']))));
    expect(accepted.recipients).toBe(1);
    expect(emu.messages().find((m) => m.id === accepted.id)!.failed).toEqual(['eml-only@nowhere.invalid']);
    expect(emu.mailbox('eml-only@nowhere.invalid')).toHaveLength(0);
  });

  it('answers a fresh id for every accepted message', async () => {
    const first = expectAccepted(await post(SEND_EML, mailBody()));
    const second = expectAccepted(await post(SEND_EML, mailBody()));
    expect(first.id).not.toBe(second.id);
  });
});

describe('POST /v1/send/eml Idempotency-Key', () => {
  const countFor = (id: string) => emu.messages().filter((m) => m.id === id).length;

  it('replays the first answer for a repeated key and delivers only once', async () => {
    const body = mailBody(eml(['To: idem-1@example.test']));
    const before = emu.messages().length;
    const first = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-1' });
    const second = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-1' });
    const a = expectAccepted(first);
    const b = expectAccepted(second);
    expect(b).toEqual(a);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(emu.messages()).toHaveLength(before + 1);
    expect(emu.mailbox('idem-1@example.test')).toHaveLength(1);
    expect(countFor(a.id)).toBe(1);
  });

  it('delivers once for two concurrent requests with the same key', async () => {
    const body = mailBody(eml(['To: idem-2@example.test']));
    const before = emu.messages().length;
    const answers = await Promise.all([
      post(SEND_EML, body, { 'idempotency-key': 'idem-key-2' }),
      post(SEND_EML, body, { 'idempotency-key': 'idem-key-2' }),
    ]);
    const [a, b] = answers.map(expectAccepted);
    expect(b!.id).toBe(a!.id);
    expect(answers.filter((x) => x.headers['idempotent-replayed'] === 'true')).toHaveLength(1);
    expect(emu.messages()).toHaveLength(before + 1);
    expect(emu.mailbox('idem-2@example.test')).toHaveLength(1);
  });

  it('refuses a repeated key with a different body with 422 idempotency_key_reused, delivering nothing more', async () => {
    const first = mailBody(eml(['To: idem-7@example.test'], 'first message'));
    const second = mailBody(eml(['To: idem-7b@example.test'], 'a different message'));
    expectAccepted(await post(SEND_EML, first, { 'idempotency-key': 'idem-key-7' }));
    const reused = await post(SEND_EML, second, { 'idempotency-key': 'idem-key-7' });
    expect(expectError(reused, 422, 'idempotency_key_reused')).toContain('Idempotency-Key');
    expect(emu.mailbox('idem-7@example.test')).toHaveLength(1);
    expect(emu.mailbox('idem-7b@example.test')).toHaveLength(0);
    // The first body still replays.
    const replay = await post(SEND_EML, first, { 'idempotency-key': 'idem-key-7' });
    expectAccepted(replay);
    expect(replay.headers['idempotent-replayed']).toBe('true');
  });

  it('refuses a different body under a key whose first request is still being handled', async () => {
    const first = mailBody(eml(['To: idem-8@example.test'], 'x'.repeat(200_000)));
    const second = mailBody(eml(['To: idem-8b@example.test'], 'other'));
    const [a, b] = await Promise.all([
      post(SEND_EML, first, { 'idempotency-key': 'idem-key-8' }),
      post(SEND_EML, second, { 'idempotency-key': 'idem-key-8' }),
    ]);
    const statuses = [a.status, b.status].sort();
    expect(statuses).toEqual([202, 422]);
    expect(emu.mailbox('idem-8@example.test').length + emu.mailbox('idem-8b@example.test').length).toBe(1);
  });

  it('is scoped to the account: another key of the account replays, another account sends its own', async () => {
    const body = mailBody(eml(['To: idem-9@example.test']));
    // The ready key and SENDER_KEY belong to the default account: a worker fleet rotating its key.
    const first = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-9' });
    const rotated = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-9', 'x-api-key': SENDER_KEY });
    expect(expectAccepted(rotated).id).toBe(expectAccepted(first).id);
    expect(rotated.headers['idempotent-replayed']).toBe('true');
    expect(emu.mailbox('idem-9@example.test')).toHaveLength(1);
    // Another account never sees the first account's key: a different body is its own send, not a 422.
    const elsewhere = mailBody(eml(['To: idem-9b@example.test'], 'another account'));
    const other = await post(SEND_EML, elsewhere, { 'idempotency-key': 'idem-key-9', 'x-api-key': OTHER_ACCOUNT_KEY });
    expect(expectAccepted(other).id).not.toBe(expectAccepted(first).id);
    expect(other.headers['idempotent-replayed']).toBeUndefined();
    expect(emu.mailbox('idem-9b@example.test')).toHaveLength(1);
    // Nor does the first account see the other's: its own body still replays, the other's is refused.
    const again = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-9', 'x-api-key': SENDER_KEY });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expectError(await post(SEND_EML, elsewhere, { 'idempotency-key': 'idem-key-9' }), 422, 'idempotency_key_reused');
    expect(emu.mailbox('idem-9@example.test')).toHaveLength(1);
    expect(emu.mailbox('idem-9b@example.test')).toHaveLength(1);
  });

  it('is one space per account: the key reused on another endpoint or for another group is refused with 422, sending nothing', async () => {
    const key = 'idem-key-10';
    expectAccepted(await post(SEND_EML, mailBody(eml(['To: idem-10@example.test'])), { 'idempotency-key': key }));
    const email = JSON.stringify({
      to: [{ email: 'idem-10b@example.test' }],
      from: { email: 'shop@example.test' },
      subject: 'Another request',
      textContent: { text: 'Hello' },
    });
    expectError(await post('/v1/send/email', email, { 'idempotency-key': key }), 422, 'idempotency_key_reused');
    expect(emu.mailbox('idem-10b@example.test')).toHaveLength(0);

    for (const group of ['idem-a', 'idem-b']) {
      emu.createGroup(group);
      const added = await post(`/v1/group/${group}`, JSON.stringify({ entries: [{ email: `${group}@example.test` }] }));
      expect(added.status, added.text).toBe(200);
    }
    const news = JSON.stringify({ from: { email: 'shop@example.test' }, subject: 'News', textContent: { text: 'Hi' } });
    const first = await post('/v1/send/group/idem-a', news, { 'idempotency-key': 'idem-key-11' });
    expect(first.status, first.text).toBe(202);
    const other = await post('/v1/send/group/idem-b', news, { 'idempotency-key': 'idem-key-11' });
    expectError(other, 422, 'idempotency_key_reused');
    expect(emu.mailbox('idem-b@example.test')).toHaveLength(0);
    const replay = await post('/v1/send/group/idem-a', news, { 'idempotency-key': 'idem-key-11' });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(emu.mailbox('idem-a@example.test')).toHaveLength(1);
  });

  it('remembers a key for 24 hours of the emulator clock: a repeat just before replays, one at 24 hours sends again', async () => {
    const start = Date.parse('2030-01-01T00:00:00Z');
    let clock = start;
    const timed = await startEmulator({ now: () => new Date(clock) });
    try {
      const body = mailBody(eml(['To: idem-window@example.test']));
      const send = () =>
        call(timed.url, SEND_EML, {
          body,
          headers: { 'x-api-key': timed.apiKey, 'content-type': 'application/json', 'idempotency-key': 'idem-window' },
        });
      const first = expectAccepted(await send());
      clock = start + 24 * 60 * 60 * 1000 - 1;
      const replay = await send();
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(expectAccepted(replay).id).toBe(first.id);
      clock = start + 24 * 60 * 60 * 1000;
      const fresh = await send();
      expect(fresh.headers['idempotent-replayed']).toBeUndefined();
      expect(expectAccepted(fresh).id).not.toBe(first.id);
      expect(timed.mailbox('idem-window@example.test')).toHaveLength(2);
    } finally {
      await timed.close();
    }
  });

  it('takes an Idempotency-Key of 255 characters and refuses one of 256 with 400 invalid_request, sending nothing', async () => {
    const body = mailBody(eml(['To: idem-length@example.test']));
    expectAccepted(await post(SEND_EML, body, { 'idempotency-key': 'k'.repeat(255) }));
    const long = await post(SEND_EML, mailBody(eml(['To: idem-length-b@example.test'])), {
      'idempotency-key': 'k'.repeat(256),
    });
    expect(expectError(long, 400, 'invalid_request')).toContain('Idempotency-Key');
    expect(emu.mailbox('idem-length-b@example.test')).toHaveLength(0);
  });

  it('delivers again for a different key', async () => {
    const body = mailBody(eml(['To: idem-3@example.test']));
    const a = expectAccepted(await post(SEND_EML, body, { 'idempotency-key': 'idem-key-3a' }));
    const second = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-3b' });
    const b = expectAccepted(second);
    expect(b.id).not.toBe(a.id);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    expect(emu.mailbox('idem-3@example.test')).toHaveLength(2);
  });

  it('does not remember a failed request: a valid one with the same key is handled for real', async () => {
    const failed = await post(SEND_EML, JSON.stringify({ mail: 'not base64!' }), { 'idempotency-key': 'idem-key-4' });
    expectError(failed, 400, 'invalid_base64');
    const body = mailBody(eml(['To: idem-4@example.test']));
    const retried = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-4' });
    const accepted = expectAccepted(retried);
    expect(retried.headers['idempotent-replayed']).toBeUndefined();
    expect(emu.mailbox('idem-4@example.test')).toHaveLength(1);
    // Now that it succeeded, the key is remembered.
    const again = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-4' });
    expect(expectAccepted(again).id).toBe(accepted.id);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(emu.mailbox('idem-4@example.test')).toHaveLength(1);
  });

  it('does not remember an authentication failure either', async () => {
    const body = mailBody(eml(['To: idem-5@example.test']));
    const denied = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-5', 'x-api-key': GROUPS_KEY });
    expectError(denied, 403, 'missing_scope');
    const ok = await post(SEND_EML, body, { 'idempotency-key': 'idem-key-5' });
    expectAccepted(ok);
    expect(ok.headers['idempotent-replayed']).toBeUndefined();
    expect(emu.mailbox('idem-5@example.test')).toHaveLength(1);
  });

  it('keeps the connection usable after a replay (the repeat body is drained)', async () => {
    const client = new Client(emu.url, { pipelining: 1 });
    try {
      const body = mailBody(eml(['To: idem-6@example.test'], 'z'.repeat(20_000)));
      const send = async (key: string) => {
        const res = await client.request({
          method: 'POST',
          path: SEND_EML,
          body,
          headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json', 'idempotency-key': key },
        });
        return checkAnswer(res.statusCode, res.headers, await res.body.text());
      };
      const a = expectAccepted(await send('idem-key-6'));
      expect(expectAccepted(await send('idem-key-6')).id).toBe(a.id);
      expect(expectAccepted(await send('idem-key-6b')).id).not.toBe(a.id);
      expect(emu.mailbox('idem-6@example.test')).toHaveLength(2);
    } finally {
      await client.close();
    }
  });
});

describe('robustness', () => {
  it('answers garbage on the socket with HTTP/1.1 400 and keeps serving', async () => {
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = connect(emu.port, emu.host);
      const chunks: Buffer[] = [];
      socket.on('connect', () => socket.write('HELLO\r\n\r\n'));
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
      socket.setTimeout(5000, () => socket.destroy(new Error('no reply to garbage within 5 s')));
    });
    expect(reply).toMatch(/^HTTP\/1\.1 400/);
    expectAccepted(await post(SEND_EML, mailBody()));
  });

  it('answers every kind of failure with a JSON error and never 5xx', async () => {
    const bad: [string, CallOptions][] = [
      [SEND_EML, { body: '{', headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' } }],
      [SEND_EML, { body: '\u0000\u0001', headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' } }],
      [
        SEND_EML,
        { body: '{"mail":"\\ud800"}', headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' } },
      ],
      [
        SEND_EML,
        {
          body: JSON.stringify({ mail: b64(Buffer.from([0, 1, 2, 255, 254, 13, 10, 13, 10])) }),
          headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
        },
      ],
      [
        SEND_EML,
        {
          body: JSON.stringify({ mail: b64('From: <>\r\nTo: <>\r\n\r\n') }),
          headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
        },
      ],
      [
        SEND_EML,
        {
          body: JSON.stringify({ mail: b64('From: shop@example.test\r\nTo: :;\r\n\r\n') }),
          headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
        },
      ],
      [SEND_EML, { body: mailBody(), headers: { 'x-api-key': emu.apiKey, 'content-type': '' } }],
      [
        SEND_EML,
        {
          body: mailBody(),
          headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json', 'idempotency-key': 'k'.repeat(300) },
        },
      ],
    ];
    for (const [path, options] of bad) {
      const answer = await call(emu.url, path, options);
      expect(answer.status, `${String(options.body).slice(0, 40)} -> ${answer.text}`).toBeGreaterThanOrEqual(400);
      expect(answer.status, `${String(options.body).slice(0, 40)} -> ${answer.text}`).toBeLessThan(500);
      expect((answer.json as { error?: { code?: unknown } }).error?.code).toEqual(expect.any(String));
    }
  });
});
