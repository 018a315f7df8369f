import { connect, createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy in front of a real redis-server, for the tests that need Redis
 * to fail at an exact point of a client's work: it passes everything on
 * until told to hold what a client sends (from a byte count, or from a text
 * in the commands), then the test breaks something (restarts Redis) and cuts
 * the connections. The client reconnects through the proxy and re-sends its
 * commands in flight, as ioredis does after a network failure or a failover.
 * @example
 * const proxy = await startRedisProxy(redis.port);
 * const held = proxy.holdWhen(({ bytes }) => bytes > 1_500_000);
 * // ... connection: proxy.url; start a write
 * await held;
 * await redis.restart('crash');
 * proxy.cut();
 */
export interface RedisProxy {
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  /**
   * From now on, the first time `when` is true of what a connection has sent
   * (its bytes so far, and the text of the chunk being passed with the end of
   * the one before), that chunk and everything after it on that connection
   * are held, not passed on, and the connection stays open whatever
   * happens to Redis until {@link cut}. Resolves when that happens.
   */
  holdWhen(when: (sent: { bytes: number; text: string }) => boolean): Promise<void>;
  /** Drops every connection (and what is held); new connections pass through. */
  cut(): void;
  /**
   * A partition: drops every connection and stops listening, so that connecting is refused
   * (ECONNREFUSED) until {@link up}.
   */
  down(): Promise<void>;
  /** Listens again on the same port after {@link down}. */
  up(): Promise<void>;
  close(): Promise<void>;
}

export async function startRedisProxy(redisPort: number): Promise<RedisProxy> {
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  let trigger: { when: (sent: { bytes: number; text: string }) => boolean; fire: () => void } | undefined;
  const server = createServer((client) => {
    const upstream = connect(redisPort, '127.0.0.1');
    const pair = { client, upstream };
    pairs.add(pair);
    let bytes = 0;
    let tail = '';
    let holding = false;
    client.on('data', (chunk: Buffer) => {
      if (holding) return;
      bytes += chunk.length;
      const text = tail + chunk.toString('latin1');
      tail = text.slice(-200);
      if (trigger?.when({ bytes, text })) {
        holding = true;
        const { fire } = trigger;
        trigger = undefined;
        fire();
        return;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', drop);
    // A held connection stays open when Redis goes away, so that the client reconnects only when the test cuts it.
    upstream.on('close', () => {
      if (!holding) drop();
    });
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const cutAll = () => {
    for (const { client, upstream } of pairs) {
      client.destroy();
      upstream.destroy();
    }
    pairs.clear();
  };
  return {
    url: `redis://127.0.0.1:${port}`,
    holdWhen(when) {
      return new Promise<void>((resolve) => {
        trigger = { when, fire: resolve };
      });
    },
    cut: cutAll,
    down() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      cutAll();
      return closed;
    },
    up() {
      return new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    },
    close: () =>
      new Promise<void>((resolve) => {
        cutAll();
        if (!server.listening) return resolve();
        server.close(() => resolve());
      }),
  };
}
