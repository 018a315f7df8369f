import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a real redis-server that can hold back one
 * command: the first chunk a client writes that matches a pattern, and
 * everything that client writes after it, until the test releases them.
 * Redis then runs the held command late, as a slow network or a Redis
 * busy with a long fork would: the client's deadline passes while the
 * command is still on its way, and it lands all the same.
 * @example
 * const proxy = await startRedisHoldProxy(redis.port);
 * proxy.holdNext(/evalsha/i); // the next Lua script call waits
 * // ... connection: proxy.url
 * proxy.release();
 */
export interface RedisHoldProxy {
  /** `redis://127.0.0.1:<port>` of the proxy. */
  readonly url: string;
  /** Chunks held right now. */
  readonly held: number;
  /**
   * Holds the next chunk a client writes that matches `pattern` (in its text), and what follows it.
   * With `{ from: 'match' }` the bytes of that chunk before the match are passed on: of commands
   * written together (a pipeline), those before it run and the rest wait, as when the network
   * stalls between two TCP segments.
   */
  holdNext(pattern: RegExp, options?: { from?: 'chunk' | 'match' }): void;
  /** Passes on everything held, in order, and stops holding. */
  release(): void;
  /**
   * Runs what is held, still holding it, on a connection of its own straight to Redis: as a command that ran
   * although its client never had the answer, which the client sends again on release. Resolves with Redis's first answer.
   */
  runHeld(): Promise<string>;
  close(): Promise<void>;
}

export async function startRedisHoldProxy(redisPort: number): Promise<RedisHoldProxy> {
  let pattern: RegExp | undefined;
  let fromMatch = false;
  const held: { to: Socket; chunk: Buffer }[] = [];
  const holding = new Set<Socket>();
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(redisPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    client.on('data', (chunk: Buffer) => {
      const match = holding.has(upstream) ? null : pattern?.exec(chunk.toString('latin1'));
      if (match) {
        pattern = undefined;
        holding.add(upstream);
        // latin1 maps each byte to one character: the match's index is its offset in the chunk.
        if (fromMatch && match.index > 0) {
          upstream.write(chunk.subarray(0, match.index));
          chunk = chunk.subarray(match.index);
        }
      }
      if (holding.has(upstream)) held.push({ to: upstream, chunk });
      else upstream.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${port}`,
    get held() {
      return held.length;
    },
    holdNext(p: RegExp, { from = 'chunk' }: { from?: 'chunk' | 'match' } = {}) {
      pattern = p;
      fromMatch = from === 'match';
    },
    release() {
      pattern = undefined;
      holding.clear();
      for (const { to, chunk } of held.splice(0)) to.write(chunk);
    },
    runHeld: () =>
      new Promise<string>((resolve, reject) => {
        const direct = connect(redisPort, '127.0.0.1', () => direct.write(Buffer.concat(held.map((h) => h.chunk))));
        direct.once('data', (answer: Buffer) => {
          direct.destroy();
          resolve(answer.toString('latin1'));
        });
        direct.once('error', reject);
      }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
