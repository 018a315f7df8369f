import type { LookupAddress, lookup as dnsLookup } from 'node:dns';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { localhostOnlyLoopback } from '../../src/http/exchange.js';
import { EmlApiClient } from '../../src/index.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator();
});
afterAll(() => emu.close());

describe('http://localhost', () => {
  it('reaches the emulator on this machine', async () => {
    const client = new EmlApiClient({ apiKey: emu.apiKey, baseUrl: `http://localhost:${emu.port}` });
    await expect(client.verify()).resolves.toBe(true);
    await client.close();
  });

  // This machine's resolver cannot be made to answer localhost with another
  // address, so a resolver that does is passed in: the hosts file or DNS of a
  // tampered machine.
  const tampered = ((_host: string, _options: unknown, callback: (e: null, a: LookupAddress[]) => void) =>
    callback(null, [{ address: '203.0.113.7', family: 4 }])) as unknown as typeof dnsLookup;

  it('never connects to a non-loopback address a resolver gives for localhost', async () => {
    const lookup = localhostOnlyLoopback(tampered);
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) =>
      lookup('localhost', { all: true }, (e) => resolve(e)),
    );
    expect(err?.message).toContain('not to a loopback address');
  });

  it('keeps the loopback answers of a resolver for localhost, and resolves other names unchanged', async () => {
    const mixed = ((_host: string, _options: unknown, callback: (e: null, a: LookupAddress[]) => void) =>
      callback(null, [
        { address: '203.0.113.7', family: 4 },
        { address: '::1', family: 6 },
      ])) as unknown as typeof dnsLookup;
    const answer = await new Promise<unknown>((resolve) =>
      localhostOnlyLoopback(mixed)('localhost', {}, (_e, address, family) => resolve([address, family])),
    );
    expect(answer).toEqual(['::1', 6]);
    const other = await new Promise<unknown>((resolve) =>
      localhostOnlyLoopback()('127.0.0.1', {}, (_e, address) => resolve(address)),
    );
    expect(other).toBe('127.0.0.1');
  });
});
