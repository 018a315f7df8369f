/**
 * The options of EmlApiClient: which are refused (ECONFIG naming the option)
 * and which are accepted, checked before any request.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { EmlApiClient, EmlApiTransport, type EmlApiClientOptions } from '../../src/index.js';
import { thrownBy } from '../helpers/async.js';
import { startFakeService, type FakeService } from '../helpers/fake-service.js';
import { silentLogger } from '../helpers/logger.js';
import { loggerOption } from '../../src/shared/options-kit.js';

let service: FakeService;

beforeAll(async () => {
  service = await startFakeService();
});

afterAll(async () => {
  await service.close();
});

describe('options validation', () => {
  const rejected: [string, Record<string, unknown>, string][] = [
    ['a missing apiKey', { apiKey: undefined }, 'apiKey'],
    ['an empty apiKey', { apiKey: '' }, 'apiKey'],
    ['an apiKey with CR', { apiKey: 'abc\rdef' }, 'apiKey'],
    ['an apiKey with LF', { apiKey: 'abc\ndef' }, 'apiKey'],
    ['an apiKey with a space', { apiKey: 'abc def' }, 'apiKey'],
    ['an apiKey with non-ASCII', { apiKey: 'abcédef' }, 'apiKey'],
    ['a non-string apiKey', { apiKey: 12345 }, 'apiKey'],
    ['a missing baseUrl', { baseUrl: undefined }, 'baseUrl'],
    ['baseUrl "not a url"', { baseUrl: 'not a url' }, 'baseUrl'],
    ['baseUrl "ftp://x"', { baseUrl: 'ftp://x' }, 'baseUrl'],
    ['a baseUrl with credentials', { baseUrl: 'https://user:pw@api.example.com' }, 'baseUrl'],
    ['a baseUrl with a query string', { baseUrl: 'https://api.example.com/?a=1' }, 'baseUrl'],
    ['a baseUrl with a fragment', { baseUrl: 'https://api.example.com/#x' }, 'baseUrl'],
    ['http:// to a non-loopback host', { baseUrl: 'http://mail.example.com' }, 'baseUrl'],
    ['maxConnections 0', { maxConnections: 0 }, 'maxConnections'],
    ['maxConnections 1.5', { maxConnections: 1.5 }, 'maxConnections'],
    ['maxConnections "5"', { maxConnections: '5' }, 'maxConnections'],
    ['maxConnections -1', { maxConnections: -1 }, 'maxConnections'],
    ['dispatcher {}', { dispatcher: {} }, 'dispatcher'],
    ['allowInsecureHttp "yes"', { allowInsecureHttp: 'yes' }, 'allowInsecureHttp'],
  ];

  it.each(rejected)('rejects %s with ECONFIG naming the option', (_label, override, option) => {
    const options = { apiKey: 'k', baseUrl: 'https://api.example.com', ...override };
    const err = thrownBy(() => new EmlApiClient(options as unknown as EmlApiClientOptions));
    expect(err.code).toBe('ECONFIG');
    expect(err.message).toContain(option);
    expect(err.permanent).toBe(true);
  });

  it('rejects options that are not an object with ECONFIG', () => {
    const err = thrownBy(() => new EmlApiClient(undefined as unknown as EmlApiClientOptions));
    expect(err.code).toBe('ECONFIG');
  });

  it.each([
    [
      'http:// to a non-loopback host with allowInsecureHttp: true',
      { baseUrl: 'http://mail.example.com', allowInsecureHttp: true },
    ],
    ['http://localhost:1', { baseUrl: 'http://localhost:1' }],
    ['http://127.0.0.2:1', { baseUrl: 'http://127.0.0.2:1' }],
    ['http://[::1]:1', { baseUrl: 'http://[::1]:1' }],
    ['an https:// base URL with a path', { baseUrl: 'https://api.example.com/mail/' }],
    ['a URL object', { baseUrl: new URL('https://api.example.com') }],
    ['maxConnections 1', { maxConnections: 1 }],
  ])('accepts %s', async (_label, override) => {
    const client = new EmlApiClient({ apiKey: 'k', baseUrl: 'https://api.example.com', ...override });
    await client.close();
  });

  it('checks options before any request', () => {
    thrownBy(() => new EmlApiClient({ apiKey: 'a\nb', baseUrl: service.url }));
    expect(service.requests).toHaveLength(0);
  });
});

describe('options the client does not know', () => {
  it.each([
    ['timeout', 'timeouts'],
    ['retrys', 'retry'],
    ['rateLimits', 'rateLimit'],
    ['apikey', 'apiKey'],
    ['baseURL', 'baseUrl'],
    ['maxConnection', 'maxConnections'],
  ])('refuses %s with ECONFIG naming it and the nearest valid one (%s)', (typo, nearest) => {
    for (const make of [
      (o: object) => new EmlApiClient(o as EmlApiClientOptions),
      (o: object) => new EmlApiTransport(o as EmlApiClientOptions),
    ]) {
      const err = thrownBy(() => make({ apiKey: 'k', baseUrl: 'https://api.example.test', [typo]: 5000 }));
      expect(err.code).toBe('ECONFIG');
      expect(err.message).toContain(`Invalid option ${typo}: unknown option`);
      expect(err.message).toContain(`did you mean ${nearest}?`);
    }
  });

  it('names no suggestion when nothing is close', () => {
    const err = thrownBy(() => new EmlApiClient({ apiKey: 'k', baseUrl: 'https://x.test', zzzzzz: 1 } as never));
    expect(err.message).toContain('Invalid option zzzzzz: unknown option');
    expect(err.message).not.toContain('did you mean');
  });
});

describe('client.settings', () => {
  it('is a frozen view of the settings with their defaults, without the dispatcher, the logger or the key', async () => {
    const { Agent } = await import('undici');
    const dispatcher = new Agent();
    const logger = silentLogger;
    const client = new EmlApiClient({
      apiKey: 'k-secret',
      baseUrl: 'https://api.example.test/base/',
      retry: { attempts: 6 },
      dispatcher,
      logger,
    });
    try {
      expect(Object.keys(client.settings).sort()).toEqual(
        [
          'allowInsecureHttp',
          'baseUrl',
          'maxConnections',
          'rateLimit',
          'retry',
          'spool',
          'timeouts',
          'userAgent',
        ].sort(),
      );
      expect(client.settings).toMatchObject({
        maxConnections: 5,
        allowInsecureHttp: false,
        userAgent: undefined,
        rateLimit: undefined,
        retry: { attempts: 6, delay: 500, maxDelay: 30_000, jitter: 0.5, retryAmbiguous: false },
        timeouts: { connect: 10_000, response: 30_000, total: 120_000 },
        spool: { threshold: 2 * 1024 * 1024 },
      });
      expect(client.settings.baseUrl.href).toBe('https://api.example.test/base/');
      expect(JSON.stringify(client.settings)).not.toContain('k-secret');
      for (const part of [client.settings, client.settings.retry, client.settings.timeouts, client.settings.spool]) {
        expect(Object.isFrozen(part)).toBe(true);
      }
      // The URL is a copy: changing it does not move the client's requests.
      client.settings.baseUrl.pathname = '/elsewhere';
      expect(
        new EmlApiClient({ apiKey: 'k', baseUrl: 'https://api.example.test/base/' }).settings.baseUrl.pathname,
      ).toBe('/base/');
    } finally {
      await client.close();
      await dispatcher.close();
    }
  });

  it("is the transport client's too", () => {
    const transport = new EmlApiTransport({ apiKey: 'k', baseUrl: 'https://api.example.test', maxConnections: 3 });
    expect(transport.client.settings.maxConnections).toBe(3);
    expect('dispatcher' in transport.client.settings).toBe(false);
  });
});

describe('plain http:// hosts', () => {
  it('accepts localhost and literal loopback addresses', () => {
    for (const baseUrl of ['http://localhost:8025', 'http://127.0.0.1:8025', 'http://127.9.9.9', 'http://[::1]:8025']) {
      expect(() => new EmlApiClient({ apiKey: 'k', baseUrl })).not.toThrow();
    }
  });

  it('refuses *.localhost names, which are resolved through DNS and may point anywhere', () => {
    for (const baseUrl of ['http://api.localhost:8025', 'http://evil.localhost']) {
      const err = thrownBy(() => new EmlApiClient({ apiKey: 'k', baseUrl }));
      expect(err.code).toBe('ECONFIG');
      expect(err.message).toContain('clear text');
    }
  });
});

describe('logger: true', () => {
  it('writes console lines that name the package, whichever part logs (the relay and the worker too)', () => {
    const lines: unknown[][] = [];
    const info = vi.spyOn(console, 'info').mockImplementation((...args: unknown[]) => void lines.push(args));
    try {
      loggerOption(true).info({ port: 2525 }, 'SMTP relay listening');
    } finally {
      info.mockRestore();
    }
    expect(lines).toEqual([['[nodemailer-eml-api] INFO SMTP relay listening', { port: 2525 }]]);
  });
});
