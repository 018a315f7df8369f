import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';

/** A client that goes away mid-request is the client's doing: no internal error is reported. */

let emu: Emulator;
const internalErrors: unknown[] = [];

beforeAll(async () => {
  emu = await startEmulator({ onInternalError: (err) => internalErrors.push(err) });
});
afterAll(() => emu.close());

describe('a client that disconnects mid-request', () => {
  it('is not reported as an internal error, and the emulator serves the next request', async () => {
    for (const path of ['/v1/send/eml', '/v1/group/news', '/unsubscribe/abc']) {
      await new Promise<void>((resolve, reject) => {
        const socket = connect(emu.port, '127.0.0.1', () => {
          socket.write(
            `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{"mail":"QUJD`,
          );
          setTimeout(() => {
            socket.destroy();
            resolve();
          }, 50);
        });
        socket.once('error', reject);
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(internalErrors).toEqual([]);
    const res = await fetch(`${emu.url}/v1/send/eml`, {
      method: 'POST',
      headers: { 'x-api-key': emu.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ mail: Buffer.from('From: a@x.test\r\nTo: b@x.test\r\n\r\nhi').toString('base64') }),
    });
    expect(res.status).toBe(202);
  });
});
