/**
 * Adversarial inputs (fast-check) for every parser of user input: addresses
 * and display names, group ids, substitution keys, image names, CSV cells and
 * headers, and the header fields of a raw message. Each input is about 10 KB
 * of repeated delimiters, spaces and braces, the shapes that make a
 * backtracking regular expression take seconds to minutes. Every parse must
 * end, accepted or refused, within a generous 1 s, so the test cannot flake
 * while a regression to super-linear parsing fails it by orders of magnitude.
 * (How the cost grows with size is measured in `npm run bench`, not here.)
 */
import fc from 'fast-check';
import nodemailer from 'nodemailer';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { membersFromCsv } from '../../src/cli/commands/group-command.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient, EmlApiError, EmlApiTransport } from '../../src/index.js';

const SIZE = 10_000;
const BOUND_MS = 1000;
const PROPERTY_TIMEOUT = 120_000;
const RUNS = 40;

/** Characters that delimit, quote or space the grammars under test. */
const UNITS = [
  ' ',
  '\t',
  '{',
  '}',
  '{{',
  '}}',
  '<',
  '>',
  '"',
  '\\',
  '@',
  ',',
  ';',
  ':',
  '(',
  ')',
  '.',
  'a',
  '\r\n ',
  '%',
];

/** About 10 KB: a prefix, a short unit repeated, a suffix. */
const adversarial = fc
  .tuple(
    fc.array(fc.constantFrom(...UNITS), { minLength: 0, maxLength: 3 }).map((p) => p.join('')),
    fc.array(fc.constantFrom(...UNITS), { minLength: 1, maxLength: 3 }).map((u) => u.join('')),
    fc
      .array(fc.constantFrom(...UNITS, 'a@b.test', '<a@b.test>'), { minLength: 0, maxLength: 3 })
      .map((s) => s.join('')),
  )
  .map(([prefix, unit, suffix]) => prefix + unit.repeat(Math.ceil(SIZE / unit.length)) + suffix);

/** The worst cases of the parsers this project had (seconds to minutes at these sizes). */
const KNOWN_WORST = [
  ' '.repeat(SIZE) + '<',
  '\t'.repeat(SIZE) + 'x <a@b> x',
  '{{' + ' '.repeat(SIZE) + 'x',
  '{{' + ' '.repeat(SIZE) + '}}x',
  'a' + ' '.repeat(SIZE) + 'a<',
  '"'.repeat(SIZE),
  '<'.repeat(SIZE),
  'a@'.repeat(SIZE / 2),
  'a:'.repeat(SIZE / 2),
];

/** Runs `parse` on each input and fails if one takes longer than the bound. */
async function expectLinear(parse: (input: string) => Promise<unknown> | unknown): Promise<void> {
  const check = async (input: string) => {
    const started = performance.now();
    await Promise.resolve()
      .then(() => parse(input))
      .catch(() => undefined);
    const ms = performance.now() - started;
    expect(ms, `${Math.round(ms)} ms for ${JSON.stringify(input.slice(0, 40))}… (${input.length} chars)`).toBeLessThan(
      BOUND_MS,
    );
  };
  for (const input of KNOWN_WORST) await check(input);
  await fc.assert(fc.asyncProperty(adversarial, check), { numRuns: RUNS });
}

let emu: Emulator;
let client: EmlApiClient;

beforeAll(async () => {
  emu = await startEmulator({ groups: ['news'] });
  client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url, retry: false });
});

afterAll(async () => {
  await client.close();
  await emu.close();
});

const content = { html: '<p>x</p>' };

describe('parsers of user input, fed 10 KB adversarial strings', () => {
  it(
    'client: display names and addresses (a sign-up form building `${name} <${email}>`)',
    () =>
      expectLinear(async (input) => {
        const sends = [
          client.sendEmail({
            from: `${input} <shop@example.test>`,
            to: 'a@example.test',
            subject: 's',
            textContent: content,
          }),
          client.sendEmail({ from: 'shop@example.test', to: input, subject: 's', textContent: content }),
          client.isInGroup('news', input),
        ];
        await Promise.all(sends.map((sent) => sent.catch((err: unknown) => expect(err).toBeInstanceOf(EmlApiError))));
      }),
    PROPERTY_TIMEOUT,
  );

  it(
    'client: substitution keys, image names and group ids',
    () =>
      expectLinear(async (input) => {
        await client
          .addToGroup('news', [{ email: 'ann@example.test', substitutions: { [input]: 'v' } }])
          .catch(() => {});
        await client
          .sendEmail({
            from: 'shop@example.test',
            to: 'a@example.test',
            subject: 's',
            textContent: { html: '<p>x</p>', images: [{ name: input, data: 'iVBORw0KGgo=', mimeType: 'PNG' }] },
          })
          .catch(() => {});
        await client.isInGroup(input.slice(0, 300), 'a@example.test').catch(() => {});
      }),
    PROPERTY_TIMEOUT,
  );

  it(
    'CLI: CSV header names and cells',
    () =>
      expectLinear((input) => {
        membersFromCsv(
          Buffer.from(`email,name,${JSON.stringify(input)}\n${JSON.stringify(input)},x,y\n`),
          'adversarial.csv',
        );
        membersFromCsv(Buffer.from(`email,${input}\n`), 'adversarial.csv');
      }),
    PROPERTY_TIMEOUT,
  );

  it(
    'emulator: addresses, keys and image names in JSON requests, and EML headers',
    () =>
      expectLinear(async (input) => {
        const post = (path: string, body: unknown) =>
          request(`${emu.url}${path}`, {
            method: 'POST',
            headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
            body: JSON.stringify(body),
          }).then((res) => res.body.text());
        await post('/v1/send/email', {
          to: [{ email: input }],
          from: { email: 'a@b.test' },
          subject: 's',
          textContent: content,
        });
        await post('/v1/group/news', { entries: [{ email: 'a@b.test', substitutions: { [input]: 'v' } }] });
        await post('/v1/send/email', {
          to: [{ email: 'a@b.test' }],
          from: { email: 'a@b.test' },
          subject: 's',
          textContent: { html: 'x', images: [{ name: input, data: 'iVBORw0KGgo=', mimeType: 'PNG' }] },
        });
        const eml = `From: a@b.test\r\nTo: ${input.replace(/\r\n/g, ' ')}\r\nSubject: s\r\n\r\nhi\r\n`;
        await post('/v1/send/eml', { mail: Buffer.from(eml).toString('base64') });
      }),
    PROPERTY_TIMEOUT,
  );

  it(
    'transport: the header fields of a raw message',
    async () => {
      const transporter = nodemailer.createTransport(
        new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url, retry: false }),
      );
      try {
        await expectLinear((input) =>
          transporter.sendMail({
            raw: `From: a@b.test\r\nTo: ${input.replace(/\r\n/g, ' ')}\r\nCc: ${input.replace(/\r\n/g, ' ')}\r\nSubject: s\r\n\r\nhi\r\n`,
          }),
        );
      } finally {
        transporter.close();
      }
    },
    PROPERTY_TIMEOUT,
  );
});
