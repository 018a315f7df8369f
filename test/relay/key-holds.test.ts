/**
 * The key clients a session holds are released when it ends, including a
 * session that ends while its AUTH is still being checked with the service:
 * a held client is never evicted, so a lost hold would keep it (and its
 * connections to the service) for as long as the relay runs.
 */
import type { SMTPServerAuthentication, SMTPServerSession } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { EmlApiClient } from '../../src/index.js';
import { ClientSlots } from '../../src/relay/client-slots.js';
import { KeyClients } from '../../src/relay/relay-users.js';
import { directDestination, UploadShares } from '../../src/relay/message-destination.js';
import { relaySessionHandlers } from '../../src/relay/relay-sessions.js';
import { resolveRelayOptions } from '../../src/relay/relay-options.js';

let emu: Emulator;
const keys = ['k-first', 'k-second'];

beforeAll(async () => {
  emu = await startEmulator({ apiKeys: keys.map((key) => ({ key, scopes: ['sender'] })) });
});
afterAll(async () => {
  await emu?.close();
});

describe('key clients held by sessions', () => {
  it('a session that closes while its AUTH is being checked releases the key client (idle clients past maxKeys are closed)', async () => {
    const { settings } = resolveRelayOptions({ baseUrl: emu.url, port: 0, retry: false, maxKeys: 1 });
    const keyClients = new KeyClients((apiKey) => new EmlApiClient({ ...settings.clientOptions, apiKey }), 1);
    const handlers = relaySessionHandlers({
      settings,
      keyClients,
      relayClient: undefined,
      relaySecret: undefined,
      isOwnKey: () => false,
      relayKeyLogin: undefined,
      destination: directDestination(),
      shares: new UploadShares(),
      slots: new ClientSlots(settings),
      signal: new AbortController().signal,
      arriving: new AbortController().signal,
      connectionOf: () => undefined,
      closing: () => false,
      track: () => undefined,
    });
    // The service takes 200 ms to answer: both clients leave before their key is accepted.
    emu.setFaults({ latencyMs: 200 });
    try {
      const answers = keys.map((password, i) => {
        const session = {
          id: `s${i}`,
          remoteAddress: '127.0.0.1',
          secure: false,
          envelope: { mailFrom: false, rcptTo: [] },
        } as unknown as SMTPServerSession;
        const auth = { method: 'PLAIN', username: 'app', password } as SMTPServerAuthentication;
        const answered = new Promise<unknown>((resolve) =>
          handlers.onAuth(auth, session, (err, res) => resolve(err ?? res)),
        );
        handlers.onClose(session, () => undefined);
        return answered;
      });
      await Promise.all(answers);
      // Both keys were accepted, no session holds either: only maxKeys (1) idle client is kept.
      expect(keyClients.size).toBe(1);
    } finally {
      emu.setFaults(undefined);
      await keyClients.close();
    }
  });
});
