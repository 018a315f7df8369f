import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in for the service that holds every request until the test releases
 * it, so "requests in flight" is a state a test can observe instead of a race.
 * (The emulator answers in a millisecond and has no latency control yet.)
 */
export interface HoldingService {
  url: string;
  /** Requests received and not yet answered. */
  held: number;
  /** Most requests held at once. */
  maxHeld: number;
  /** Resolves when `n` requests are held. */
  waitForHeld(n: number): Promise<void>;
  /** Answers every held request with 202. */
  releaseAll(): void;
  close(): Promise<void>;
}

export async function startHoldingService(): Promise<HoldingService> {
  const pending: ServerResponse[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  let maxHeld = 0;
  const server = createServer((req: IncomingMessage, res) => {
    req.resume();
    req.on('end', () => {
      pending.push(res);
      maxHeld = Math.max(maxHeld, pending.length);
      for (const w of [...waiters]) {
        if (pending.length >= w.n) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get held() {
      return pending.length;
    },
    get maxHeld() {
      return maxHeld;
    },
    waitForHeld: (n) =>
      pending.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve })),
    releaseAll() {
      for (const res of pending.splice(0)) {
        res.writeHead(202, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'held', messageId: '<held@example.test>', recipients: 1 }));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
