import nodemailer, { type Transporter } from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { startEmulator, type Emulator, type EmulatorOptions } from '../../src/emulator/index.js';
import {
  EmlApiQueueTransport,
  purgeOutbox,
  type OutboxQueuedMessageInfo,
  type EmlApiQueueTransportOptions,
  type OutboxWorkerOptions,
  type RedisConnectionInput,
} from '../../src/queue/index.js';
import { inProcessWorkers, type InProcessWorkers } from './outbox.js';
import { startOutboxRedis, type OutboxRedisUnderTest, type RedisKind } from './outbox-redis.js';
import { startRedisServer, type RedisServer, type RedisServerOptions } from './redis-server.js';

/**
 * The outbox test files' one setup: a real redis-server (or a Redis Cluster),
 * the emulator, a producer and in-process workers, started once per file and
 * stopped after it; before each test the emulator is reset and the queue
 * emptied, after each the workers are closed.
 *
 * The file's own servers (a fake service, a proxy) are started in its own
 * hooks, after `useOutbox()`: vitest runs the after-hooks the other way round,
 * so they stop before Redis does.
 */
export interface OutboxFixture<R> {
  /** The Redis: a {@link RedisServer} by default, an {@link OutboxRedisUnderTest} with `kind`. */
  readonly redis: R;
  readonly emu: Emulator;
  /** What producers and workers connect with. */
  readonly connection: RedisConnectionInput;
  /** The queue's prefix (BullMQ's default on one server, hash-tagged on a cluster). */
  readonly prefix: string;
  /** The file's producer (with `transport` options). */
  readonly transport: EmlApiQueueTransport;
  /** Nodemailer over {@link transport}. */
  readonly transporter: Transporter<OutboxQueuedMessageInfo>;
  /** Workers in this process with the fixture's settings; closed after each test. */
  readonly workers: InProcessWorkers;
  /** The options a worker of the fixture starts with (Redis, the emulator, no content sweep), `more` over them: for worker processes. */
  workerOptions(more?: Partial<OutboxWorkerOptions>): OutboxWorkerOptions;
}

export interface OutboxFixtureOptions {
  /** redis-server's options (on one server). */
  redis?: RedisServerOptions;
  /** The emulator's options. */
  emulator?: EmulatorOptions;
  /** The producer's options besides its connection and prefix. */
  transport?: Partial<EmlApiQueueTransportOptions>;
  /** Every worker's options besides its connection, prefix, key and baseUrl (e.g. `logger`). */
  worker?: Partial<OutboxWorkerOptions>;
  /**
   * What is emptied before each test, besides resetting the emulator (its messages and faults):
   * `'queue'` (the producer's queue: every job and key of the outbox, as `purgeOutbox`), `'redis'` (FLUSHALL on every master); or `'nothing'`
   * at all (the emulator kept as the last test left it).
   * @default 'queue'
   */
  clean?: 'queue' | 'redis' | 'nothing';
}

/**
 * Registers the file's (or the describe block's) outbox: hooks that start and stop it.
 * @example
 * const outbox = useOutbox({ transport: { retry: { delay: 100, maxDelay: 100, jitter: 0 } } });
 * it('sends', async () => {
 *   await outbox.transporter.sendMail(message);
 *   await outbox.workers.start();
 * });
 * // On both kinds of Redis:
 * describe.each(REDIS_KINDS)('on %s Redis', (kind) => {
 *   const outbox = useOutbox({ kind });
 * });
 */
export function useOutbox(options?: OutboxFixtureOptions): OutboxFixture<RedisServer>;
export function useOutbox(options: OutboxFixtureOptions & { kind: RedisKind }): OutboxFixture<OutboxRedisUnderTest>;
export function useOutbox(
  options: OutboxFixtureOptions & { kind?: RedisKind } = {},
): OutboxFixture<RedisServer | OutboxRedisUnderTest> {
  let server: RedisServer | undefined;
  let under: OutboxRedisUnderTest | undefined;
  let emu: Emulator | undefined;
  let transport: EmlApiQueueTransport | undefined;
  let transporter: Transporter<OutboxQueuedMessageInfo> | undefined;
  const started = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`the outbox fixture's ${what} is not started (used outside a test?)`);
    return value;
  };
  const connection = (): RedisConnectionInput => (under ? under.connection : started(server, 'Redis').url);
  const prefix = () => under?.prefix ?? 'bull';
  const workerOptions = (more: Partial<OutboxWorkerOptions> = {}): OutboxWorkerOptions => ({
    connection: connection(),
    prefix: prefix(),
    apiKey: started(emu, 'emulator').apiKey,
    baseUrl: started(emu, 'emulator').url,
    cleanupInterval: 0,
    ...options.worker,
    ...more,
  });
  const workers = inProcessWorkers(() => workerOptions());

  beforeAll(async () => {
    const redis = options.kind ? startOutboxRedis(options.kind) : startRedisServer(options.redis);
    const [r, e] = await Promise.all([redis, startEmulator(options.emulator)]);
    if (options.kind) under = r as OutboxRedisUnderTest;
    else server = r as RedisServer;
    emu = e;
    transport = new EmlApiQueueTransport({ connection: connection(), prefix: prefix(), ...options.transport });
    transporter = nodemailer.createTransport(transport) as unknown as Transporter<OutboxQueuedMessageInfo>;
  });

  afterAll(async () => {
    await transport?.close();
    await emu?.close();
    await (under ?? server)?.stop();
  });

  beforeEach(async () => {
    const clean = options.clean ?? 'queue';
    if (clean === 'nothing') return;
    emu!.reset();
    emu!.setFaults(undefined);
    // Every job, stored message and key of the outbox (its parked set, its owner): obliterate leaves those.
    if (clean === 'queue') await purgeOutbox(transport!.queue, { force: true });
    else if (clean === 'redis') await (under ? under.flushall() : server!.client.flushall());
  });

  afterEach(() => workers.closeAll());

  return {
    get redis() {
      return started(under ?? server, 'Redis');
    },
    get emu() {
      return started(emu, 'emulator');
    },
    get connection() {
      return connection();
    },
    get prefix() {
      return prefix();
    },
    get transport() {
      return started(transport, 'producer');
    },
    get transporter() {
      return started(transporter, 'producer');
    },
    workers,
    workerOptions,
  };
}
