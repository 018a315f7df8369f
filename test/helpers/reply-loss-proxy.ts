import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a real redis-server that, once armed, passes on
 * the first chunk a client sends that matches a pattern, drops Redis's reply
 * to it, and cuts that connection: the command ran, its answer was lost, and
 * ioredis sends it again once it has reconnected (a network blip, a load
 * balancer's idle cut, a failover right after a write). Every command must
 * therefore mean the same when it runs twice.
 * @example
 * const proxy = await startReplyLossProxy(redis.port);
 * proxy.arm(/putBackFrom/); // the next command carrying this text runs, its reply is lost
 * // ... connection: proxy.url
 * expect(proxy.fired).toBe(1);
 */
export interface ReplyLossProxy {
  /** `redis://127.0.0.1:<port>` of the proxy. */
  readonly url: string;
  /** Replies dropped so far. */
  readonly fired: number;
  /** Drops the reply to the next chunk matching `pattern` (in its text), then cuts its connection. */
  arm(pattern: RegExp): void;
  close(): Promise<void>;
}

export async function startReplyLossProxy(redisPort: number): Promise<ReplyLossProxy> {
  let pattern: RegExp | undefined;
  let fired = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(redisPort, '127.0.0.1');
    let swallow = false;
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    upstream.on('data', (chunk: Buffer) => {
      if (!swallow) {
        client.write(chunk);
        return;
      }
      // Redis ran it and replied: the reply is dropped, and the connection goes.
      client.destroy();
      upstream.destroy();
    });
    client.on('data', (chunk: Buffer) => {
      if (pattern?.test(chunk.toString('latin1'))) {
        pattern = undefined;
        swallow = true;
        fired++;
        upstream.write(chunk);
        return;
      }
      upstream.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${port}`,
    get fired() {
      return fired;
    },
    arm(p: RegExp) {
      pattern = p;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
