import { describe, expect, it } from 'vitest';
import { EmlApiClient, EmlApiError, EmlApiTransport } from '../src/index.js';
import { startEmulator } from '../src/emulator/index.js';
import { EmlApiQueueTransport } from '../src/queue/index.js';
// The class itself (users get instances from startOutboxWorker): its constructor checks the options synchronously.
import { OutboxWorker } from '../src/queue/eml-api-worker.js';
import { resolveRelayOptions } from '../src/relay/relay-options.js';
import { resolveEmulatorOptions } from '../src/emulator/emulator-options.js';
import { MAX_REQUEST_SIZE } from '../src/protocol/api-types.js';
import { DEFAULT_MAX_MESSAGE_SIZE } from '../src/queue/queue-transport-options.js';
import { nearestName, refuseUnknownKeys } from '../src/shared/options-kit.js';
import { runCliCapturing } from './helpers/cli-run.js';

/**
 * Issue 17, item 3 (one vocabulary) and item 2 (one options kit): every
 * component refuses an option it does not know with an `ECONFIG` EmlApiError
 * naming it and the options it knows, a misspelt one with the nearest valid
 * name.
 */

const apiKey = 'k';
const baseUrl = 'http://127.0.0.1:1';
const connection = 'redis://127.0.0.1:1';

function thrown(make: () => unknown): EmlApiError {
  try {
    make();
  } catch (err) {
    return err as EmlApiError;
  }
  throw new Error('expected a throw');
}

function expectConfig(err: unknown, message: RegExp): void {
  expect(err).toBeInstanceOf(EmlApiError);
  expect(err).toMatchObject({ code: 'ECONFIG', permanent: true });
  expect((err as Error).message).toMatch(message);
}

describe('unknown options are refused, naming the known ones', () => {
  it('client and transport: retries, maxMessagesPerSecond, retry.limit and retry.baseDelay are unknown', () => {
    for (const make of [
      (o: object) => new EmlApiClient({ apiKey, baseUrl, ...o }),
      (o: object) => new EmlApiTransport({ apiKey, baseUrl, ...o }),
    ]) {
      expectConfig(
        thrown(() => make({ retries: 3 })),
        /^Invalid option retries: unknown option.*\(known: .*\bretry\b/,
      );
      expectConfig(
        thrown(() => make({ maxMessagesPerSecond: 5 })),
        /^Invalid option maxMessagesPerSecond: unknown option \(known: .*\brateLimit\b/,
      );
      expectConfig(
        thrown(() => make({ retry: { limit: 3 } })),
        /^Invalid option retry\.limit: unknown option \(known: attempts, delay/,
      );
      expectConfig(
        thrown(() => make({ retry: { baseDelay: 3 } })),
        /^Invalid option retry\.baseDelay: unknown option.*\(known: attempts, delay/,
      );
      expectConfig(
        thrown(() => make({ retry: 3 })),
        /^Invalid option retry: expected false or \{ attempts/,
      );
    }
  });

  it('queue transport: unknown keys refused with the nearest name, a bad logger refused', () => {
    const make = (o: object) => new EmlApiQueueTransport({ connection, ...o });
    expectConfig(
      thrown(() => make({ maxMessageBytes: 1000 })),
      /^Invalid option maxMessageBytes: unknown option; did you mean maxMessageSize\?/,
    );
    expectConfig(
      thrown(() => make({ storeTimeout: 1000 })),
      /^Invalid option storeTimeout: unknown option \(known: .*timeouts/,
    );
    expectConfig(
      thrown(() => make({ retries: 3 })),
      /^Invalid option retries: unknown option; did you mean retry\?/,
    );
    expectConfig(
      thrown(() => make({ queuename: 'mail' })),
      /^Invalid option queuename: unknown option; did you mean queueName\?/,
    );
    expectConfig(
      thrown(() => make({ logger: 42 })),
      /^Invalid option logger: expected true, false or a logger object/,
    );
    expectConfig(
      thrown(() => make({ timeouts: { stor: 5 } })),
      /timeouts\.stor: unknown option; did you mean timeouts\.store\?/,
    );
  });

  it('worker: limiter, retries and retry refused (the producer owns the schedule), close() options checked', async () => {
    const make = (o: object) => new OutboxWorker({ connection, apiKey, baseUrl, ...o });
    expectConfig(
      thrown(() => make({ limiter: { max: 1, duration: 1000 } })),
      /^Invalid option limiter: unknown option \(known: .*rateLimit/,
    );
    expectConfig(
      thrown(() => make({ retries: 2 })),
      /^Invalid option retries: unknown option/,
    );
    expectConfig(
      thrown(() => make({ retry: { attempts: 2 } })),
      /^Invalid option retry: unknown option/,
    );
    expectConfig(
      thrown(() => make({ concurency: 2 })),
      /did you mean concurrency\?/,
    );
    expectConfig(
      thrown(() => make({ rateLimit: { max: 0, duration: 1000 } })),
      /^Invalid option rateLimit\.max/,
    );
    const worker = make({});
    worker.on('error', () => undefined);
    try {
      expectConfig(
        await worker.close({ force: true } as never).catch((e: unknown) => e),
        /^Invalid option close\.force: unknown option \(known: abort\)/,
      );
    } finally {
      await worker.close({ abort: true });
    }
  });

  it('relay: the SMTP timeouts only in timeouts, its own keys derived from its type', () => {
    const make = (o: object) => resolveRelayOptions({ baseUrl, ...o });
    expectConfig(
      thrown(() => make({ idleTimeout: 1000 })),
      /^Invalid option idleTimeout: unknown option \(known: .*\btimeouts\b/,
    );
    expectConfig(
      thrown(() => make({ stressIdleTimeout: 1000 })),
      /^Invalid option stressIdleTimeout: unknown option/,
    );
    expectConfig(
      thrown(() => make({ dataTimeout: 1000 })),
      /^Invalid option dataTimeout: unknown option/,
    );
    expectConfig(
      thrown(() => make({ tlsHandshakeTimeout: 1000 })),
      /^Invalid option tlsHandshakeTimeout: unknown option/,
    );
    expectConfig(
      thrown(() => make({ retries: 1 })),
      /^Invalid option retries: unknown option.*\(known: .*\bretry\b/,
    );
    // A relay option misspelt is matched against the relay's own options, not the client's only.
    expectConfig(
      thrown(() => make({ maxRecipient: 5 })),
      /did you mean maxRecipients\?/,
    );
    expectConfig(
      thrown(() => make({ timeouts: { idel: 5 } })),
      /timeouts\.idel: unknown option; did you mean timeouts\.idle\?/,
    );
    const { settings } = make({
      timeouts: { idle: 1000, stressIdle: 200, data: 3000, tlsHandshake: 400, total: 5000 },
    });
    expect(settings).toMatchObject({
      idleTimeout: 1000,
      stressIdleTimeout: 200,
      dataTimeout: 3000,
      tlsHandshakeTimeout: 400,
    });
    // connect, response and total are the clients' own.
    expect(settings.clientOptions.timeouts).toEqual({ total: 5000 });
  });

  it('emulator: bodyLimit unknown (maxRequestSize), ECONFIG instead of TypeError', async () => {
    expectConfig(
      thrown(() => resolveEmulatorOptions({ bodyLimit: 10 } as never)),
      /^Invalid option bodyLimit: unknown option \(known: .*\bmaxRequestSize\b/,
    );
    expectConfig(
      thrown(() => resolveEmulatorOptions({ port: -1 })),
      /^Invalid option port: expected a whole number from 0 to 65535/,
    );
    expectConfig(
      thrown(() => resolveEmulatorOptions({ hots: 'x' } as never)),
      /did you mean host\?/,
    );
    expectConfig(await startEmulator({ maxRequestSize: 0 }).catch((e: unknown) => e), /^Invalid option maxRequestSize/);
    expect(resolveEmulatorOptions({}).maxRequestSize).toBe(MAX_REQUEST_SIZE);
  });

  it('emulator: unknown fields inside apiKeys, faults and rateLimit are refused, naming the nearest', () => {
    expectConfig(
      thrown(() => resolveEmulatorOptions({ apiKeys: [{ key: 'k', scopes: ['sender'], plans: 'plus' }] as never })),
      /^Invalid option apiKeys\[0\]\.plans: unknown option; did you mean apiKeys\[0\]\.plan\?/,
    );
    expectConfig(
      thrown(() => resolveEmulatorOptions({ apiKeys: { key: 'k' } as never })),
      /^Invalid option apiKeys: expected an array/,
    );
    expectConfig(
      thrown(() => resolveEmulatorOptions({ faults: { unavailabel: 0.5 } as never })),
      /^Invalid option faults\.unavailabel: unknown option; did you mean faults\.unavailable\?/,
    );
    expectConfig(
      thrown(() => resolveEmulatorOptions({ rateLimit: { requestsPerSecond: 5, brust: 2 } as never })),
      /^Invalid option rateLimit\.brust: unknown option; did you mean rateLimit\.burst\?/,
    );
    // The package's pace ({ max, duration }) is not the emulator's bucket: said, not guessed.
    expectConfig(
      thrown(() => resolveEmulatorOptions({ rateLimit: { max: 5, duration: 1000 } as never })),
      /^Unknown option rateLimit\.max: the emulator limits requests with \{ requestsPerSecond, burst \}/,
    );
    expect(
      resolveEmulatorOptions({ faults: { unavailable: 0.5, seed: 3 }, rateLimit: { requestsPerSecond: 5 } }),
    ).toBeTruthy();
  });

  it('emulator: a non-function onInternalError and a null latencyMs are refused, not found out later', () => {
    expectConfig(
      thrown(() => resolveEmulatorOptions({ onInternalError: 'log' as never })),
      /^Invalid option onInternalError: expected a function/,
    );
    expectConfig(
      thrown(() => resolveEmulatorOptions({ faults: { latencyMs: null as never } })),
      /^Invalid option faults\.latencyMs: expected a number of ms or \[min, max\]/,
    );
  });

  it('CLI: an emulator option refused is a usage error (exit 2) naming the flag', async () => {
    const { code, stderr } = await runCliCapturing(['serve', '--allow-host', 'not a host'], { env: {} });
    expect(code).toBe(2);
    expect(stderr).toMatch(/--allow-host: expected an array of host names/);
  });
});

describe('one size vocabulary', () => {
  it("the queue transport's maxMessageSize counts the message, defaulting to the largest whose upload fits 50 MiB", () => {
    expect(MAX_REQUEST_SIZE).toBe(50 * 1024 * 1024);
    expect(DEFAULT_MAX_MESSAGE_SIZE).toBe(39321591);
  });
});

describe('the options kit', () => {
  it('suggests the nearest name, and says nothing for nonsense', () => {
    expect(nearestName('timeout', ['timeouts', 'retry'])).toBe('timeouts');
    expect(nearestName('zz', ['timeouts', 'retry'])).toBeUndefined();
    expectConfig(
      thrown(() => refuseUnknownKeys({ zzzz: 1 }, ['retry'], 'x.')),
      /^Invalid option x\.zzzz: unknown option \(known: retry\)$/,
    );
  });
});
