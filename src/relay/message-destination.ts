import { AsyncLocalStorage } from 'node:async_hooks';
import type { SpooledMessage } from '../body/message-spool.js';
import { loggerOption, type EmlApiLogger } from '../shared/options-kit.js';
import { EmlApiError } from '../shared/eml-api-error.js';
import type { EmlApiClient } from '../client/eml-api-client.js';
import { outboxFailureReply, serviceFailureReply, type KeyOwner, type SmtpReply } from './smtp-replies.js';
import { EmlApiQueueTransport } from '../queue/eml-api-queue-transport.js';
import { MAX_CONCURRENCY, type EmlApiQueueTransportOptions } from '../queue/queue-transport-options.js';
import { outboxRedisReadiness } from '../queue/redis-settings.js';
import { queueClient } from '../queue/bullmq-internals.js';
import { queueLocationOf } from '../queue/queue-location.js';

/** A message the relay received and checked, ready to leave. */
export interface RelayedMessage {
  /** The message as it is to be uploaded; the relay disposes of it after {@link MessageDestination.deliver} settles. */
  readonly spooled: SpooledMessage;
  readonly idempotencyKey: string;
  /** The Message-ID header: the client's, or the one the relay added. */
  readonly messageId: string;
  /** `MAIL FROM` (not used by the service, which sets its own return path) and the `RCPT TO` recipients. */
  readonly envelope: { readonly from: string; readonly to: readonly string[] };
}

/** Who a message is sent for: the client holding the API key, and whose key it is. */
export interface MessageSender {
  readonly client: EmlApiClient;
  readonly owner: KeyOwner;
  /** The SMTP client it comes from, as {@link UploadShares} tells clients apart: its login, or its address. */
  readonly identity: string;
  /** The `identitySecret` of the key the client sends with: it keys the message's identity. */
  readonly identitySecret: Buffer;
}

/** What a destination answers once it holds the message safely. */
export interface DeliveryReceipt {
  /** The id named in `250 2.0.0 Ok: <id>` and in the log: the service's id, or the outbox's. */
  readonly id: string | undefined;
}

/**
 * Where an accepted message goes. The relay answers `250` once `deliver` resolves, so a destination resolves only
 * when the message is safe: the service accepted it, or the outbox stored it.
 */
export interface MessageDestination {
  /** Names the destination in logs, e.g. `service` or `outbox`. */
  readonly name: string;
  deliver(message: RelayedMessage, sender: MessageSender, signal: AbortSignal): Promise<DeliveryReceipt>;
  /** The SMTP reply to a failure of {@link deliver}: what the client needs to know, nothing of the destination's insides. */
  reply(err: unknown, owner: KeyOwner): SmtpReply;
  /** Checks, before the relay listens, that the destination can keep what it is given (the outbox's Redis). */
  ready?(): Promise<void>;
  /** Checks, for `/readyz`, that the destination can keep what it is given now (quietly: probes repeat it). */
  readiness?(): Promise<void>;
  /** Stops the destination, letting deliveries in progress finish. */
  close(): Promise<void>;
}

/** Uploads each message through the sender's client, its slots shared fairly among SMTP clients. */
export function directDestination(shares: UploadShares = new UploadShares()): MessageDestination {
  return {
    name: 'service',
    async deliver(message, sender, signal) {
      const release = await shares.acquire(sender.client, sender.identity, signal);
      try {
        const { result } = await sender.client.send({
          kind: 'eml',
          body: message.spooled.body,
          idempotencyKey: message.idempotencyKey,
          signal,
        });
        return { id: result.id };
      } finally {
        release();
      }
    },
    reply: serviceFailureReply,
    close: () => Promise.resolve(),
  };
}

/**
 * The destination of the `queue` option: the outbox, whose workers send the message under its idempotency key.
 * @param queue a queue transport the caller owns (left open on close), or the options of one the relay makes
 */
export function queueDestination(
  queue: EmlApiQueueTransport | EmlApiQueueTransportOptions,
  maxClients: number,
  logger: EmlApiLogger,
): MessageDestination {
  const owned = !(queue instanceof EmlApiQueueTransport);
  // A relay's messages are spooled already, one per connection at a time: a lower limit only makes clients
  // wait in line for Redis.
  const transport =
    queue instanceof EmlApiQueueTransport
      ? queue
      : new EmlApiQueueTransport({
          concurrency: Math.min(maxClients, MAX_CONCURRENCY),
          ...queue,
          logger: queueLogger(queue.logger, logger),
        });
  const { producer } = transport;
  return {
    name: 'outbox',
    async deliver(message, _sender, signal) {
      const { spooled } = message;
      const info = await producer.enqueue(
        {
          content: spooled.bytes ?? spooled.open(),
          size: spooled.size,
          envelope: { from: message.envelope.from || false, to: message.envelope.to },
          messageId: message.messageId,
          idempotencyKey: message.idempotencyKey,
        },
        { signal },
      );
      return { id: info.queueId };
    },
    reply: outboxFailureReply,
    // Redis must answer and keep what is queued (noeviction; AOF as the transport's durability asks).
    ready: async () => {
      await transport.verify();
    },
    readiness: () => outboxRedisReadiness(() => queueClient(transport.queue), queueLocationOf(transport.queue)).check(),
    close: () => (owned ? transport.close() : Promise.resolve()),
  };
}

/** The fields of the message being handled (its session, client, login), for the lines its destination logs. */
const messageLogFields = new AsyncLocalStorage<Readonly<Record<string, unknown>>>();

/** Runs a message's handling with `fields` on every line the destination logs meanwhile. */
export function withMessageLogFields<T>(fields: Readonly<Record<string, unknown>>, work: () => T): T {
  return messageLogFields.run(fields, work);
}

function withSessionFields(logger: EmlApiLogger): EmlApiLogger {
  const level =
    (write: EmlApiLogger['info']): EmlApiLogger['info'] =>
    (meta, message) => {
      const fields = messageLogFields.getStore();
      write.call(logger, fields ? { ...fields, ...meta } : meta, message);
    };
  return { debug: level(logger.debug), info: level(logger.info), warn: level(logger.warn), error: level(logger.error) };
}

/** The one the options name, else the relay's, with the message's session fields; a non-logger for the transport. */
function queueLogger(value: unknown, relayLogger: EmlApiLogger): EmlApiQueueTransportOptions['logger'] {
  if (value === undefined) return withSessionFields(relayLogger);
  if (typeof value === 'boolean' || (typeof value === 'object' && value !== null)) {
    return withSessionFields(loggerOption(value));
  }
  return value as EmlApiQueueTransportOptions['logger'];
}

interface SlotWaiter {
  readonly identity: string;
  grant(): void;
}

/** The upload slots of one client (its `maxConnections`), and who holds them. */
interface SlotPool {
  readonly size: number;
  active: number;
  readonly held: Map<string, number>;
  readonly waiters: SlotWaiter[];
}

/**
 * Shares the upload slots of each client the relay sends with (its `maxConnections`) among the SMTP clients whose
 * messages use it, so that one client's backlog does not keep another's waiting: a freed slot goes to the waiting
 * client that holds the fewest, and while another client is connected or waiting, a client that holds a slot does
 * not take the last free one. SMTP clients are told apart by their login, or by their address ({@link join}).
 */
export class UploadShares {
  /** Sessions connected now, per SMTP client. */
  readonly #present = new Map<string, number>();
  readonly #sessions = new WeakMap<object, string>();
  readonly #pools = new WeakMap<EmlApiClient, SlotPool>();
  /** Pools with messages waiting: looked at again when a client leaves. */
  readonly #busy = new Set<SlotPool>();

  /** Counts a session as its SMTP client's from now on (again after AUTH, with its login); replaces its former one. */
  join(session: object, identity: string): void {
    const before = this.#sessions.get(session);
    if (before === identity) return;
    this.#sessions.set(session, identity);
    this.#present.set(identity, (this.#present.get(identity) ?? 0) + 1);
    if (before !== undefined) this.#forget(before);
  }

  leave(session: object): void {
    const identity = this.#sessions.get(session);
    if (identity === undefined) return;
    this.#sessions.delete(session);
    this.#forget(identity);
  }

  /**
   * @returns gives the slot back (call it once the upload settled)
   * @throws the signal's reason when it aborts while waiting; `ETIMEDOUT` past the client's `timeouts.total`
   */
  async acquire(client: EmlApiClient, identity: string, signal: AbortSignal): Promise<() => void> {
    signal.throwIfAborted();
    const pool = this.#pool(client);
    if (pool.waiters.length > 0 || !this.#mayTake(pool, identity)) {
      await this.#wait(pool, identity, signal, client.settings.timeouts.total);
    } else {
      this.#take(pool, identity);
    }
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      pool.active--;
      const left = (pool.held.get(identity) ?? 1) - 1;
      if (left > 0) pool.held.set(identity, left);
      else pool.held.delete(identity);
      this.#dispatch(pool);
    };
  }

  #pool(client: EmlApiClient): SlotPool {
    let pool = this.#pools.get(client);
    if (!pool) {
      pool = { size: client.settings.maxConnections, active: 0, held: new Map(), waiters: [] };
      this.#pools.set(client, pool);
    }
    return pool;
  }

  #wait(pool: SlotPool, identity: string, signal: AbortSignal, total: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          drop(
            new EmlApiError('ETIMEDOUT', `No upload slot came free within timeouts.total (${total} ms)`, {
              permanent: false,
            }),
          ),
        total,
      );
      timer.unref();
      const drop = (err: unknown) => {
        const at = pool.waiters.indexOf(waiter);
        if (at !== -1) pool.waiters.splice(at, 1);
        if (pool.waiters.length === 0) this.#busy.delete(pool);
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        reject(err);
        // A waiter that leaves may have held back the last free slot from the others.
        this.#dispatch(pool);
      };
      const onAbort = () => drop(signal.reason);
      const waiter: SlotWaiter = {
        identity,
        grant: () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      signal.addEventListener('abort', onAbort, { once: true });
      pool.waiters.push(waiter);
      this.#busy.add(pool);
      // Others may wait for what this one may take (a slot that only a client holding none may have).
      this.#dispatch(pool);
    });
  }

  /** Grants free slots to the waiters, those holding the fewest first. */
  #dispatch(pool: SlotPool): void {
    while (pool.active < pool.size && pool.waiters.length > 0) {
      let next = -1;
      for (let i = 0; i < pool.waiters.length; i++) {
        const { identity } = pool.waiters[i]!;
        if (!this.#mayTake(pool, identity)) continue;
        if (next === -1 || (pool.held.get(identity) ?? 0) < (pool.held.get(pool.waiters[next]!.identity) ?? 0)) {
          next = i;
        }
      }
      if (next === -1) return;
      const [waiter] = pool.waiters.splice(next, 1);
      this.#take(pool, waiter!.identity);
      waiter!.grant();
    }
    if (pool.waiters.length === 0) this.#busy.delete(pool);
  }

  /** Whether `identity` may take a free slot now: not the last one while it holds some and others may need it. */
  #mayTake(pool: SlotPool, identity: string): boolean {
    const free = pool.size - pool.active;
    if (free <= 0) return false;
    if (free > 1 || (pool.held.get(identity) ?? 0) === 0) return true;
    return !this.#othersPresent(identity) && pool.waiters.every((w) => w.identity === identity);
  }

  #take(pool: SlotPool, identity: string): void {
    pool.active++;
    pool.held.set(identity, (pool.held.get(identity) ?? 0) + 1);
  }

  #othersPresent(identity: string): boolean {
    return this.#present.size > 1 || (this.#present.size === 1 && !this.#present.has(identity));
  }

  #forget(identity: string): void {
    const left = (this.#present.get(identity) ?? 1) - 1;
    if (left > 0) {
      this.#present.set(identity, left);
      return;
    }
    this.#present.delete(identity);
    // The last free slot of a pool may now go to a client that holds some.
    for (const pool of [...this.#busy]) this.#dispatch(pool);
  }
}
