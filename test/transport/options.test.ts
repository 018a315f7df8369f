import { describe, expect, it } from 'vitest';
import { EmlApiError, EmlApiTransport } from '../../src/index.js';

describe('constructor option errors', () => {
  it('names the option and the problem', () => {
    const attempts: [unknown, RegExp][] = [
      [undefined, /Options must be an object/],
      [{ baseUrl: 'https://api.example.test' }, /Invalid option apiKey: it is missing/],
      [{ apiKey: 'k' }, /Invalid option baseUrl: it is missing/],
      [{ apiKey: 'k', baseUrl: 'api.example.test' }, /Invalid option baseUrl: it is not an absolute URL/],
      [
        { apiKey: 'k', baseUrl: 'http://mail.example.test' },
        /Invalid option baseUrl: http:\/\/ to the non-loopback host/,
      ],
      [{ apiKey: 'k\n', baseUrl: 'https://api.example.test' }, /Invalid option apiKey: it contains a line feed/],
      [{ apiKey: 'k', baseUrl: 'https://api.example.test', maxConnections: 0 }, /Invalid option maxConnections/],
    ];
    for (const [options, expected] of attempts) {
      let error: unknown;
      try {
        new EmlApiTransport(options as never);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(EmlApiError);
      expect(error).toMatchObject({ code: 'ECONFIG' });
      expect((error as Error).message).toMatch(expected);
    }
  });

  it('accepts http:// to a non-loopback host only with allowInsecureHttp', () => {
    expect(
      () => new EmlApiTransport({ apiKey: 'k', baseUrl: 'http://mail.example.test', allowInsecureHttp: true }),
    ).not.toThrow();
  });
});
