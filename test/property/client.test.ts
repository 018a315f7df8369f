/**
 * Property-based tests (fast-check) of the client's input boundary: random and
 * hostile arguments to every method and to the constructor. Each call must
 * resolve or reject with an EmlApiError; bad input must be refused before any
 * request; whatever is sent must be a clean request (no CR/LF in a header, a
 * path whose segments decode back to the caller's group id and address, no
 * dot segment); and the API key must never show in an error.
 *
 * Requests go to the real emulator through an undici Agent that records what
 * the client dispatched.
 */
import { inspect } from 'node:util';
import fc from 'fast-check';
import { Agent, type Dispatcher } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiError } from '../../src/index.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

const PROPERTY_TIMEOUT = 60_000;

/** Group ids that break naive path building; the emulator has a group of each name. */
const HOSTILE_GROUPS = [
  '..',
  '.',
  '...',
  'a/b',
  '../v1/send/eml',
  'a?b=1',
  'a#b',
  'a b',
  '%2F',
  '%',
  'ü-news',
  '😀',
  'news\\letter',
  '__proto__',
  'constructor',
];

interface Dispatched {
  method: string;
  path: string;
  headers: [string, string][];
}

let emu: Emulator;
let agent: Agent;
let recording: Dispatcher;
let dispatched: Dispatched[] = [];
const codes = new Map<string, number>();

/** Flattens undici's header forms (object, flat array, array of pairs) into pairs. */
function headerPairs(headers: Dispatcher.DispatchOptions['headers']): [string, string][] {
  if (!headers) return [];
  if (Array.isArray(headers)) {
    const flat = headers.flat() as string[];
    const pairs: [string, string][] = [];
    for (let i = 0; i < flat.length; i += 2) pairs.push([String(flat[i]), String(flat[i + 1])]);
    return pairs;
  }
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    return [...(headers as Iterable<[string, string | string[]]>)].map(([k, v]) => [k, String(v)]);
  }
  return Object.entries(headers as Record<string, string | string[] | undefined>).map(([k, v]) => [k, String(v)]);
}

beforeAll(async () => {
  emu = await startEmulator({ groups: ['newsletter', ...HOSTILE_GROUPS] });
  agent = new Agent();
  recording = agent.compose((dispatch) => (opts, handler) => {
    dispatched.push({ method: opts.method, path: opts.path, headers: headerPairs(opts.headers) });
    return dispatch(opts, handler);
  });
});

beforeEach(() => emu.reset());

afterAll(async () => {
  const tally = [...codes].map(([code, n]) => `${code}×${n}`).join(' ');
  console.log(`property-client: outcomes ${tally}`);
  await agent?.close();
  await emu?.close();
});

const newClient = () =>
  new EmlApiClient({ apiKey: emu.apiKey, baseUrl: emu.url, dispatcher: recording, retry: { attempts: 1 } });

// ---------------------------------------------------------------------------
// Arbitraries

const anyString = fc.string({ unit: 'binary', maxLength: 30 });
/** Strings with lone surrogates, which encodeURIComponent refuses with a URIError. */
const surrogateString = fc.string({ unit: 'binary', maxLength: 10 }).map((s) => `${s}\uD800${s}`);
const anyJson = fc.jsonValue({ maxDepth: 2, stringUnit: 'binary' });
const anything = fc.oneof(anyJson, fc.anything({ maxDepth: 2 }));

const groupId = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('newsletter', ...HOSTILE_GROUPS) },
  { weight: 2, arbitrary: fc.oneof(anyString, surrogateString) },
  { weight: 1, arbitrary: fc.constantFrom('', 'a\r\nX-Injected: 1', 'x'.repeat(257), 'no-such-group') },
  { weight: 1, arbitrary: anything },
);

const addressString = fc.oneof(
  fc.emailAddress(),
  fc.constantFrom(
    'ann@example.test',
    'Ann <ann@example.test>',
    '"Doe, Jane" <jane@example.test>',
    'a@b.test, c@d.test',
    'jörg@bücher.test',
    'a/../b@x.test',
    'a?b#c@x.test',
    '%2e%2e@x.test',
    'a@b\r\nBcc: x@y.test',
    'Name\r\n <a@b.test>',
    '',
    '@',
    'a@@b',
  ),
  fc.tuple(anyString, anyString).map(([a, b]) => `${a}@${b}`),
  surrogateString.map((s) => `${s}@x.test`),
  anyString,
);

const address = fc.oneof(
  { weight: 4, arbitrary: addressString },
  {
    weight: 2,
    arbitrary: fc.record(
      { address: addressString, name: fc.oneof(anyString, fc.constantFrom('A\r\nB', 'Doe, Jane'), anyJson) },
      { requiredKeys: ['address'] },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.record(
      { email: fc.oneof(addressString, anyJson), name: fc.oneof(anyString, anyJson) },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: anything },
);

const subject = fc.oneof(fc.constantFrom('Hello {{first}}', '', 'a\r\nBcc: x@y.test', 'ü 😀'), anyString, anything);

const textContent = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record(
      {
        html: fc.oneof(fc.constantFrom('<p>Hi {{first}}</p>', '{{unsubscribe}}'), anyString, anyJson),
        text: fc.oneof(fc.constantFrom('Hi'), anyString, anyJson),
        tracking: fc.oneof(fc.boolean(), anyJson),
        images: fc.oneof(
          fc.array(
            fc.record(
              {
                name: fc.oneof(fc.constantFrom('logo', '{{logo}}'), anyString, anyJson),
                data: fc.oneof(
                  fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b)),
                  anyString,
                  anyJson,
                ),
                mimeType: fc.oneof(fc.constantFrom('PNG', 'image/png', 'GIF', 'svg'), anyString),
              },
              { requiredKeys: [] },
            ),
            { maxLength: 3 },
          ),
          anyJson,
        ),
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: anything },
);

const member = fc.oneof(
  { weight: 3, arbitrary: address },
  {
    weight: 2,
    arbitrary: fc.record(
      {
        email: addressString,
        name: fc.oneof(anyString, anyJson),
        substitutions: fc.oneof(
          fc.dictionary(
            fc.oneof(fc.constantFrom('first', '{{first}}', '__proto__', 'unsubscribe'), anyString),
            anyString,
            {
              maxKeys: 4,
            },
          ),
          anything,
        ),
      },
      { requiredKeys: [] },
    ),
  },
);

const idempotencyKey = fc.option(
  fc.oneof(
    fc.constantFrom('', 'same', 'a b', 'a\r\nX-Injected: 1', 'ü', 'x'.repeat(256)),
    fc.stringMatching(/^[\x21-\x7e]{1,40}$/),
    anyString,
    anything,
  ),
  { freq: 3 },
);

const emlMessage = fc.oneof(
  fc
    .tuple(
      address.filter((a): a is string => typeof a === 'string'),
      // Some of `anything` has no string form (a null prototype): String() of it throws in the generator.
      subject.filter((s): s is string => typeof s === 'string'),
    )
    .map(([to, subj]) => `From: shop@example.test\r\nTo: ${to}\r\nSubject: ${subj}\r\n\r\nHello\r\n`),
  fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
  anyString,
  anything,
);

/** One call: its name and a function that makes it. */
type Call = { name: string; args: unknown[]; run: (client: EmlApiClient) => Promise<unknown> };

/* eslint-disable @typescript-eslint/no-explicit-any -- the point is to pass what the types forbid */
const call: fc.Arbitrary<Call> = fc.oneof(
  fc
    .tuple(
      fc.record(
        { to: fc.oneof(address, fc.array(address, { maxLength: 4 })), from: address, subject, textContent },
        { requiredKeys: [] },
      ),
      idempotencyKey,
    )
    .map(([email, key]) => ({
      name: 'sendEmail',
      args: [email, key],
      run: (c: EmlApiClient) => c.sendEmail(email as any, key === null ? {} : { idempotencyKey: key as any }),
    })),
  fc
    .tuple(groupId, fc.record({ from: address, subject, textContent }, { requiredKeys: [] }), idempotencyKey)
    .map(([group, email, key]) => ({
      name: 'sendToGroup',
      args: [group, email, key],
      run: (c: EmlApiClient) =>
        c.sendToGroup(group as any, email as any, key === null ? {} : { idempotencyKey: key as any }),
    })),
  fc
    .tuple(
      groupId,
      fc.oneof({ weight: 5, arbitrary: fc.array(member, { maxLength: 6 }) }, { weight: 1, arbitrary: anything }),
      fc.record(
        {
          onFailure: fc.oneof(fc.constantFrom('SKIP', 'ABORT', 'skip'), anything),
          batchSize: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.constantFrom(0, -1, 1.5, NaN), anything),
        },
        { requiredKeys: [] },
      ),
    )
    .map(([group, members, options]) => ({
      name: 'addToGroup',
      args: [group, members, options],
      run: (c: EmlApiClient) => c.addToGroup(group as any, members as any, options as any),
    })),
  fc.tuple(groupId, address).map(([group, email]) => ({
    name: 'removeFromGroup',
    args: [group, email],
    run: (c: EmlApiClient) => c.removeFromGroup(group as any, email as any),
  })),
  fc.tuple(groupId, address).map(([group, email]) => ({
    name: 'isInGroup',
    args: [group, email],
    run: (c: EmlApiClient) => c.isInGroup(group as any, email as any),
  })),
  fc.tuple(emlMessage, idempotencyKey).map(([eml, key]) => ({
    name: 'sendEml',
    args: [eml, key],
    run: (c: EmlApiClient) => c.sendEml(eml as any, key === null ? {} : { idempotencyKey: key as any }),
  })),
);
/* eslint-enable @typescript-eslint/no-explicit-any */

// ---------------------------------------------------------------------------
// Checks

/** Characters a path may carry as written: unreserved, sub-delims, ':', '@', '/' and percent escapes. */
const PATH_CHARS = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/;

function describeCall(c: Call): string {
  return `${c.name}(${inspect(c.args, { depth: 3, breakLength: Infinity }).slice(0, 400)})`;
}

/** Checks one request the client dispatched. */
function checkRequest(c: Call, req: Dispatched): void {
  const where = `${describeCall(c)} sent ${req.method} ${JSON.stringify(req.path)}`;
  expect(req.path, where).toMatch(PATH_CHARS);
  expect(req.path.startsWith('/v1/'), where).toBe(true);
  const segments = req.path.split('/').slice(1);
  for (const segment of segments) {
    // A dot segment would be resolved away by a proxy or URL parser and change the route.
    expect(['.', '..'], where).not.toContain(segment);
    expect(() => decodeURIComponent(segment), where).not.toThrow();
  }
  const groupIndex = segments[1] === 'send' && segments[2] === 'group' ? 3 : segments[1] === 'group' ? 2 : -1;
  if (groupIndex !== -1) {
    expect(decodeURIComponent(segments[groupIndex]!), where).toBe(c.args[0]);
    expect(segments.length, where).toBe(groupIndex === 2 && segments[3] === 'check' ? 5 : groupIndex + 1);
  }
  for (const [name, value] of req.headers) {
    expect(value, `${where}: header ${name}`).not.toMatch(/[\r\n\0]/);
  }
}

/** Runs one call and checks its outcome and everything it sent. */
async function checkCall(client: EmlApiClient, c: Call): Promise<void> {
  dispatched = [];
  let outcome: unknown;
  let failed = false;
  try {
    outcome = await c.run(client);
  } catch (err) {
    failed = true;
    outcome = err;
  }
  if (failed) {
    const err = outcome;
    if (!(err instanceof EmlApiError)) {
      throw new Error(`${describeCall(c)} rejected with ${inspect(err)} instead of an EmlApiError`);
    }
    const label = err.apiCode ? `${err.code}:${err.apiCode}` : err.code;
    codes.set(label, (codes.get(label) ?? 0) + 1);
    expect(err.message, describeCall(c)).not.toContain(emu.apiKey);
    expect(inspect(err, { depth: 5 }), describeCall(c)).not.toContain(emu.apiKey);
    if (err.code === 'EMESSAGE' && err.responseCode === undefined && err.partial === undefined) {
      // Refused on input: nothing may have gone out.
      expect(dispatched, `${describeCall(c)} was refused (${err.message}) after sending`).toEqual([]);
    } else {
      expect(err.responseCode === undefined || err.responseCode < 500, `${describeCall(c)}: ${err.message}`).toBe(true);
    }
    // A group the emulator has must be found, whatever its name.
    if (typeof c.args[0] === 'string' && emu.groups().includes(c.args[0])) {
      expect(err.apiCode, `${describeCall(c)}: ${err.message}`).not.toBe('group_not_found');
    }
  } else {
    codes.set('resolved', (codes.get('resolved') ?? 0) + 1);
  }
  for (const req of dispatched) checkRequest(c, req);
}

// ---------------------------------------------------------------------------
// Properties

describe('client under random and hostile arguments (fast-check)', () => {
  it(
    'resolves or rejects with an EmlApiError, refuses bad input before sending and sends only clean requests',
    async () => {
      const client = newClient();
      try {
        await fc.assert(
          fc.asyncProperty(call, (c) => checkCall(client, c)),
          { numRuns: 2000 },
        );
      } finally {
        await client.close();
      }
    },
    PROPERTY_TIMEOUT,
  );

  it(
    'reaches the group named by the caller, whatever characters its id has',
    async () => {
      const client = newClient();
      try {
        await fc.assert(
          fc.asyncProperty(fc.constantFrom(...HOSTILE_GROUPS), fc.emailAddress(), async (group, email) => {
            expect(await client.isInGroup(group, email)).toBe(false);
            await client.addToGroup(group, [{ email, name: 'N' }]);
            expect(emu.members(group).map((m) => m.email)).toContain(email);
            expect(await client.isInGroup(group, email)).toBe(true);
            expect(await client.removeFromGroup(group, email)).toBe(true);
            expect(emu.members(group).map((m) => m.email)).not.toContain(email);
          }),
          { numRuns: 150 },
        );
      } finally {
        await client.close();
      }
    },
    PROPERTY_TIMEOUT,
  );

  it(
    'builds a client or throws ECONFIG for random options, never echoing the key',
    () => {
      const secret = 'sk_live_property_secret_123';
      const option = <T>(arb: fc.Arbitrary<T>) => fc.oneof(arb, anything);
      fc.assert(
        fc.property(
          fc.record(
            {
              apiKey: fc.oneof(
                fc.constantFrom(secret, `${secret}\n`, ` ${secret}`, `${secret}ü`, ''),
                anyString.map((s) => `${secret}${s}`),
                anything,
              ),
              baseUrl: fc.oneof(
                fc.constantFrom(
                  emu.url,
                  'https://api.example.test',
                  'http://api.example.test',
                  `https://user:${secret}@api.example.test`,
                  `https://api.example.test/?key=${secret}`,
                  secret,
                  'ftp://x.test',
                  'http://[::1]:1',
                ),
                fc.webUrl(),
                anything,
              ),
              maxConnections: option(fc.integer({ min: -2, max: 60 })),
              allowInsecureHttp: option(fc.boolean()),
              userAgent: option(fc.constantFrom('app/1.0', 'a\r\nb', '')),
              retry: option(
                fc.oneof(
                  fc.constant(false),
                  fc.record(
                    {
                      attempts: option(fc.integer({ min: -1, max: 10 })),
                      delay: option(fc.integer({ min: -1, max: 1000 })),
                      maxDelay: option(fc.integer({ min: -1, max: 1000 })),
                      jitter: option(fc.double({ min: -1, max: 2 })),
                      retryAmbiguous: option(fc.boolean()),
                    },
                    { requiredKeys: [] },
                  ),
                ),
              ),
              timeouts: option(
                fc.record(
                  {
                    connect: option(fc.integer({ min: -1, max: 10_000 })),
                    response: option(fc.integer({ min: -1, max: 10_000 })),
                    total: option(fc.integer({ min: -1, max: 10_000 })),
                  },
                  { requiredKeys: [] },
                ),
              ),
              rateLimit: option(
                fc.record(
                  {
                    max: option(fc.integer({ min: -1, max: 100 })),
                    duration: option(fc.integer({ min: -1, max: 5000 })),
                  },
                  { requiredKeys: [] },
                ),
              ),
              spool: option(
                fc.record(
                  { threshold: option(fc.integer({ min: -1, max: 1 << 22 })), directory: option(anyString) },
                  { requiredKeys: [] },
                ),
              ),
            },
            { requiredKeys: [] },
          ),
          (options) => {
            let client: EmlApiClient | undefined;
            try {
              client = new EmlApiClient(options as never);
            } catch (err) {
              if (!(err instanceof EmlApiError)) throw new Error(`threw ${inspect(err)} instead of an EmlApiError`);
              expect(err.code).toBe('ECONFIG');
              expect(err.message).toMatch(/^(Invalid option \w+|Options must be)/);
              expect(inspect(err, { depth: 5 })).not.toContain(secret);
              return;
            }
            expect(inspect(client, { depth: 5 })).not.toContain(secret);
            expect(JSON.stringify(client) ?? '').not.toContain(secret);
            void client.close();
          },
        ),
        { numRuns: 3000 },
      );
    },
    PROPERTY_TIMEOUT,
  );
});
