import type { WorkerOptions } from 'bullmq';
import type { EmlApiClientOptions } from '../client/client-options.js';
import type { EmlApiLogger } from '../shared/logger.js';
import type { RedisConnectionInput } from './redis-connection.js';
import type { OutboxEncryption } from './content-cipher.js';

/**
 * A global rate: at most `max` sends start per `duration` ms, counted in
 * Redis across every worker of the queue (BullMQ's rate limiter).
 *
 * @example
 * const limiter: OutboxRateLimit = { max: 20, duration: 1000 }; // 20 per second, all workers together
 */
export interface OutboxRateLimit {
  /** Sends per window. */
  max: number;
  /** Window in ms. */
  duration: number;
}

/**
 * BullMQ worker options the outbox lets through, e.g. `lockDuration`,
 * `stalledInterval` and `maxStalledCount` (how fast the jobs of a crashed
 * worker go to another one), or `name`.
 *
 * @example
 * const workerOptions: OutboxWorkerTuning = { name: os.hostname(), lockDuration: 60_000, maxStalledCount: 3 };
 */
export type OutboxWorkerTuning = Omit<
  WorkerOptions,
  'connection' | 'concurrency' | 'limiter' | 'prefix' | 'autorun' | 'settings' | 'useWorkerThreads'
>;

/**
 * Options of {@link startEmlApiWorker}: where the queue is, how to reach the
 * service (every {@link EmlApiClientOptions} option), and how fast to send.
 *
 * @example
 * await startEmlApiWorker({
 *   connection: process.env.REDIS_URL!,
 *   apiKey: process.env.EML_API_KEY!,
 *   baseUrl: 'https://api.mail.example.com',
 *   concurrency: 10,
 *   limiter: { max: 50, duration: 1000 },
 * });
 */
export interface EmlApiWorkerOptions extends Omit<EmlApiClientOptions, 'spool'> {
  /** Redis: a `redis://` or `rediss://` URL, ioredis options, or an ioredis instance (which you then close). */
  connection: RedisConnectionInput;
  /**
   * Name of the BullMQ queue, as the producers use it.
   * @default 'eml-api'
   */
  queueName?: string;
  /**
   * Prefix of the queue's Redis keys, as the producers use it.
   * @default 'bull'
   */
  prefix?: string;
  /**
   * Sends this worker runs at once.
   * @default 5
   */
  concurrency?: number;
  /**
   * Global rate limit, across every worker of the queue.
   * @default undefined (no limit but the service's 429s, which pause every worker)
   */
  limiter?: OutboxRateLimit;
  /**
   * Requests in flight at once (the connection pool of this worker's client).
   * @default concurrency
   */
  maxConnections?: number;
  /**
   * The client's own, in-process retries. BullMQ retries failed sends on the
   * queue's schedule (and a 429 pauses the queue), so the worker's client
   * makes one attempt per job run by default.
   * @default false
   */
  retries?: EmlApiClientOptions['retries'];
  /**
   * How often this worker sweeps stored content whose job is gone (removed
   * by age, by hand, or a crash between storing and queueing), in ms; 0
   * turns it off. One worker of the queue sweeps at a time (a lock in Redis):
   * the others skip that round.
   * @default 600000 (10 minutes)
   */
  cleanupInterval?: number;
  /**
   * More BullMQ worker options.
   * @default BullMQ's (lockDuration 30 s, stalledInterval 30 s, maxStalledCount 1)
   */
  workerOptions?: OutboxWorkerTuning;
  /**
   * The keys producers encrypt queued mail with (their `encryption`
   * option): the worker decrypts each job with the key it names, so keep
   * older keys here while their jobs may still be queued. `keyId` is not
   * needed. A job whose key the worker does not hold is retried (for a
   * worker that holds it), not failed.
   * @default undefined (no encrypted job can be sent)
   * @example
   * startEmlApiWorker({ connection, apiKey, baseUrl, encryption: { keys: { k2: process.env.OUTBOX_KEY_K2!, k1: process.env.OUTBOX_KEY_K1! } } });
   */
  encryption?: OutboxEncryption;
  /**
   * Where the worker logs: `true` for the console, or a logger object. The API key is never logged.
   * @default false
   */
  logger?: boolean | EmlApiLogger;
}
